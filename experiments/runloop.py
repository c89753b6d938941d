"""The resumable run loop that sweeps (``experiments.sweep.run``) and scaling runs
(``experiments.scaling.run``) share: one row per job, written as each job finishes.

A run is a list of ``Job`` s, each one configuration (``config_id``) and one ``repeat`` of it. The
loop

- writes ``config.json`` (what the run is) once: a resumed run keeps the first one;
- skips every job whose (config_id, repeat) already has a row in ``rows.csv``, or with
  ``retry_failed`` only those with an ok row (``results.done_pairs``), so a rerun with the same
  folder finishes the rest and duplicates nothing;
- runs the others in the order given, appending each row (and any per-job side tables, such as a
  sweep's ``steps.csv``) through ``results.RowWriter`` as soon as the job finishes, so an interrupt
  or a kill keeps every finished row;
- turns an exception of a job (not ``KeyboardInterrupt`` or ``SystemExit``, which end the run) into
  a failed row and goes on with the next job;
- shows a tqdm progress bar on stderr counting finished jobs, resumed ones included.

What a run does on an interrupt (exit codes, messages) is its command line's business
(``sweep.main``, ``scaling.main``); the loop only makes sure nothing finished is lost.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from experiments import results


@dataclasses.dataclass(frozen=True)
class Job:
    """One row's worth of work: a configuration (``config_id``), its ``repeat`` (0 for runs without
    repeats), the text the progress bar shows while it runs, and whatever the run's ``work`` needs."""

    config_id: str
    repeat: int = 0
    label: str = ""
    payload: Any = None


@dataclasses.dataclass
class Outcome:
    """What a finished job leaves: its row for ``rows.csv``, and side tables (name → frame) appended
    to ``<name>.csv`` with the job's ``config_id`` and ``repeat`` added to each of their rows."""

    row: dict
    tables: Mapping[str, pd.DataFrame] = dataclasses.field(default_factory=dict)


def run_jobs(out_dir: Path, jobs: Sequence[Job], work: Callable[[Job], Outcome],
             failed_row: Callable[[Job, str, float], dict], *, header: dict, desc: str, unit: str,
             progress: bool = True, retry_failed: bool = False,
             on_row: Callable[[dict], None] | None = None) -> pd.DataFrame:
    """Runs every job of ``jobs`` that ``out_dir`` does not hold yet; returns all rows of ``rows.csv``.

    Args:
        out_dir: the run's folder (``results.run_dir``); ``rows.csv`` and ``config.json`` live there.
        jobs: every job of the run in run order, finished ones included (they count on the progress
            bar and are skipped).
        work: runs one job and returns its ``Outcome``. An exception it raises becomes the row
            ``failed_row(job, "<Type>: <message>", seconds)``; ``KeyboardInterrupt`` and
            ``SystemExit`` are re-raised.
        failed_row: the row of a job whose ``work`` raised, given the error text and the seconds it
            ran.
        header: written to ``out_dir/config.json`` when that file does not exist yet.
        desc, unit: the progress bar's name and unit.
        progress: show the progress bar (on stderr).
        retry_failed: run again the jobs whose rows all failed (a new row; the failed ones stay).
        on_row: called with each row after it (and its side tables) are written.
    """
    from tqdm import tqdm

    out_dir = Path(out_dir)
    cfg_path = out_dir / "config.json"
    if not cfg_path.exists():
        results.write_json_atomic(cfg_path, header)
    done = results.done_pairs(out_dir, retry_failed=retry_failed)
    todo = [j for j in jobs if (j.config_id, j.repeat) not in done]
    writer = results.RowWriter(out_dir)
    bar = tqdm(total=len(jobs), initial=len(jobs) - len(todo), disable=not progress, unit=unit,
               dynamic_ncols=True, desc=desc, file=sys.stderr)
    try:
        for job in todo:
            bar.set_postfix_str(job.label)
            t0 = time.perf_counter()
            try:
                outcome = work(job)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:  # noqa: BLE001 — recorded as a failed row; the next job runs
                outcome = Outcome(failed_row(job, f"{type(e).__name__}: {e}", time.perf_counter() - t0))
            writer.append(outcome.row)
            for name, frame in outcome.tables.items():
                append_table(out_dir, name, frame, job)
            bar.update(1)
            if on_row is not None:
                on_row(outcome.row)
    finally:
        bar.close()
    return results.read_csv_rows(out_dir / "rows.csv")


def append_table(out_dir: Path, name: str, frame: pd.DataFrame | None, job: Job) -> None:
    """Appends ``frame``'s rows to ``out_dir/<name>.csv`` tagged with the job's config_id and repeat."""
    if frame is None or not len(frame):
        return
    w = results.RowWriter(out_dir, name)
    for rec in frame.assign(config_id=job.config_id, repeat=job.repeat).to_dict("records"):
        w.append(rec)
