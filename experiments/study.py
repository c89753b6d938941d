"""The study (``make demo``): the quick sweep, then ``report.md`` with a section per stage.

Sections are functions ``(StudyContext) -> markdown``, listed in ``SECTIONS``; later stages
(hierarchy probes, simulation, predicted vs measured, scaling) plug in by adding one. A section
that fails is reported in place with its error, and the rest of the report is still written.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
from typing import Literal
import time
import traceback
from pathlib import Path
from typing import Callable

import pandas as pd

from experiments import results, sweep
from experiments.sweep import SweepConfig

@dataclasses.dataclass(frozen=True)
class StudyConfig(SweepConfig):
    # hierarchy probes run after the sweep ('none' skips them)
    probe_preset: Literal["none", "smoke", "quick", "full"] = "quick"
    # the scaling run fitted in the "Scaling" section ('none' skips it)
    scaling_preset: Literal["none", "smoke", "quick", "full"] = "quick"


def _study(sweep_cfg: SweepConfig, **kw) -> StudyConfig:
    return StudyConfig(**{**dataclasses.asdict(sweep_cfg), **kw})


PRESETS = {"smoke": lambda: _study(dataclasses.replace(sweep.smoke(), repeats=2), probe_preset="smoke",
                                   scaling_preset="smoke"),
           "quick": lambda: _study(sweep.quick(), probe_preset="quick", scaling_preset="quick"),
           "full": lambda: _study(sweep.full(), probe_preset="full", scaling_preset="full")}


@dataclasses.dataclass
class StudyContext:
    cfg: SweepConfig
    preset: str
    out_dir: Path
    rows: pd.DataFrame  # one row per configuration: results.summarize of the runs (medians, intervals)
    environment: dict
    runs: pd.DataFrame | None = None  # the tidy rows: one per (configuration, repeat)
    wall_s: float = 0.0
    probe_raw: pd.DataFrame | None = None
    probe_fits: pd.DataFrame | None = None
    scaling_rows: pd.DataFrame | None = None
    memory: pd.DataFrame | None = None  # experiments.memory.study_footprints, or one 'error' column
    errors: dict = dataclasses.field(default_factory=dict)  # stage → error text (probes, scaling)
    notes: list = dataclasses.field(default_factory=list)
    failed_sections: list = dataclasses.field(default_factory=list)


def _sections() -> list[tuple[str, Callable[[StudyContext], str]]]:
    from analysis import report
    return report.study_sections()


def write_report(ctx: StudyContext) -> Path:
    parts = [f"# memsim study — {ctx.out_dir.name}\n"]
    for name, fn in _sections():
        t0 = time.perf_counter()
        try:
            text = fn(ctx)
        except Exception as e:  # noqa: BLE001 — one broken section must not lose the report
            print(f"warning: report section {name!r} failed: {type(e).__name__}: {e}", file=sys.stderr)
            ctx.failed_sections.append((name, f"{type(e).__name__}: {e}"))
            text = (f"## {name}\n\nThis section failed: `{type(e).__name__}: {e}`\n\n<details><summary>traceback"
                    f"</summary>\n\n```\n{traceback.format_exc()}```\n</details>\n")
        ctx.notes.append((name, time.perf_counter() - t0))
        if text:
            parts.append(text.rstrip() + "\n")
    path = ctx.out_dir / "report.md"
    tmp = path.with_name("report.md.tmp")
    tmp.write_text("\n".join(parts))
    tmp.replace(path)
    return path


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


def run_scaling(cfg: StudyConfig, out: Path):
    """The study's scaling run, written to ``out/scaling`` (resumable); its rows or None."""
    if cfg.scaling_preset == "none":
        return None
    from experiments import scaling
    print(f"scaling run (preset {cfg.scaling_preset}) …", flush=True)
    d = out / "scaling"
    d.mkdir(exist_ok=True)
    return scaling.run(scaling.PRESETS[cfg.scaling_preset](), d)


def run_memory(rows: pd.DataFrame, out: Path) -> pd.DataFrame:
    """The footprint of each configuration the sweep ran (``out/memory.csv``); a failure becomes a
    frame with an ``error`` column that the Memory section reports, so the rest of the report is kept."""
    from experiments import memory
    print("memory footprints …", flush=True)
    try:
        return memory.write_study_footprints(rows, out)
    except Exception as e:  # noqa: BLE001 — reported in the Memory section
        print(f"warning: memory footprints failed: {type(e).__name__}: {e}", file=sys.stderr)
        return pd.DataFrame({"error": [f"{type(e).__name__}: {e}"]})


def _stage(ctx_errors: dict, name: str, fn, *args):
    """Runs a measuring stage after the sweep; a failure is kept (its section reports it) and the
    study goes on to write what it has."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 — reported in its section and in the exit status
        ctx_errors[name] = f"{type(e).__name__}: {e}"
        print(f"warning: {name} failed: {ctx_errors[name]}", file=sys.stderr)
        return None


def main(cfg: StudyConfig, preset: str, run_id: str | None = None, results_root: str | None = None,
         retry_failed: bool = False) -> int:
    from experiments import env as env_lib, train
    train.check_runtime(cfg.base())
    t0 = time.perf_counter()
    out = results.run_dir("study", run_id, results_root, resume=run_id is not None)
    print(f"study: {len(cfg.train_configs())} configurations × {cfg.repeats} repeats → {out}", flush=True)
    errors: dict = {}
    with sweep.interruptible() as sig:
        try:
            runs = sweep.run(cfg, out, "study", retry_failed=retry_failed)
            sweep_s = time.perf_counter() - t0
            stage_s = {"sweep": sweep_s}
            t = time.perf_counter()
            probe_raw = _stage(errors, "probes", run_probes, cfg, out)
            stage_s["probes"], t = time.perf_counter() - t, time.perf_counter()
            scaling_rows = _stage(errors, "scaling", run_scaling, cfg, out)
            stage_s["scaling"] = time.perf_counter() - t
        except KeyboardInterrupt:
            sig.caught = sig.caught or signal.SIGINT
    if sig.caught:
        print(f"\ninterrupted ({signal.Signals(sig.caught).name}): finished rows kept in {out}; "
              f"rerun with --run_id={out.name}", file=sys.stderr)
        return sig.exit_code
    summary = results.summarize(runs) if len(runs) else runs
    t = time.perf_counter()
    memory = run_memory(summary, out)
    stage_s["memory"], t = time.perf_counter() - t, time.perf_counter()
    ctx = StudyContext(cfg, preset, out, summary, env_lib.environment(), runs=runs, wall_s=sweep_s,
                       probe_raw=probe_raw, scaling_rows=scaling_rows,
                       memory=memory, errors=errors)
    path = write_report(ctx)
    stage_s["report"] = time.perf_counter() - t
    print(f"report: {path}  ({time.perf_counter() - t0:.0f} s: "
          + ", ".join(f"{k} {v:.0f} s" for k, v in stage_s.items()) + ")")
    code = sweep.report_rows(runs, out)
    if ctx.failed_sections:
        print("error: report section(s) failed: " + "; ".join(f"{n}: {e}" for n, e in ctx.failed_sections),
              file=sys.stderr)
        code = 1
    return code
