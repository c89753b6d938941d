"""The cost model's recommendation, measured beside Grain's own choice.

``python -m experiments recommend --model_file=MODEL.json`` takes a calibrated cost model
(``python -m analysis costmodel fit``) and the configuration it was fitted around (the fastest
measured one of its folder, or ``--base=CONFIGS.csv``). It measures three configurations of the
same pipeline, each ``repeats`` times, interleaved, in a process per run (the sweep's runner):

- **recommended**: ``analysis.costmodel.recommend``, the cheapest loader configuration (fewest
  workers, then least host and device memory from ``memsim.footprint``) whose predicted samples/s
  is within 5% of the best one under the CPU and RAM budgets;
- **best predicted**: the fastest predicted configuration under the same budgets;
- **grain**: what ``grain.experimental.pick_performance_config`` picks for the same dataset with
  the same RAM budget. Grain sizes workers and read buffers from the element size and the budget
  alone, and ignores the step and the cores.

Rows go to ``rows.csv`` (resumable, as a sweep's), ``recommend.json`` keeps the candidates'
table and the three choices, and ``costmodel.json`` is a copy of the model they came from. The printed table compares measured and predicted.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path

import pandas as pd

from experiments import configs, env as env_lib, results, runloop
from experiments.configs import ConfigError, check


@dataclasses.dataclass(frozen=True)
class RecommendConfig:
    model_file: str = ""  # MODEL.json from 'python -m analysis costmodel fit' (required)
    base: str = ""  # configurations CSV whose fastest row is the pipeline (default: the model's folder)
    ram_budget_mb: float = 1024.0  # host memory the loader may use: for the recommendation and for Grain
    cpu_budget: int = 0  # cores the workers may take (0: the model's host cores)
    tolerance: float = 0.05
    repeats: int = 3
    order_seed: int = 0
    min_steps: int = 20
    min_measure_s: float = 1.0
    max_warmup_s: float = 1.0
    config_timeout_s: float = 600.0

    def __post_init__(self):
        check(bool(self.model_file), "model_file", self.model_file,
              "give a model: python -m analysis costmodel fit RESULTS_DIR --out MODEL.json")
        check(Path(self.model_file).is_file(), "model_file", self.model_file, "no such file")
        check(self.ram_budget_mb > 0, "ram_budget_mb", self.ram_budget_mb, "a positive number of MiB")
        check(self.cpu_budget >= 0, "cpu_budget", self.cpu_budget, "a number of cores >= 0 (0: the model's)")
        check(0 <= self.tolerance < 1, "tolerance", self.tolerance, "a fraction in [0, 1), e.g. 0.05")
        check(self.repeats >= 1, "repeats", self.repeats, "must be >= 1")


def quick() -> RecommendConfig:
    """Needs ``--model_file``; three configurations × 3 repeats, 1 s windows (about 1.5 minutes here)."""
    return RecommendConfig(model_file="results/cpu-2core/study-components/costmodel.json")


PRESETS = {"quick": quick}


def grain_choice(tc, ram_budget_mb: float) -> dict:
    """The knobs ``grain.experimental.pick_performance_config`` picks for ``tc``'s dataset (built
    without workers or prefetch, as Grain inspects it): ``num_workers``, ``read_threads`` and
    ``read_buffer_size`` (its ReadOptions)."""
    import grain.experimental as ge
    from experiments.loader import build_dataset
    lc = dataclasses.replace(tc.loader_config(), num_workers=0, prefetch_buffer_size=0)
    pc = ge.pick_performance_config(build_dataset(lc, stage_timing=False), ram_budget_mb=int(ram_budget_mb),
                                    max_workers=None, max_buffer_size=None)
    out = {"num_workers": int(pc.multiprocessing_options.num_workers)}
    ro = pc.read_options
    if ro is not None:
        out["read_threads"] = int(ro.num_threads)
        out["read_buffer_size"] = int(ro.prefetch_buffer_size)
    return out


def choices(cfg: RecommendConfig):
    """(base TrainConfig, the recommendation table, {label: TrainConfig}) of ``cfg``."""
    from analysis.costmodel.cli import base_config
    from analysis.costmodel.features import CostModelError
    from analysis.costmodel.model import load
    from analysis.costmodel.recommend import recommend
    from experiments.memory import config_from_row
    try:
        model = load(cfg.model_file)
        base = base_config(model, cfg.base or None, "recommend")
        table = recommend(model, base, cpu_budget=cfg.cpu_budget or None, tolerance=cfg.tolerance,
                          ram_budget_bytes=cfg.ram_budget_mb * 2**20)
    except CostModelError as e:
        raise ConfigError(str(e)) from None
    tc0 = config_from_row(base.iloc[0])
    tc0 = dataclasses.replace(tc0, min_steps=cfg.min_steps, min_measure_s=cfg.min_measure_s,
                              max_warmup_s=cfg.max_warmup_s, grain_stats=False)
    ok = table[table.within_budget]
    rec, best = table[table.recommended].iloc[0], ok.loc[ok.samples_per_s.idxmax()]

    def knobs(r):
        return {"num_workers": int(r.num_workers), "prefetch_buffer_size": int(r.prefetch_buffer_size), "feed": r.feed}
    out = {"recommended": configs.apply_overrides(tc0, knobs(rec)),
           "best predicted": configs.apply_overrides(tc0, knobs(best)),
           "grain": configs.apply_overrides(tc0, grain_choice(tc0, cfg.ram_budget_mb))}
    return tc0, table, out


def run(cfg: RecommendConfig, out_dir: Path, progress: bool = True) -> pd.DataFrame:
    """Measures the choices of ``cfg`` into ``out_dir`` (resumable); returns every row."""
    from analysis.costmodel.model import load, predict
    from experiments import sweep
    _, table, picks = choices(cfg)
    labels, tcs = [], []  # a configuration two choices share is measured once, under both names
    for k, t in picks.items():
        if t in tcs:
            labels[tcs.index(t)] += f" = {k}"
        else:
            labels.append(k)
            tcs.append(t)
    model = load(cfg.model_file)
    pred = predict(model, pd.DataFrame([configs.to_flat_dict(t) for t in tcs]))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cfg.model_file, out_dir / "costmodel.json")  # the model the predictions came from
    results.write_json_atomic(out_dir / "recommend.json", {
        "config": configs.to_flat_dict(cfg), "candidates": json.loads(table.to_json(orient="records")),
        "choices": {k: {"config": configs.to_flat_dict(t), "predicted_samples_per_s": float(p), "extrapolated": e}
                    for lab, t, p, e in zip(labels, tcs, pred.samples_per_s, pred.extrapolated)
                    for k in lab.split(" = ")}},
        sort_keys=False)
    environment = env_lib.environment()
    flats = [configs.to_flat_dict(t) for t in tcs]
    cids = [results.config_id(f) for f in flats]
    jobs = [runloop.Job(cids[i], rep, f"r{rep} {labels[i]}", i)
            for i, rep in sweep.schedule(len(tcs), cfg.repeats, cfg.order_seed)]

    def head(job):
        i = job.payload
        return {"config_id": job.config_id, "repeat": job.repeat, "choice": labels[i],
                "predicted_samples_per_s": float(pred.samples_per_s.iloc[i]),
                "predicted_extrapolated": str(pred.extrapolated.iloc[i])}

    def failed_row(job, error, wall_s):
        return {**head(job), **flats[job.payload], **environment, "status": "failed", "error": error, "wall_s": wall_s}

    def work(job):
        t0 = time.perf_counter()
        out = runner.run(tcs[job.payload], cfg.config_timeout_s)
        if "row" not in out:
            return runloop.Outcome(failed_row(job, out["error"], time.perf_counter() - t0))
        return runloop.Outcome({**head(job), **out["row"]}, {"steps": out.get("steps")})

    header = {"experiment": "recommend", "config": configs.to_flat_dict(cfg), "environment": environment}
    runner = sweep.Runner()
    try:
        return runloop.run_jobs(out_dir, jobs, work, failed_row, header=header, desc="recommend", unit="run",
                                progress=progress)
    finally:
        runner.close()


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per choice: its loader knobs, measured samples/s (median and interval over repeats),
    predicted samples/s and the relative error."""
    cur = results.current(rows)
    ok = cur[cur.status == "ok"]
    if not len(ok):
        return pd.DataFrame()
    s = results.summarize(ok)
    first = ok.drop_duplicates("config_id").set_index("config_id")
    s["choice"] = s.config_id.map(first.choice)
    s["predicted"] = s.config_id.map(first.predicted_samples_per_s)
    s["rel_error"] = s.predicted / s.samples_per_s - 1
    if "predicted_extrapolated" in first:
        s["extrapolated"] = s.config_id.map(first.predicted_extrapolated).fillna("").replace("nan", "")
    cols = ["choice", "num_workers", "prefetch_buffer_size", "feed", "read_threads", "read_buffer_size",
            "samples_per_s", "samples_per_s_lo", "samples_per_s_hi", "predicted", "rel_error", "repeats",
            "extrapolated"]
    return s[[c for c in cols if c in s]]


def main(cfg: RecommendConfig, preset: str, run_id: str | None = None, results_root: str | None = None) -> int:
    from experiments import sweep
    out = results.run_dir("recommend", run_id, results_root, resume=run_id is not None)
    rows, code = sweep.run_interruptible(lambda: run(cfg, out), out)
    if code is not None:
        return code
    s = summary(rows)
    if len(s):
        print(s.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    failed = int((results.current(rows).status != "ok").sum())
    print(f"rows: {out / 'rows.csv'}")
    if failed:
        print(f"error: {failed} run(s) failed; their rows name the error", file=sys.stderr)
        return 1
    return 0
