"""Benchmark: the cost model's step fit with its Jacobian grouped by cells, against scipy's own.

    python -m benchmarks.costmodel_fit [--json] [--study DIR] [--grid DIR] [--repeats 5] [--cv-repeats 3]

Data: a committed quick study with its step probe (default ``results/cpu-2core/holdout/pair14``,
2-core Intel Xeon, 2026-11-26), and the same study's rows with a 72-shape step probe in its place
(default ``results/cpu-2core/step-noise/first``: 4 cells × 18 shapes, the kind of grid the tests'
step fits use).

Measured in the same run, the two sides alternating so that a slow spell of the machine falls on
both:

1. ``step_fit_s`` (the study's probe) and ``grid_step_fit_s`` (the 72-shape grid): the step fit
   alone (``analysis.costmodel.model._lsq`` on the step residual, every start), grouped (``sparse=True``: :func:`analysis.costmodel.model._grouped_jacobian`)
   and ``scipy_step_fit_s``, the baseline: the same call with scipy's default dense 2-point
   Jacobian (``least_squares(jac='2-point')``, one parameter per evaluation), which is what the
   fit used before. Medians over ``--repeats`` each, with the range.
2. ``cv_s``: ``cross_validate`` of the study end to end (5 folds, each a whole calibration), with the
   grouping and without it (``scipy_cv_s``: ``_grouped_jacobian`` made to decline, so every fit
   takes scipy's differences). Medians over ``--cv-repeats``.
3. ``identical``: both sides' parameters, standard errors and cost compared bit for bit, and the
   two cross-validations' held-out errors. The grouping is meant to change the time and nothing
   else.

``ratio`` = baseline / grouped (wall; both run on one core). No goal rests on it: the grouping was
made for the test suite and the report's fits; the numbers are what a user's ``fit`` and ``cv`` gain.
Prints a table; with ``--json`` the last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "results" / "cpu-2core" / "holdout" / "pair14" / "study"
GRID = ROOT / "results" / "cpu-2core" / "step-noise" / "first"


def step_problem(rows, **fit_kwargs):
    """The step fit's residual, parameter names and fixed values, as ``fit(rows, **fit_kwargs)``
    builds them (caught on their way to ``_lsq``; also what the cost model's test of the grouped
    Jacobian fits both ways)."""
    from analysis.costmodel import model as cm
    seen = {}
    real = cm._lsq

    def spy(residual, names, fixed, sparse=False):
        if sparse:
            seen.update(residual=residual, names=list(names), fixed=dict(fixed))
        return real(residual, names, fixed, sparse)
    cm._lsq = spy
    try:
        cm.fit(rows, **fit_kwargs)
    finally:
        cm._lsq = real
    return seen["residual"], seen["names"], seen["fixed"]


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def _summary(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.costmodel_fit", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--study", default=str(STUDY), help="a quick study's folder (rows, probes, step probe)")
    parser.add_argument("--grid", default=str(GRID), help="a folder with a step_probe/ to fit in place of the study's")
    parser.add_argument("--repeats", type=int, default=5, help="step fits of each side")
    parser.add_argument("--cv-repeats", type=int, default=3, help="cross-validations of each side (0: none)")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.cv_repeats < 0:
        parser.error(f"--repeats {args.repeats} / --cv-repeats {args.cv_repeats}: need at least 1 and 0")
    if not Path(args.study, "rows.csv").exists():
        parser.error(f"--study {args.study}: no rows.csv there; give a quick study's folder "
                     f"(python -m experiments study --preset quick)")
    if not Path(args.grid, "step_probe", "rows.csv").exists():
        parser.error(f"--grid {args.grid}: no step_probe/rows.csv there; give a folder with a step probe "
                     f"(python -m experiments components)")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    with warnings.catch_warnings():  # the fits' warnings about their starts are not this benchmark's output
        warnings.simplefilter("ignore")
        return _run(args)


def _run(args) -> dict:
    from analysis.costmodel import model as cm
    from analysis.costmodel.cli import read_dir
    from analysis.costmodel.evaluate import cross_validate
    from experiments.results import read_csv_rows

    data = read_dir(args.study)
    result = {"study": args.study, "grid": args.grid, "repeats": args.repeats}
    same = True
    rows = []
    for key, label, probe in (("", "the study's step probe", data["step_probe"]),
                              ("grid_", "the 72-shape grid", read_csv_rows(Path(args.grid, "step_probe", "rows.csv")))):
        residual, names, fixed = step_problem(data["rows"], probes=data["probes"], steps=data["steps"],
                                              step_probe=probe, stage_probe=data["stage_probe"],
                                              worker_probe=data.get("worker_probe"))
        grouped, scipys = [], []
        for _ in range(args.repeats):
            tg, a = _timed(lambda: cm._lsq(residual, names, fixed, sparse=True))
            ts, b = _timed(lambda: cm._lsq(residual, names, fixed))
            grouped.append(tg)
            scipys.append(ts)
            same &= (np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1], equal_nan=True)
                     and a[2].cost == b[2].cost)
        result.update({f"{key}step_params": len(names), f"{key}step_fit_s": _summary(grouped),
                       f"scipy_{key}step_fit_s": _summary(scipys),
                       f"{key}step_ratio": statistics.median(scipys) / statistics.median(grouped)})
        rows += [(f"step fit, {label}, grouped", result[f"{key}step_fit_s"]),
                 (f"step fit, {label}, scipy's", result[f"scipy_{key}step_fit_s"])]

    kw = dict(probes=data["probes"], steps=data["steps"], step_probe=data["step_probe"],
              stage_probe=data["stage_probe"], worker_probe=data.get("worker_probe"))
    real = cm._grouped_jacobian
    cv_g, cv_s = [], []
    for _ in range(args.cv_repeats):
        tg, a = _timed(lambda: cross_validate(data["rows"], **kw))
        cm._grouped_jacobian = lambda fun, *rest: (fun, None)  # every fit on scipy's own differences
        try:
            ts, b = _timed(lambda: cross_validate(data["rows"], **kw))
        finally:
            cm._grouped_jacobian = real
        cv_g.append(tg)
        cv_s.append(ts)
        same &= np.array_equal(a.rel_error.to_numpy(), b.rel_error.to_numpy())
    if cv_g:
        result.update(cv_repeats=args.cv_repeats, cv_s=_summary(cv_g), scipy_cv_s=_summary(cv_s),
                      cv_ratio=statistics.median(cv_s) / statistics.median(cv_g))
    result["identical"] = bool(same)

    print(f"costmodel_fit benchmark: {args.study} ({result['step_params']} step parameters; with the grid "
          f"{result['grid_step_params']}), {os.cpu_count()} CPU cores; medians [min, max]")
    if cv_g:
        rows += [("cross-validation, grouped", result["cv_s"]), ("cross-validation, scipy's", result["scipy_cv_s"])]
    for name, s in rows:
        print(f"  {name:<48} {s['median']:8.3f} s  [{s['min']:.3f}, {s['max']:.3f}]")
    print(f"  ratio scipy / grouped: step fit {result['step_ratio']:.2f}x, with the grid {result['grid_step_ratio']:.2f}x"
          + (f", cross-validation {result['cv_ratio']:.2f}x" if cv_g else ""))
    print(f"  identical results: {result['identical']}")
    if args.json:
        print(json.dumps(result))
    if not same:
        raise SystemExit("the grouped Jacobian changed a fit: it must change the time only")
    return result


if __name__ == "__main__":
    main()
