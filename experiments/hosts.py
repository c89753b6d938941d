"""The straggler check: N data-parallel processes, one of them slowed on purpose, measured and predicted.

``python -m experiments hosts [--preset smoke|quick] [--key=value]`` runs, for each N in ``hosts``,
the training run of global batch ``batch_size`` on N processes (``experiments.distributed.launch``;
each process loads ``batch_size / N``) with process ``slow_process`` slowed (a heavier
``slow_augment_cost`` and/or ``slow_num_workers`` on that process only), and predicts its global
samples/s with ``memsim.multihost.straggler_hosts`` from measurements that never see the
multi-process run: a normal and a slowed process, each measured on its own (``experiments.train`` in
a child process) at the per-process batch ``batch_size / N``, and for N > 1 the cross-process
all-reduce its step pays, measured apart (``experiments.distributed.allreduce_probe``: N processes
started and pinned as the run's are, reducing the step's operands — one float32 array per
parameter leaf and the loss — and the same bytes as one array, ``collective_repeats`` times each). The prediction never sees the multi-process run.

The core share. N processes on a C-core machine get C/N cores each; a reference measured with the
whole machine overstates what each of them gets. With ``reference=core_share`` (default) the
reference runs pinned (``os.sched_setaffinity``, inherited by its loader workers and sized into
XLA's thread pool) to max(1, C // N) cores, and when N > C (half a core each: no affinity can
give that) its CPU times (transform and step) are scaled by ``cpu_dilation`` = pinned · N / C,
i.e. the N processes are taken to share the cores evenly (processor sharing), which overstates
the slowdown when processes idle while waiting for the slowed one. ``reference=whole_machine``
measures the reference on every core, unscaled. Rows record which was used; the error is reported
either way.

Every single-process reference and every multi-process run is one job of the resumable run loop
(``experiments.runloop``), repeats interleaved (each round in a freshly shuffled order), one row per
job in ``rows.csv`` (``role`` = reference | multi | collective); per-step times of references in
``steps.csv``, per-process rows of multi runs in ``processes.csv``, every probed size of collective
jobs in ``collective.csv``. At the end ``hosts.csv`` holds one row per N: the measured global
samples/s (median, interval over repeats), the prediction, ``allreduce_s`` (the probe's median at
the gradient bytes, added to each step), ``predicted_no_allreduce_samples_per_s`` (the prediction
without it, for comparison), ``rel_error``, ``within_interval``, which process was slowed and how.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from pathlib import Path
from typing import Callable, Literal

import numpy as np
import pandas as pd

from experiments import configs, env as env_lib, results, runloop
from experiments.configs import ConfigError, check
from experiments.train import TrainConfig

TRAIN_KEYS = ("model", "width", "depth", "source", "num_samples", "image_size", "batch_size", "num_workers",
              "prefetch_buffer_size", "feed", "device_buffer_size", "augment_cost", "min_steps", "min_measure_s",
              "warmup_steps", "max_warmup_s", "seed")


@dataclasses.dataclass(frozen=True)
class HostsConfig:
    # the training run (batch_size is the global batch: each of N processes loads batch_size / N)
    model: Literal["mlp", "cnn", "transformer"] = "mlp"
    width: int = 128
    depth: int = 2
    source: Literal["arrayrecord", "memmap", "ram"] = "ram"
    num_samples: int = 2048
    image_size: int = 32
    batch_size: int = 64
    num_workers: int = 0
    prefetch_buffer_size: int = 2
    feed: Literal["none", "double_buffer", "grain_device_put"] = "double_buffer"
    device_buffer_size: int = 2
    augment_cost: int = 0
    min_steps: int = 20
    min_measure_s: float = 1.0
    warmup_steps: int = 3
    max_warmup_s: float = 1.0
    seed: int = 0
    # the processes, and the one slowed on purpose (-1: the last of each N; an id >= N slows none there)
    hosts: tuple[int, ...] = (1, 2, 4)
    slow_process: int = -1
    slow_augment_cost: int | None = 8
    slow_num_workers: int | None = None
    # how the single-process references are measured (see the module docstring)
    reference: Literal["core_share", "whole_machine"] = "core_share"
    repeats: int = 2
    collective_repeats: int = 30   # timed all-reduces per size in one collective job
    order_seed: int = 0
    timeout_s: float = 300.0
    sim_items: int = 1000

    def __post_init__(self):
        check(len(self.hosts) > 0, "hosts", self.hosts, "give at least one number of processes")
        for n in self.hosts:
            check(n >= 1, "hosts", self.hosts, f"every number of processes must be >= 1 ({n} is not)")
            check(self.batch_size % n == 0, "hosts", self.hosts,
                  f"every number of processes must divide batch_size ({self.batch_size}): {n} does not")
        check(len(set(self.hosts)) == len(self.hosts), "hosts", self.hosts, "numbers of processes must differ")
        check(self.slow_process >= -1, "slow_process", self.slow_process, "use -1 (the last process) or an id >= 0")
        check(self.slow_augment_cost is not None or self.slow_num_workers is not None, "slow_augment_cost",
              self.slow_augment_cost, "nothing would be slowed: set slow_augment_cost and/or slow_num_workers")
        check(self.slow_augment_cost is None or self.slow_augment_cost >= 0, "slow_augment_cost",
              self.slow_augment_cost, "must be >= 0")
        check(self.slow_num_workers is None or self.slow_num_workers >= 0, "slow_num_workers",
              self.slow_num_workers, "must be >= 0")
        check(self.repeats >= 1, "repeats", self.repeats, "must be >= 1")
        check(self.collective_repeats >= 1, "collective_repeats", self.collective_repeats, "must be >= 1")
        check(self.timeout_s > 0, "timeout_s", self.timeout_s, "must be positive")
        check(self.sim_items >= 100, "sim_items", self.sim_items, "must be >= 100")
        from experiments.distributed import check_launch
        for n in self.hosts:  # every run must be valid, before any work: the references and the launch
            self.train_config(n, slowed=True, per_process=True)
            self.train_config(n, slowed=False, per_process=True)
            slowed = self.slowed_id(n)
            try:
                check_launch(self.train_config(n, False, False), n,
                             {slowed: self.slow_overrides()} if slowed >= 0 else None)
            except ConfigError as e:
                raise ConfigError(f"the run of N={n} processes is impossible: {e}") from None

    def slow_overrides(self) -> dict:
        out = {}
        if self.slow_augment_cost is not None:
            out["augment_cost"] = self.slow_augment_cost
        if self.slow_num_workers is not None:
            out["num_workers"] = self.slow_num_workers
        return out

    def slowed_how(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.slow_overrides().items())

    def slowed_id(self, n: int) -> int:
        """The slowed process among ``n`` (-1: none)."""
        p = n - 1 if self.slow_process == -1 else self.slow_process
        return p if p < n else -1

    def train_config(self, n: int, slowed: bool, per_process: bool) -> TrainConfig:
        """The run of ``n`` processes (global batch), or one process of it (``per_process``: batch / n)."""
        kw = {k: getattr(self, k) for k in TRAIN_KEYS}
        if per_process:
            kw["batch_size"] = self.batch_size // n
            if slowed:
                kw.update(self.slow_overrides())
        try:
            return TrainConfig(**kw, grain_stats=False)
        except ConfigError as e:
            raise ConfigError(f"the {'slowed ' if slowed else ''}process of N={n} is impossible: {e}") from None


def smoke() -> HostsConfig:
    """N = 1, 2 once each, small windows: under a minute on a 2-core CPU."""
    return HostsConfig(width=32, depth=1, num_samples=256, image_size=16, batch_size=32, hosts=(1, 2),
                       min_steps=6, min_measure_s=0.0, warmup_steps=2, max_warmup_s=0.3, repeats=1,
                       collective_repeats=10, sim_items=400)


def quick() -> HostsConfig:
    """N = 1, 2, 4, twice each (interleaved), 1 s windows: a few minutes on a 2-core CPU."""
    return HostsConfig()


PRESETS = {"smoke": smoke, "quick": quick}


# --------------------------------------------------------------------------------------- jobs

def available_cpus() -> list[int]:
    """The CPUs this process may run on."""
    return sorted(os.sched_getaffinity(0))


def cores_for(n: int, reference: str, available: list[int] | None = None) -> tuple[tuple[int, ...] | None, float]:
    """(CPUs a single-process reference for N processes runs on (None: all), cpu_dilation).

    >>> cores_for(1, "core_share", [0, 1]), cores_for(2, "core_share", [0, 1]), cores_for(4, "core_share", [0, 1])
    (((0, 1), 1.0), ((0,), 1.0), ((0,), 2.0))
    >>> cores_for(4, "whole_machine", [0, 1])
    (None, 1.0)
    """
    cpus = available_cpus() if available is None else list(available)
    if reference == "whole_machine":
        return None, 1.0
    k = max(1, len(cpus) // n)
    return tuple(cpus[:k]), max(1.0, k * n / len(cpus))


def gradient_leaves(cfg: HostsConfig) -> tuple[int, list[int]]:
    """(parameters, bytes of each operand of the step's gradient all-reduce) of the model the runs
    train, from shapes only (``nnx.eval_shape``, no weights allocated): one float32 operand per
    parameter leaf, and the scalar loss the step averages with them (XLA combines them into one
    tuple ``all-reduce``; gloo on CPU reduces it operand by operand, so their number matters as
    much as their bytes). The parameter count is the one the training rows carry as ``params``."""
    import jax
    from flax import nnx
    from experiments.models import make_model, param_counts
    tc = cfg.train_config(1, False, False)
    model = nnx.eval_shape(lambda: make_model(tc.model_config(), seed=tc.seed))
    leaves = [4 * int(x.size) for x in jax.tree.leaves(nnx.state(model, nnx.Param))]
    return param_counts(model)["params"], leaves + [4]


def probe_sizes(leaves: list[int]) -> list:
    """What a collective job probes: the step's all-reduce (one operand per gradient leaf, the
    prediction's term), and the same bytes as one operand (how much the operand count costs).

    >>> probe_sizes([400, 40, 4])
    [[400, 40, 4], 444]
    """
    return [list(leaves), int(sum(leaves))]


@dataclasses.dataclass(frozen=True)
class Item:
    role: str        # reference | multi | collective
    n: int
    kind: str = ""   # reference: normal | slow


def items(cfg: HostsConfig) -> list[Item]:
    out = []
    for n in cfg.hosts:
        slowed = cfg.slowed_id(n) >= 0
        if slowed:
            out.append(Item("reference", n, "slow"))
        if n - int(slowed) > 0:
            out.append(Item("reference", n, "normal"))
        out.append(Item("multi", n))
        if n > 1:
            out.append(Item("collective", n))
    return out


def schedule(n_items: int, repeats: int, order_seed: int) -> list[tuple[int, int]]:
    """(item, repeat) in run order: every round runs every item once, in a freshly shuffled order."""
    out = []
    for r in range(repeats):
        out += [(int(i), r) for i in np.random.default_rng([order_seed, r]).permutation(n_items)]
    return out


def item_id(cfg: HostsConfig, it: Item) -> str:
    flat = configs.to_flat_dict(cfg.train_config(it.n, it.kind == "slow", it.role == "reference"))
    if it.role == "collective":  # the model fixes the bytes; the probe's own knob is its repeats
        flat = {"model": flat["model"], "width": flat["width"], "depth": flat["depth"],
                "image_size": flat["image_size"], "collective_repeats": cfg.collective_repeats}
    return results.config_id({**flat, "role": it.role, "num_processes": it.n, "kind": it.kind,
                              "reference": cfg.reference, "slowed_process": cfg.slowed_id(it.n),
                              "slowed_how": cfg.slowed_how()})


def default_reference(runner) -> Callable:
    def ref(tc: TrainConfig, cores, timeout_s: float) -> dict:
        return runner.run(tc, timeout_s, cores=cores)
    return ref


def default_launch(work_dir: Path):
    """``experiments.distributed.launch`` exchanging its files under ``work_dir`` (in the run folder:
    a run killed before the launcher cleans up leaves nothing in the system's temporary folder)."""
    import functools
    from experiments.distributed import launch
    return functools.partial(launch, work_dir=work_dir)


def default_probe(work_dir: Path):
    """``experiments.distributed.allreduce_probe``, exchanging its files under ``work_dir``."""
    import functools
    from experiments.distributed import allreduce_probe
    return functools.partial(allreduce_probe, work_dir=work_dir)


def run(cfg: HostsConfig, out_dir: Path, *, launch: Callable | None = None, reference: Callable | None = None,
        probe: Callable | None = None, progress: bool = True) -> pd.DataFrame:
    """Runs every (item, repeat) not yet in ``out_dir/rows.csv``, then predicts and compares.

    ``launch`` (default ``experiments.distributed.launch``) runs N processes; ``reference(train_config,
    cores, timeout_s) -> {'row', 'steps'} | {'error'}`` runs one process (default: a child process of
    ``experiments.sweep.Runner`` pinned to ``cores``); ``probe(num_processes, sizes_bytes, repeats=,
    timeout_s=) -> DataFrame`` times the all-reduce (default ``experiments.distributed.allreduce_probe``).
    Returns ``hosts.csv``'s frame (one row per N).
    """
    its = items(cfg)
    environment = env_lib.environment()
    header = {"experiment": "hosts", "config": configs.to_flat_dict(cfg), "environment": environment}
    ids = [item_id(cfg, it) for it in its]
    jobs = [runloop.Job(ids[i], rep, f"r{rep} {its[i].role} N={its[i].n} {its[i].kind}".strip(), i)
            for i, rep in schedule(len(its), cfg.repeats, cfg.order_seed)]

    def head(job: runloop.Job) -> dict:
        it = its[job.payload]
        cores, dil = cores_for(it.n, cfg.reference) if it.role == "reference" else (None, 1.0)
        slowed = cfg.slowed_id(it.n)
        return {"config_id": job.config_id, "repeat": job.repeat, "role": it.role, "num_processes": it.n,
                "kind": it.kind, "reference": cfg.reference if it.role == "reference" else "",
                "cores": len(cores) if cores is not None else len(available_cpus()),
                "cpu_dilation": dil, "slowed_process": slowed, "slowed_how": cfg.slowed_how() if slowed >= 0 else "",
                "global_batch_size": cfg.batch_size}

    def failed_row(job: runloop.Job, error: str, wall_s: float) -> dict:
        return {**head(job), "status": "failed", "error": error, "wall_s": wall_s, **environment}

    def work(job: runloop.Job) -> runloop.Outcome:
        it = its[job.payload]
        h = head(job)
        t0 = time.perf_counter()
        if it.role == "reference":
            cores, _ = cores_for(it.n, cfg.reference)
            out = reference(cfg.train_config(it.n, it.kind == "slow", True), cores, cfg.timeout_s)
            if "row" not in out:
                return runloop.Outcome(failed_row(job, out["error"], time.perf_counter() - t0))
            return runloop.Outcome({**out["row"], **h}, {"steps": out.get("steps")})
        if it.role == "collective":
            params, leaves = gradient_leaves(cfg)
            table = probe(it.n, probe_sizes(leaves), repeats=cfg.collective_repeats, timeout_s=cfg.timeout_s)
            if len(table) != 2:
                raise RuntimeError(f"the probe returned {len(table)} rows for 2 sizes")
            a, one = table.iloc[0], table.iloc[1]  # the step's operands; the same bytes as one operand
            return runloop.Outcome({**h, "status": "ok", "error": "", "params": params,
                                    "gradient_bytes": 4 * params, "size_bytes": int(a["size_bytes"]),
                                    "allreduce_operands": len(leaves), "allreduce_s": float(a["seconds_median"]),
                                    "allreduce_s_p90": float(a["seconds_p90"]),
                                    "allreduce_one_operand_s": float(one["seconds_median"]),
                                    "allreduce_repeats": int(a["repeats"]),
                                    "wall_s": time.perf_counter() - t0, **environment},
                                   {"collective": table})
        slowed = cfg.slowed_id(it.n)
        per = {slowed: cfg.slow_overrides()} if slowed >= 0 else None
        # the run's row and per-process table are written here, through the run loop, with the rest
        res = launch(cfg.train_config(it.n, False, False), it.n, per_process=per, timeout_s=cfg.timeout_s)
        row = res.row.iloc[0].to_dict()
        if "num_processes" in row and int(row["num_processes"]) != it.n:
            raise RuntimeError(f"launch ran {row['num_processes']} processes, asked for {it.n}")
        return runloop.Outcome({**row, **h, "status": row.get("status", "ok")}, {"processes": res.processes})

    runner = None
    if reference is None:
        from experiments.sweep import Runner
        runner = Runner()
        reference = default_reference(runner)
    work_dir = out_dir / "launches"  # emptied by each launch as it ends; a killed one's leftovers stay here
    if launch is None or probe is None:
        work_dir.mkdir(parents=True, exist_ok=True)
    launch = launch if launch is not None else default_launch(work_dir)
    probe = probe if probe is not None else default_probe(work_dir)
    try:
        rows = runloop.run_jobs(out_dir, jobs, work, failed_row, header=header, desc="hosts", unit="run",
                                progress=progress)
    finally:
        if runner is not None:
            runner.close()
        try:
            work_dir.rmdir()  # gone when every launch cleaned up after itself
        except OSError:
            pass
    table = predict_and_compare(cfg, rows, out_dir)
    table.to_csv(out_dir / "hosts.csv", index=False)
    return table


def allreduce_seconds(ok: pd.DataFrame, n: int) -> float:
    """The all-reduce every step of N processes pays: the median over this run's ok collective jobs
    for N of each probe's median (0 for N = 1); ConfigError when N > 1 has none, or when the probe
    reduced another model's gradient than the references trained."""
    if n == 1:
        return 0.0
    col = ok[(ok["role"] == "collective") & (ok["num_processes"] == n)] if "role" in ok else ok.iloc[:0]
    if not len(col) or "allreduce_s" not in col:
        raise ConfigError(f"no ok collective probe for N={n}")
    refs = ok[(ok["role"] == "reference") & (ok["num_processes"] == n)]
    if "params" in refs and "params" in col and refs["params"].notna().any():
        mine = set(pd.to_numeric(col["params"]).astype(int)) | set(pd.to_numeric(refs["params"].dropna()).astype(int))
        if len(mine) > 1:
            raise ConfigError(f"N={n}: the collective probe and the references count different parameters "
                              f"({sorted(mine)})")
    return float(pd.to_numeric(col["allreduce_s"]).median())


def predict_and_compare(cfg: HostsConfig, rows: pd.DataFrame, out_dir: Path) -> pd.DataFrame:
    """One row per N: the prediction from this run's single-process references, beside the
    measured multi-process throughput."""
    from analysis.hosts import compare, host_config, match_rate, predict_stragglers
    cur = results.current(rows)
    ok = cur[cur["status"] == "ok"]
    steps = results.read_csv_rows(out_dir / "steps.csv") if (out_dir / "steps.csv").exists() else pd.DataFrame()
    preds = []
    for n in cfg.hosts:
        slowed = cfg.slowed_id(n)
        _, dil = cores_for(n, cfg.reference)
        p = {"num_processes": n, "slowed_process": slowed, "slowed_how": cfg.slowed_how() if slowed >= 0 else "",
             "reference": cfg.reference, "cpu_dilation": dil}
        calib, staged = {}, {}
        try:
            for kind in ("normal", "slow"):
                ref = ok[(ok["role"] == "reference") & (ok["num_processes"] == n) & (ok["kind"] == kind)]
                needed = slowed >= 0 if kind == "slow" else n - int(slowed >= 0) > 0
                if not len(ref):
                    if needed:
                        raise ConfigError(f"no ok single-process {kind} reference for N={n}")
                    calib[kind] = staged[kind] = None
                    continue
                st = steps[steps["config_id"].isin(ref["config_id"])] if len(steps) and "config_id" in steps else None
                rate = float(pd.to_numeric(ref["samples_per_s"]).median())
                # fitted on the reference's own conditions, then stretched to the process's CPU share
                k = match_rate(host_config(ref, st), rate, n_items=cfg.sim_items, seed=cfg.seed)
                calib[kind] = host_config(ref, st, cpu_dilation=k * dil)
                staged[kind] = host_config(ref, st, cpu_dilation=dil)
                p[f"{kind}_reference_samples_per_s"] = rate
                p[f"{kind}_cpu_factor"] = k
            sim = dict(slow_count=int(slowed >= 0), n_items=cfg.sim_items, seed=cfg.seed)
            p["predicted_no_allreduce_samples_per_s"] = predict_stragglers(
                calib["normal"], calib["slow"], n, **sim)["predicted_samples_per_s"]
            ar = allreduce_seconds(ok, n)
            p["allreduce_s"] = ar
            p.update(predict_stragglers(calib["normal"], calib["slow"], n, allreduce_s=ar, **sim))
            p["stage_times_predicted_samples_per_s"] = predict_stragglers(
                staged["normal"], staged["slow"], n, allreduce_s=ar, **sim)["predicted_samples_per_s"]
            p["prediction_error"] = ""
        except ConfigError as e:
            p.update({"predicted_samples_per_s": math.nan, "prediction_error": str(e)})
        preds.append(p)
    preds = pd.DataFrame(preds)
    multi = ok[ok["role"] == "multi"] if "role" in ok else ok.iloc[:0]
    if "samples_per_s" not in multi:  # no multi-process run succeeded
        multi = pd.DataFrame({"num_processes": pd.Series(dtype=int), "samples_per_s": pd.Series(dtype=float)})
    return compare(multi, preds)


# ---------------------------------------------------------------------------------------- CLI

def summary(table: pd.DataFrame) -> str:
    lines = [f"{'N':>3} {'slowed':>22} {'measured samples/s':>26} {'predicted':>11} {'rel_error':>9}  within"
             f"  {'all-reduce':>10} {'without it':>10} {'rel_error':>9}"]
    for _, r in table.iterrows():
        how = f"p{r.slowed_process}: {r.slowed_how}" if r.slowed_process >= 0 else "none"
        meas = (f"{r.measured_samples_per_s:8.1f} [{r.measured_lo:.1f}, {r.measured_hi:.1f}]"
                if r.repeats else "not measured")
        pred = f"{r.predicted_samples_per_s:11.1f}" if r.predicted_samples_per_s == r.predicted_samples_per_s \
            else f"{'—':>11}"
        err = f"{r.rel_error:+9.1%}" if r.rel_error == r.rel_error else f"{'—':>9}"
        ar = r.get("allreduce_s", math.nan)
        ar = f"{ar * 1e3:8.2f}ms" if ar == ar else f"{'—':>10}"
        wo = r.get("predicted_no_allreduce_samples_per_s", math.nan)
        wo_err = wo / r.measured_samples_per_s - 1 if wo == wo and r.measured_samples_per_s > 0 else math.nan
        wo = f"{wo:10.1f}" if wo == wo else f"{'—':>10}"
        wo_err = f"{wo_err:+9.1%}" if wo_err == wo_err else f"{'—':>9}"
        lines.append(f"{r.num_processes:>3} {how:>22} {meas:>26} {pred} {err}  {'yes' if r.within_interval else 'no':>6}"
                     f"  {ar} {wo} {wo_err}")
        if isinstance(r.get("prediction_error"), str) and r.prediction_error:
            lines.append(f"    no prediction: {r.prediction_error}")
    return "\n".join(lines)


def main(cfg: HostsConfig, preset: str, run_id: str | None = None, results_root: str | None = None) -> int:
    from experiments import train
    train.check_runtime(cfg.train_config(1, False, False))
    out = results.run_dir("hosts", run_id, results_root, resume=run_id is not None)
    ncpu = len(available_cpus())
    print(f"hosts: N = {', '.join(map(str, cfg.hosts))} × {cfg.repeats} repeats, slowed: {cfg.slowed_how()} "
          f"on process {'N-1' if cfg.slow_process == -1 else cfg.slow_process}; references {cfg.reference} "
          f"on {ncpu} CPUs → {out}", flush=True)
    try:
        table = run(cfg, out)
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished runs kept in {out / 'rows.csv'}; rerun with --run_id={out.name}",
              file=sys.stderr)
        return 130
    print(summary(table))
    rows = results.current(results.read_csv_rows(out / "rows.csv"))
    failed = rows[rows["status"] != "ok"]
    print(f"{len(rows)} runs ({len(rows) - len(failed)} ok, {len(failed)} failed) in {out / 'rows.csv'}; "
          f"per N: {out / 'hosts.csv'}")
    for _, r in failed.head(5).iterrows():
        print(f"  failed: {r.role} N={r.num_processes} {r.kind} repeat {r.repeat}: {r.error}", file=sys.stderr)
    return 1 if len(failed) or table["predicted_samples_per_s"].isna().any() else 0
