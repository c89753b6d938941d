"""A study's ``report.md``, built from its results folder alone (no measuring).

``build_report(path)`` (also ``python -m analysis report RESULTS_DIR``) loads what a study wrote
into a :class:`StudyResults` once and calls the report's sections in order; each is one topic
module's ``section(study) -> str`` (Markdown, ``## Title`` first) that writes its figures into the
folder. A section that fails is reported in place, with its error and traceback, and the others
are still written.

What a study folder holds (``experiments.study`` writes it; every file but ``rows.csv`` may be
missing, and each section says so when its input is):

- ``rows.csv`` (+ ``rows.columns.json``): the measured sweep, one row per (configuration, repeat);
- ``config.json``: the sweep's configuration and environment;
- ``study.json``: preset, environment, seconds per stage (``stage_s``) and the errors of stages
  that failed (``errors``: ``probes``, ``scaling``, ``memory``);
- ``probe/rows.csv``: raw hierarchy-probe measurements;
- ``scaling/rows.csv``: the scaling run;
- ``memory.csv``: the footprint of each configuration (``experiments.memory``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import multiprocessing as mp
import sys
import traceback
from pathlib import Path

import pandas as pd

from experiments import results
from memsim.knobs import ConfigError

__all__ = ["StudyResults", "build_report", "SECTIONS", "REPORT_FILE", "STUDY_FILE"]

REPORT_FILE = "report.md"
STUDY_FILE = "study.json"

#: The report's sections in order: (title, module, function name). A section's function takes a
#: StudyResults and returns Markdown; the title heads the failure note when it raises.
SECTIONS = (
    ("Machine and environment", "analysis.measured", "environment_section"),
    ("Measured sweep", "analysis.measured", "section"),
    ("Hierarchy", "analysis.hierarchy", "section"),
    ("Memory", "analysis.memory", "section"),
    ("Simulation", "analysis.simulation", "section"),
    ("Predicted vs measured", "analysis.costmodel.section", "predicted_section"),
    ("What if", "analysis.costmodel.section", "whatif_section"),
    ("Scaling", "analysis.scaling", "section"),
    ("Rules of thumb", "analysis.rules", "section"),
)


def _csv(path: Path) -> pd.DataFrame | None:
    return results.read_csv_rows(path) if path.exists() else None


@dataclasses.dataclass(frozen=True)
class StudyResults:
    """Everything a report section reads, loaded from a study's results folder.

    Attributes:
        path: the study's results folder; sections write their figures here.
        rows: ``experiments.results.summarize(runs)``: one row per configuration.
        runs: ``rows.csv``: one row per (configuration, repeat).
        config: ``config.json`` ({} if absent).
        meta: ``study.json`` (preset, environment, per-stage seconds, stage errors); {} if absent.
        probe_raw: ``probe/rows.csv`` (raw probe measurements), None if not there.
        scaling_rows: ``scaling/rows.csv``, None if not there.
        memory: ``memory.csv``, None if not there.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "study.json").write_text('{"preset": "smoke", "errors": {"scaling": "ValueError: x"}}')
        >>> study = StudyResults.load(d)
        >>> len(study.runs), study.meta["preset"], study.errors, study.memory is None
        (0, 'smoke', {'scaling': 'ValueError: x'}, True)
    """

    path: Path
    rows: pd.DataFrame
    runs: pd.DataFrame
    config: dict
    meta: dict
    probe_raw: pd.DataFrame | None = None
    scaling_rows: pd.DataFrame | None = None
    memory: pd.DataFrame | None = None

    @property
    def errors(self) -> dict:
        """Stage name → error text of the study's stages that failed (``probes``, ``scaling``, ``memory``)."""
        return dict(self.meta.get("errors") or {})

    @classmethod
    def load(cls, path) -> "StudyResults":
        """Read a study folder.

        Raises:
            ConfigError: ``path`` is not a folder.
        """
        path = Path(path)
        if not path.is_dir():
            raise ConfigError(f"results folder {str(path)!r} does not exist or is not a folder; pass the folder "
                              "a study wrote (e.g. results/cpu-2core/study)")
        runs = _csv(path / "rows.csv")
        runs = pd.DataFrame() if runs is None else runs
        rows = results.summarize(runs) if len(runs) else runs

        def read_json(name: str) -> dict:
            p = path / name
            return json.loads(p.read_text()) if p.exists() else {}

        memory = pd.read_csv(path / "memory.csv", dtype={"config_id": str}) if (path / "memory.csv").exists() else None
        return cls(path=path, rows=rows, runs=runs, config=read_json("config.json"), meta=read_json(STUDY_FILE),
                   probe_raw=_csv(path / "probe" / "rows.csv"), scaling_rows=_csv(path / "scaling" / "rows.csv"),
                   memory=memory)


def _failure(title: str, e: Exception) -> str:
    return (f"## {title}\n\nThis section failed: `{type(e).__name__}: {e}`\n\n<details><summary>traceback"
            f"</summary>\n\n```\n{traceback.format_exc()}```\n</details>\n")


#: The sections a second process builds while this one builds the others (``build_report(jobs=2)``):
#: the Hierarchy and the Scaling sections, which read nothing the others compute (the cost model's
#: three share one calibration, ``analysis.costmodel.section``, and stay together here). Why: the
#: report is the last part of ``make demo``, nothing is measured while it is built, and the 2-core
#: machine has a core free for it. On the 2-core Intel Xeon (6/167/1) on a slow day (2026-11-29, its
#: numpy check at 822-900 µs an iteration where a quiet day reads 614-694), ``make demo`` took
#: 463-526 s, the report 31-38 s of it. ``holdout/pair112``'s study, its report rebuilt in a fresh
#: process each time: one process 31.4-33.6 s (3 runs; the sections alone 30.8 s, Simulation 12.0 s
#: with the calibration, Scaling 10.8 s, Hierarchy 3.4 s); with the cost model's three sections in
#: the second process 27.2-27.6 s (2), Scaling alone there 22.1-26.2 s (4), Hierarchy and Scaling
#: 20.6-23.4 s (4). The two reports were the same text.
CHILD_SECTIONS = ("Hierarchy", "Scaling")


def _section(study: "StudyResults", title: str, module: str, fn: str) -> tuple[str, str | None]:
    """One section's Markdown and its error (None when it was written)."""
    try:
        return getattr(importlib.import_module(module), fn)(study), None
    except Exception as e:  # noqa: BLE001 — one broken section must not lose the report
        return _failure(title, e), f"{type(e).__name__}: {e}"


def _child_sections(path: str, sections: tuple, conn) -> None:
    """``sections`` ((title, module, function) each) of the study at ``path``, sent back as
    {title: (text, error)}; in a spawned process that dies with its parent."""
    from experiments.loader import die_with_parent
    die_with_parent()
    try:
        study = StudyResults.load(path)
        conn.send({t: _section(study, t, m, f) for t, m, f in sections})
    finally:
        conn.close()


def _start_child(path: Path, sections: tuple):
    """(process, receiving end) of :func:`_child_sections`, or None where a process cannot be started.
    (``experiments.rules.call_in_child`` spawns the same way but waits for its child; this one runs
    beside the sections built here.)"""
    try:
        ctx = mp.get_context("spawn")
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child_sections, args=(str(path), sections, send), name="memsim-report-sections",
                           daemon=True)
        proc.start()
        send.close()
        return proc, recv
    except OSError as e:
        print(f"warning: report sections {', '.join(t for t, _, _ in sections)} built here: no second process "
              f"({e})", file=sys.stderr)
        return None


def _child_result(child) -> dict | None:
    """What the child sent, or None (with a warning) when it died before sending it."""
    proc, recv = child
    try:
        return recv.recv()
    except (EOFError, OSError):
        proc.join(timeout=10)
        print(f"warning: the report's second process died (exit code {proc.exitcode}); its sections are built "
              f"here", file=sys.stderr)
        return None


def build_report(path, jobs: int = 2) -> tuple[Path, list[tuple[str, str]]]:
    """Rebuild ``report.md`` and its figures in a study's results folder, from the folder alone.

    Args:
        path: the folder a study wrote (``rows.csv`` and friends, see the module docstring).
        jobs: 2 (default) builds :data:`CHILD_SECTIONS` in a second process while this one builds
            the others; 1 builds every section here, in order. A second process that dies leaves
            its sections to this one.

    Returns:
        The report's path, and the (title, error) of each section that failed (empty when all
        were written).

    Raises:
        ConfigError: ``path`` is not a folder, or ``jobs`` is not 1 or 2.
    """
    if jobs not in (1, 2):
        raise ConfigError(f"jobs={jobs!r}: 1 (every section in this process) or 2 (the sections of "
                          f"CHILD_SECTIONS in a second one)")
    study = StudyResults.load(path)
    away = tuple(s for s in SECTIONS if s[0] in CHILD_SECTIONS) if jobs == 2 else ()
    child = _start_child(study.path, away) if away else None
    done: dict = {}
    try:
        for title, module, fn in SECTIONS:
            if child is None or title not in CHILD_SECTIONS:
                done[title] = _section(study, title, module, fn)
        if child is not None:
            done.update(_child_result(child) or {})
    except BaseException:
        if child is not None:  # interrupted or failed here: the child's sections are not waited for
            child[0].kill()
        raise
    finally:
        if child is not None:
            proc, recv = child
            recv.close()
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()
    parts = [f"# memsim study — {study.path.name}\n"]
    failed: list[tuple[str, str]] = []
    for title, module, fn in SECTIONS:
        text, error = done[title] if title in done else _section(study, title, module, fn)
        if error:
            print(f"warning: report section {title!r} failed: {error}", file=sys.stderr)
            failed.append((title, error))
        if text:
            parts.append(text.rstrip() + "\n")
    out = study.path / REPORT_FILE
    tmp = out.with_name(REPORT_FILE + ".tmp")
    tmp.write_text("\n".join(parts))
    tmp.replace(out)
    return out, failed


# ``python -m analysis report RESULTS_DIR`` (registered in analysis/__main__.py)
HELP = "rebuild report.md and its figures from a study's results folder (no measuring)"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="the folder a study wrote, e.g. results/cpu-2core/study")


def run(args: argparse.Namespace) -> int:
    try:
        path, failed = build_report(args.results_dir)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"report: {path}")
    if failed:
        print("error: report section(s) failed: " + "; ".join(f"{n}: {e}" for n, e in failed), file=sys.stderr)
        return 1
    return 0
