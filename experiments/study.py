"""The study (``make demo``): the quick sweep, the hierarchy probes, the component probes, the
scaling run and the memory footprints, written into one results folder; then ``report.md`` from
that folder.

The study only measures and writes: rows (``rows.csv``, ``probe/``, ``step_probe/``, ``stage_probe/``,
``scaling/``, ``memory.csv``, ``rules/``) and ``study.json`` (preset, environment, seconds per stage, the error of each stage that failed).
Its one call into analysis is ``analysis.report.build_report(folder)``, the same function as
``python -m analysis report FOLDER``, so a report can be rebuilt without measuring again. A stage
that fails is recorded and its report section says so; a section that fails makes the exit status 1.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import time
from pathlib import Path
from typing import Literal

import pandas as pd

from experiments import results, sweep
from experiments.sweep import SweepConfig


@dataclasses.dataclass(frozen=True)
class StudyConfig(SweepConfig):
    # hierarchy probes run after the sweep ('none' skips them)
    probe_preset: Literal["none", "smoke", "quick", "full"] = "quick"
    # the scaling run fitted in the "Scaling" section ('none' skips it)
    scaling_preset: Literal["none", "smoke", "quick", "study", "full"] = "study"
    # the rules of thumb ("Rules of thumb" section): 'study' reuses the sweep's and probes' rows and
    # measures only the cheap parts (experiments.rules.study, about 20 s); 'none' skips them
    rules_preset: Literal["none", "study"] = "study"
    # the step probe (experiments.components: the step alone over the sweep's model × precision ×
    # accumulation cells, for the cost model's calibration); 'none' skips it
    components_preset: Literal["none", "study"] = "study"
    # the worker probe (experiments.components.worker_sweep: one loader worker feeding a step too small
    # to wait for, at the sweep's smallest and largest batch and image sizes); 'none' skips it
    worker_probe_preset: Literal["none", "study"] = "study"


def _study(sweep_cfg: SweepConfig, **kw) -> StudyConfig:
    return StudyConfig(**{**dataclasses.asdict(sweep_cfg), **kw})


PRESETS = {"smoke": lambda: _study(dataclasses.replace(sweep.smoke(), repeats=2), probe_preset="smoke",
                                   scaling_preset="smoke", rules_preset="none"),
           "quick": lambda: _study(sweep.quick(), probe_preset="quick", scaling_preset="study"),
           "full": lambda: _study(sweep.full(), probe_preset="full", scaling_preset="full")}


def run_probes(cfg: StudyConfig, out: Path):
    """The hierarchy probes of the study: raw rows appended to ``out/probe/rows.csv`` (no fitting;
    the report's Hierarchy section fits them). Returns the rows, or None with ``probe_preset='none'``.

    A resumed study that already has probe rows keeps them and does not measure again (delete
    ``out/probe`` to re-measure).
    """
    if cfg.probe_preset == "none":
        return None
    from experiments import probes
    d = out / "probe"
    if (d / "rows.csv").exists():
        print(f"probes: rows already in {d / 'rows.csv'}, kept", flush=True)
        return results.read_csv_rows(d / "rows.csv")
    print(f"probes (preset {cfg.probe_preset}) …", flush=True)
    probe_cfg = probes.PRESETS[cfg.probe_preset]()
    d.mkdir(parents=True, exist_ok=True)
    probes.write_config(d, probe_cfg, cfg.probe_preset)
    return probes.run(probe_cfg, out_dir=d)


def run_components(cfg: StudyConfig, out: Path):
    """The step and stage probes of the study's sweep into ``out/step_probe`` and ``out/stage_probe``
    (resumable), for the cost model: the step alone over every model × precision × accumulation cell
    the sweep samples, and the loader's stamped stages alone over every source × image size ×
    augmentation cost. (The loader probe is left out: calibration does not use it by default.)"""
    if cfg.components_preset == "none":
        return None
    from experiments import components
    print("step and stage probes (the step alone per model, precision and accumulation; the loader's "
          "stages alone per source, image size and augmentation) …", flush=True)
    res = components.run(components.for_sweep(cfg, loader=False), out, progress=False)
    if res["failed"]:
        raise RuntimeError(f"{res['failed']} step or stage probe shape(s) failed; see step_probe/rows.csv "
                           f"and stage_probe/rows.csv")
    return res


def run_worker_probe(cfg: StudyConfig, out: Path):
    """The worker probe of the study's sweep into ``out/worker_probe`` (a sweep's folder: resumable,
    each run in its own process as the sweep's are), for the cost model's worker fit; its rows, or
    None with ``worker_probe_preset='none'``."""
    if cfg.worker_probe_preset == "none":
        return None
    from experiments import components
    wcfg = components.worker_sweep(cfg)
    print(f"worker probe ({len(wcfg.train_configs())} loader shapes × {wcfg.repeats}: one worker, a step too small "
          f"to wait for) …", flush=True)
    d = out / "worker_probe"
    d.mkdir(exist_ok=True)
    rows = results.current(sweep.run(wcfg, d, "worker probe", progress=False))
    bad = int((rows["status"].astype(str) != "ok").sum()) if len(rows) else 0
    if bad:
        raise RuntimeError(f"{bad} worker probe run(s) failed; see worker_probe/rows.csv")
    return rows


def run_scaling(cfg: StudyConfig, out: Path):
    """The study's scaling run, written to ``out/scaling`` (resumable); its rows or None."""
    if cfg.scaling_preset == "none":
        return None
    from experiments import scaling
    print(f"scaling run (preset {cfg.scaling_preset}) …", flush=True)
    d = out / "scaling"
    d.mkdir(exist_ok=True)
    return scaling.run(scaling.PRESETS[cfg.scaling_preset](), d)


def run_rules(cfg: StudyConfig, out: Path):
    """The rules of thumb, measured cheaply into ``out/rules`` (resumable): the study's own sweep and
    probe rows serve the claims they cover; the memory analysis, device_put and memmap parts run."""
    if cfg.rules_preset == "none":
        return None
    from experiments import rules
    print(f"rules of thumb (preset {cfg.rules_preset}) …", flush=True)
    d = out / "rules"
    d.mkdir(exist_ok=True)
    meta = rules.run(rules.study(str(out)), d, progress=False)
    if meta.get("errors"):
        raise RuntimeError("; ".join(f"{k}: {v}" for k, v in meta["errors"].items()))
    return meta


def run_memory(rows: pd.DataFrame, out: Path) -> pd.DataFrame:
    """The footprint of each configuration the sweep ran, written to ``out/memory.csv``."""
    from experiments import memory
    print("memory footprints …", flush=True)
    return memory.write_study_footprints(rows, out)


def _stage(errors: dict, name: str, fn, *args):
    """Runs a measuring stage after the sweep; a failure is kept in ``errors`` (written to
    study.json, where its report section finds it) and the study goes on to write what it has."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 — reported in its section and in the exit status
        errors[name] = f"{type(e).__name__}: {e}"
        print(f"warning: {name} failed: {errors[name]}", file=sys.stderr)
        return None


def prior_stage_s(out: Path) -> dict:
    """The seconds per stage an earlier run of this study folder measured (its ``study.json``,
    written at the end or when interrupted), or {} for a new folder or an unreadable file."""
    try:
        stage_s = json.loads((out / "study.json").read_text()).get("stage_s", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return {k: float(v) for k, v in stage_s.items() if isinstance(v, (int, float))} if isinstance(stage_s, dict) else {}


def add_stage_s(prior: dict, now: dict) -> dict:
    """Seconds per stage over the runs of one study folder: a resumed study skips what was measured,
    so its own seconds alone would report a sweep of 0 s.

    >>> add_stage_s({"sweep": 266.0, "probes": 14.0}, {"sweep": 0.5, "probes": 0.0, "components": 96.0})
    {'sweep': 266.5, 'probes': 14.0, 'components': 96.0}
    """
    return {**{k: prior.get(k, 0.0) + v for k, v in now.items()},
            **{k: v for k, v in prior.items() if k not in now}}


def main(cfg: StudyConfig, preset: str, run_id: str | None = None, results_root: str | None = None,
         retry_failed: bool = False) -> int:
    from experiments import env as env_lib, train
    train.check_runtime(cfg.base())
    t0 = time.perf_counter()
    out = results.run_dir("study", run_id, results_root, resume=run_id is not None)
    prior = prior_stage_s(out)
    print(f"study: {len(cfg.train_configs())} configurations × {cfg.repeats} repeats → {out}", flush=True)
    errors: dict = {}
    stage_s: dict = {}
    with sweep.interruptible() as sig:
        try:
            runs = sweep.run(cfg, out, "study", retry_failed=retry_failed)
            stage_s["sweep"] = time.perf_counter() - t0
            t = time.perf_counter()
            _stage(errors, "probes", run_probes, cfg, out)
            stage_s["probes"], t = time.perf_counter() - t, time.perf_counter()
            _stage(errors, "components", run_components, cfg, out)
            stage_s["components"], t = time.perf_counter() - t, time.perf_counter()
            _stage(errors, "worker_probe", run_worker_probe, cfg, out)
            stage_s["worker_probe"], t = time.perf_counter() - t, time.perf_counter()
            _stage(errors, "scaling", run_scaling, cfg, out)
            stage_s["scaling"], t = time.perf_counter() - t, time.perf_counter()
            _stage(errors, "rules", run_rules, cfg, out)
            stage_s["rules"] = time.perf_counter() - t
        except KeyboardInterrupt:
            sig.caught = sig.caught or signal.SIGINT
    if sig.caught:
        # the seconds measured so far, so that a resumed study reports the whole time, not its own
        results.write_json_atomic(out / "study.json", {"preset": preset, "stage_s": add_stage_s(prior, stage_s),
                                                       "errors": errors, "interrupted": True}, sort_keys=False)
        print(f"\ninterrupted ({signal.Signals(sig.caught).name}): finished rows kept in {out}; "
              f"rerun with --run_id={out.name}", file=sys.stderr)
        return sig.exit_code
    t = time.perf_counter()
    _stage(errors, "memory", run_memory, results.summarize(runs) if len(runs) else runs, out)
    stage_s["memory"] = time.perf_counter() - t
    results.write_json_atomic(out / "study.json", {"preset": preset, "environment": env_lib.environment(),
                                                   "stage_s": add_stage_s(prior, stage_s), "errors": errors},
                              sort_keys=False)
    t = time.perf_counter()
    from analysis.report import build_report  # the study's one call into analysis
    path, failed_sections = build_report(out)
    stage_s["report"] = time.perf_counter() - t
    print(f"report: {path}  ({time.perf_counter() - t0:.0f} s: "
          + ", ".join(f"{k} {v:.0f} s" for k, v in stage_s.items()) + ")")
    code = sweep.report_rows(runs, out)
    if failed_sections:
        print("error: report section(s) failed: " + "; ".join(f"{n}: {e}" for n, e in failed_sections),
              file=sys.stderr)
        code = 1
    return code
