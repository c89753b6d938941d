"""``python -m analysis costmodel {fit,predict,compare,cv,recommend,holdout}`` and ``python -m analysis whatif``.

A stable command line (scripts rely on it): with ``--json`` the last line printed is one JSON
object; errors are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.costmodel.features import KNOB_DEFAULTS, CostModelError
from memsim.knobs import ConfigError

HELP = "fit the hierarchy cost model to measured rows, predict, compare, cross-validate"
WHATIF_HELP = "predict a configuration with knobs changed, beside its calibrated baseline"


def read_dir(path: str) -> dict:
    """The frames a results folder holds for calibration: rows, probes, steps, and the component
    probes (step, stage, loader and worker) a study writes beside them."""
    from experiments.results import read_csv_rows
    d = Path(path)
    if not (d / "rows.csv").is_file():
        raise CostModelError(f"results folder {path!r}: no rows.csv; give a folder a sweep or study wrote "
                             f"(python -m experiments study --preset quick)")
    out = {"rows": read_csv_rows(d / "rows.csv")}
    for key, rel in (("probes", "probe/rows.csv"), ("steps", "steps.csv"), ("step_probe", "step_probe/rows.csv"),
                     ("stage_probe", "stage_probe/rows.csv"), ("loader_probe", "loader_probe/rows.csv"),
                     ("worker_probe", "worker_probe/rows.csv")):
        out[key] = read_csv_rows(d / rel) if (d / rel).is_file() else None
    return out


def read_dirs(paths: list[str]) -> dict:
    parts = [read_dir(p) for p in paths]
    out = {}
    for key in ("rows", "probes", "steps", "step_probe", "stage_probe", "loader_probe", "worker_probe"):
        frames = [p[key] for p in parts if p[key] is not None]
        out[key] = pd.concat(frames, ignore_index=True) if frames else None
    return out


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_grid(items: list[str]) -> pd.DataFrame:
    """``key=v1,v2`` items → every combination as rows."""
    import itertools
    grid = {}
    for it in items:
        key, sep, vals = it.partition("=")
        if not sep or not vals:
            raise CostModelError(f"--grid {it!r}: expected key=v1,v2,...")
        if key not in KNOB_DEFAULTS:
            raise CostModelError(f"--grid key {key!r}: not a knob; known: {', '.join(KNOB_DEFAULTS)}")
        grid[key] = [_value(v) for v in vals.split(",")]
    keys = list(grid)
    return pd.DataFrame([dict(zip(keys, combo)) for combo in itertools.product(*grid.values())])


def _print_json(obj: dict) -> None:
    print(json.dumps(obj, default=float))


def cmd_fit(args) -> int:
    from analysis.costmodel.model import fit
    d = read_dirs(args.results)
    model = fit(d["rows"], d["probes"], d["steps"], d["step_probe"], sources=args.results,
                loader_probe=d["loader_probe"] if args.loader_probe else None, stage_probe=d["stage_probe"],
                worker_probe=d["worker_probe"])
    out = Path(args.out or Path(args.results[0]) / "costmodel.json")
    if not args.no_intervals:
        model.heldout = _heldout(d, args)
    model.save(out)
    print(model.report())
    print(f"wrote {out}")
    return 0


#: the fewest configurations a fit cross-validates for its prediction intervals: below it a fold
#: would hold out most of what there is
MIN_INTERVAL_CONFIGS = 6


def _heldout(d: dict, args) -> dict:
    """The fitted rows' own 5-fold cross-validation, as ``costmodel cv`` runs it, kept in the model for
    its prediction intervals (``analysis.costmodel.evaluate.heldout_record``); {} with a note where
    the rows hold too few configurations or cannot be cross-validated."""
    from analysis.costmodel.evaluate import cross_validate, heldout_record
    from analysis.costmodel.model import measured_configs
    n = len(measured_configs(d["rows"]))
    if n < MIN_INTERVAL_CONFIGS:
        print(f"note: {n} configuration(s), fewer than {MIN_INTERVAL_CONFIGS}: no cross-validation, so no "
              f"prediction intervals", file=sys.stderr)
        return {}
    folds = 5
    try:
        cmp = cross_validate(d["rows"], folds=folds, probes=d["probes"], steps=d["steps"],
                             step_probe=d["step_probe"], stage_probe=d["stage_probe"], worker_probe=d["worker_probe"],
                             loader_probe=d["loader_probe"] if args.loader_probe else None)
    except CostModelError as e:
        print(f"note: no prediction intervals: the rows could not be cross-validated ({e})", file=sys.stderr)
        return {}
    return heldout_record(cmp, folds=folds)


def cmd_predict(args) -> int:
    from analysis.costmodel.model import INTERVAL_LEVEL, interval_rank, load, predict
    model = load(args.model)
    if bool(args.grid) == bool(args.configs):
        raise CostModelError("predict: give either --grid key=v1,v2 ... or --configs CONFIGS.csv")
    if args.configs:
        if not Path(args.configs).is_file():
            raise CostModelError(f"--configs {args.configs!r}: no such file")
        configs = pd.read_csv(args.configs, dtype={"config_id": str})
        if "config_id" in configs and "repeat" in configs:  # a measured rows.csv: one row per configuration
            configs = configs.drop_duplicates("config_id")
    else:
        configs = parse_grid(args.grid)
    if args.level is not None and not model.heldout.get("abs_log_errors"):
        raise CostModelError(f"--level {args.level}: {args.model} kept no held-out errors to size an interval "
                             f"with; refit it with 'python -m analysis costmodel fit RESULTS_DIR' (without --no_intervals)")
    level = INTERVAL_LEVEL if args.level is None else args.level
    interval_rank(len(model.heldout.get("abs_log_errors") or []), level)  # a bad level fails here, before any work
    pred = predict(model, configs, level=level)
    cols = [c for c in ("model", "batch_size", "image_size", "augment_cost", "source", "precision", "grad_accum_steps",
                        "num_workers", "prefetch_buffer_size", "feed", "samples_per_s", "samples_per_s_lo",
                        "samples_per_s_hi", "stall_frac", "input_bound", "bottleneck", "extrapolated") if c in pred]
    if args.out:
        pred.to_csv(args.out, index=False)
        print(f"wrote {args.out}")
    print(pred[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if "samples_per_s_lo" in pred:
        print(f"samples_per_s_lo/_hi: the {level:.0%} prediction interval, from the "
              f"{len(model.heldout['abs_log_errors'])} configurations the model's study held out of its own fit "
              f"(analysis.costmodel.model.interval_halfwidth); none for an extrapolated configuration")
    return 0


def _print_parts(s: dict) -> None:
    """The error's split (``analysis.costmodel.evaluate.compare``) and the measurements' own
    intervals, when the summary has them."""
    if "median_interval_width" in s:
        print(f"measured intervals: median width {s['median_interval_width']:.1%} of the median, max "
              f"{s['max_interval_width']:.1%}; {s['n_interval_under_15pct']} of {s['n']} narrower than 15%")
    if "median_work_spread" in s:
        print(f"identical work: the stamped augmentation's CPU per sample differed between a configuration's "
              f"repeats by a median {s['median_work_spread']:.1%}, max {s['max_work_spread']:.1%} (the machine's own "
              f"steadiness)")
    f = s.get("noise_floor")
    if f:
        from analysis.costmodel.evaluate import noise_verdict
        from analysis.costmodel.holdout import GOAL
        print(f"noise floor: a model that predicted every configuration exactly would score a median "
              f"{f['median_abs_rel_error']:.1%}, max {f['max_abs_rel_error']:.1%}, Kendall tau {f['kendall_tau']:.2f} "
              f"against these measurements (one run's noise {f['noise_sd']:.1%} rms, from the repeats) and meet "
              f"the goal (median <= {GOAL['median_abs_rel_error']:.0%}, max <= {GOAL['max_abs_rel_error']:.0%}, "
              f"tau >= {GOAL['kendall_tau']:g}) in {f['p_goal']:.0%} of {f['draws']} draws")
        if "p_median" in f:
            print(f"  the exact model errs as much as this model's median in {f['p_median']:.1%} of the draws "
                  f"({noise_verdict(f['p_median'])} the noise), as much as its max in {f['p_max']:.1%} "
                  f"({noise_verdict(f['p_max'])} the noise)")
    if "interval_coverage" in s:
        print(f"prediction intervals ({s['interval_level']:.0%}, from the model's study's held-out errors): "
              f"{s['n_in_interval']} of {s['n_with_interval']} measured medians inside ({s['interval_coverage']:.0%})")
    if "median_stage_ratio" in s or "median_step_ratio" in s:
        parts = []
        if "median_stage_ratio" in s:
            parts.append(f"the stamped stages took {s['median_stage_ratio']:.2f}x the model's CPU for them")
        if "median_step_ratio" in s:
            parts.append(f"the steps alone {s['median_step_ratio']:.2f}x the step model's")
        print(f"the machine against calibration (medians): {' and '.join(parts)}; a machine that ran at "
              f"another speed than during calibration moves every prediction by about as much")
    if "median_abs_step_part" in s:
        print(f"of it, from the step model: median {s['median_abs_step_part']:.1%}, max {s['max_abs_step_part']:.1%}; "
              f"with each step measured (loader, feed, contention): median {s['median_abs_pipeline_part']:.1%}, "
              f"max {s['max_abs_pipeline_part']:.1%}")


def parse_sets(items: list[str], knobs: bool = True) -> tuple[dict, dict]:
    """``--set KEY=VALUE`` items -> (knob changes, machine changes: ``hierarchy``, ``cpu_count``,
    ``cpu_scale``); CostModelError naming the item for anything else (knobs only where ``knobs``)."""
    changes, machine = {}, {}
    for it in items:
        key, sep, val = it.partition("=")
        if not sep or not val:
            raise CostModelError(f"--set {it!r}: expected KEY=VALUE")
        if key == "hierarchy":
            machine["hierarchy"] = val
        elif key == "cpu_count":
            cores = _value(val)
            if not isinstance(cores, int) or cores < 1:
                raise CostModelError(f"--set cpu_count={val!r}: expected a positive integer")
            machine["cpu_count"] = cores
        elif key == "cpu_scale":
            scale = _value(val)
            if not isinstance(scale, (int, float)) or not 0 < scale < float("inf"):
                raise CostModelError(f"--set cpu_scale={val!r}: expected a positive number (the host's CPU time "
                                     f"per unit of loader work over the calibrated host's, e.g. 1.2)")
            machine["cpu_scale"] = float(scale)
        elif knobs and key in KNOB_DEFAULTS:
            changes[key] = _value(val)
        else:
            known = "hierarchy, cpu_count, cpu_scale" + (f", {', '.join(KNOB_DEFAULTS)}" if knobs else "")
            raise CostModelError(f"--set {key!r}: not {'a knob' if knobs else 'a machine setting'}; known: {known}")
    return changes, machine


def _calibration_stage_probe(model) -> pd.DataFrame | None:
    """The stage probe of the first folder the model was fitted on, when it is at hand."""
    from experiments.results import read_csv_rows
    if not model.sources:
        return None
    path = Path(model.sources[0]) / "stage_probe" / "rows.csv"
    return read_csv_rows(path) if path.is_file() else None


def cmd_compare(args) -> int:
    from analysis.costmodel.evaluate import (host_stage_ratio, noise_floor, other_cpu, other_platform,
                                             predicted_vs_measured, summary, worst)
    from analysis.costmodel.model import load, measured_configs
    model = load(args.model)
    _, machine = parse_sets(args.set, knobs=False)
    d = read_dir(args.results)
    meas = measured_configs(d["rows"])
    other_platform(model, meas, machine.get("hierarchy"))
    cmp = predicted_vs_measured(model, d["rows"], meas, step=args.step, **machine)
    s = summary(cmp)
    s["noise_floor"] = noise_floor(d["rows"], cmp.config_id, observed=s)
    s["step"] = args.step
    s.update(machine)
    other = other_cpu(model, meas)
    if other:
        s["other_cpu"] = other
        print(f"note: {other}", file=sys.stderr)
    ratio = host_stage_ratio(_calibration_stage_probe(model), d["stage_probe"])
    if ratio is not None:
        s["host_stage_ratio"] = ratio
        if abs(ratio["median"] - 1) > 0.05 and "cpu_scale" not in machine:
            print(f"note: this folder's stage probe spent {ratio['median']:.2f}x (per combination "
                  f"{ratio['min']:.2f}-{ratio['max']:.2f}, {ratio['n']} combinations) the CPU of the model's first "
                  f"folder's on the same stages; --set cpu_scale={ratio['median']:.2f} carries the model's loader "
                  f"costs to this host by that ratio (it cut the what-if's median error on an H200 host and raised "
                  f"it on an H100 host: results/nvidia-h100/README.md)", file=sys.stderr)
    # (the interval's columns after rel_error: scripts read the first six by position)
    print(cmp[[c for c in ("config_id", "measured", "measured_lo", "measured_hi", "predicted", "rel_error",
                           "within_noise", "predicted_lo", "predicted_hi", "covered", "bottleneck") if c in cmp]
              ].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    w = worst(cmp)
    for _, r in w.iterrows():
        print(f"worst: {r.config_id} {r.rel_error:+.1%} {r.reason}")
    print(f"median |rel error| {s['median_abs_rel_error']:.1%}, max {s['max_abs_rel_error']:.1%}, "
          f"Kendall tau {s['kendall_tau']:.2f}, n {s['n']}")
    _print_parts(s)
    if args.json:
        _print_json(s)
    return 0


def cmd_cv(args) -> int:
    from analysis.costmodel.evaluate import cross_validate, noise_floor, self_consistent_rows, summary, worst
    d = read_dir(args.results)
    if args.self_check:
        from analysis.costmodel.model import fit
        model = fit(d["rows"], d["probes"], d["steps"], d["step_probe"], sources=[args.results],
                    loader_probe=d["loader_probe"] if args.loader_probe else None, stage_probe=d["stage_probe"],
                    worker_probe=d["worker_probe"])
        d["rows"] = self_consistent_rows(model, d["rows"])
        print("self-check: every run's samples/s replaced by the model's own prediction (fitted on all of "
              "these rows), then cross-validated as the measured rows are: the check's best for this design "
              "and model, without the machine's noise")
    cmp = cross_validate(d["rows"], kind=args.kind, folds=args.folds, seed=args.seed, probes=d["probes"],
                         steps=d["steps"], step_probe=d["step_probe"], stage_probe=d["stage_probe"],
                         loader_probe=d["loader_probe"] if args.loader_probe else None, step=args.step,
                         worker_probe=d["worker_probe"], hold_out_probes=not args.keep_probes)
    s = summary(cmp)
    if not args.self_check:  # (the model's own predictions have no noise to speak of)
        s["noise_floor"] = noise_floor(d["rows"], cmp.config_id, observed=s)
    s["kind"] = args.kind
    s["step"] = args.step
    s["probes"] = "kept" if args.keep_probes else "held out"
    s["self_check"] = bool(args.self_check)
    print(cmp[["fold", "config_id", "measured", "predicted", "rel_error", "within_noise", "bottleneck",
               "extrapolated"]].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    for _, r in worst(cmp).iterrows():
        print(f"worst: {r.config_id} ({r.fold}) {r.rel_error:+.1%} {r.reason}")
    print(f"{args.kind}, step {args.step}, probe shapes {s['probes']}: median |rel error| "
          f"{s['median_abs_rel_error']:.1%}, max {s['max_abs_rel_error']:.1%}, Kendall tau {s['kendall_tau']:.2f}, "
          f"n {s['n']}")
    _print_parts(s)
    if args.json:
        _print_json(s)
    return 0


def _goal(text: str) -> dict:
    from analysis.costmodel.holdout import GOAL
    parts = text.split(",")
    try:
        vals = [float(v) for v in parts]
    except ValueError:
        vals = []
    if len(vals) != 3 or not all(np.isfinite(vals)) or not (0 < vals[0] <= vals[1]) or not -1 <= vals[2] <= 1:
        raise CostModelError(f"--goal {text!r}: expected MEDIAN,MAX,TAU, e.g. 0.05,0.15,0.8 (0 < median <= max, "
                             f"-1 <= tau <= 1)")
    return dict(zip(GOAL, vals))


def cmd_holdout(args) -> int:
    from analysis.costmodel.holdout import (CHECKS, GOAL, by_configuration, errors_of, evaluate_pairs, find_pairs,
                                            format_by_configuration, format_table, medians, table_of)
    goal = _goal(args.goal) if args.goal else dict(GOAL)
    if args.jobs < 1:
        raise CostModelError(f"--jobs {args.jobs}: give a positive number of worker processes")
    for flag, path in (("--out", args.out), ("--errors_out", args.errors_out)):
        if path and not Path(path).resolve().parent.is_dir():
            raise CostModelError(f"{flag} {path!r}: its folder does not exist; create it or give another path")
    pairs = find_pairs(args.folders, [tuple(p) for p in args.pair])
    results = evaluate_pairs(pairs, jobs=args.jobs, progress=True, goal=goal)
    table = table_of(results, goal)
    if args.out:
        table.to_csv(args.out, index=False)
    print(format_table(table))
    split = {}
    if args.by_config or args.errors_out:
        errors = errors_of(results)
        if args.errors_out:
            errors.to_csv(args.errors_out, index=False)
        if args.by_config:
            for check, _ in CHECKS:
                configs, split[check] = by_configuration(errors, check, goal)
                print(format_by_configuration(configs, split[check]))
    m = medians(table)
    for check, _ in CHECKS:
        s = m[f"median_{check}"]
        print(f"{check}: median over {m['n_pairs']} pairs of the median |rel error| {s['median_abs_rel_error']:.1%}, "
              f"of the max {s['max_abs_rel_error']:.1%}, of Kendall tau {s['kendall_tau']:.2f}; "
              f"{m[f'n_meeting_{check}']} pair(s) meet the goal")
    print(f"goal (median <= {goal['median_abs_rel_error']:.0%}, max <= {goal['max_abs_rel_error']:.0%}, tau >= "
          f"{goal['kendall_tau']:.2f}) met by both checks: {m['n_meeting_both']} of {m['n_pairs']} pair(s)"
          + (f" ({', '.join(m['pairs_meeting_both'])})" if m["pairs_meeting_both"] else ""))
    print(f"with cv_kept (cv --keep_probes) for cv: {m['n_meeting_both_kept']} of {m['n_pairs']} pair(s)"
          + (f" ({', '.join(m['pairs_meeting_both_kept'])})" if m["pairs_meeting_both_kept"] else ""))
    if "exact_meeting_both" in m:
        print(f"noise floor: a model that predicted every configuration exactly would meet the goal, against the "
              f"same measurements, in {m['exact_meeting_cv']:.1f} (cv) and {m['exact_meeting_compare']:.1f} (compare) "
              f"of {m['n_pairs']} pairs and in both in {m['exact_meeting_both']:.1f} (expected counts over each "
              f"pair's draws)")
        beyond = [f"{check} {m[f'n_median_beyond_noise_{check}']} (median) and {m[f'n_max_beyond_noise_{check}']} (max)"
                  for check, _ in CHECKS if f"n_median_beyond_noise_{check}" in m]
        if beyond:
            print(f"pairs whose error is beyond the noise (an exact model as bad in under 5% of draws): "
                  f"{'; '.join(beyond)}, of {m['n_pairs']}")
        for cpu, e in m["exact_by_cpu"].items():
            print(f"  {cpu}: {e['n_pairs']} pair(s); the model meets both in {e['n_meeting_both']}, an exact model "
                  f"in {e['exact_meeting_both']:.1f}")
    c = m.get("compare_interval_coverage")
    if c:
        from analysis.costmodel.model import INTERVAL_LEVEL
        print(f"prediction intervals: {c['n_in_interval']} of the comparisons' {c['n_with_interval']} measured medians "
              f"({c['coverage']:.1%}) fell inside the {INTERVAL_LEVEL:.0%} interval sized by their study's "
              f"cross-validation")
    for path in (args.out, args.errors_out):
        if path:
            print(f"wrote {path}")
    if args.json:
        _print_json({**m, "goal": goal, **({"by_configuration": split} if split else {})})
    return 0


def add_args(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    f = sub.add_parser("fit", help="calibrate on one or more results folders")
    f.add_argument("results", nargs="+", help="results folders (rows.csv; probe/ and steps.csv if present)")
    f.add_argument("--out", help="model file (default RESULTS_DIR/costmodel.json)")
    f.add_argument("--loader_probe", action="store_true",
                   help="fit the loader terms to loader_probe/rows.csv too (off by default: on the committed "
                        "study it raised the held-out error; see analysis.costmodel.model.fit)")
    f.add_argument("--no_intervals", action="store_true",
                   help="skip the 5-fold cross-validation (about five more fits) that sizes the model's "
                        "prediction intervals; its predictions then have none")
    f.set_defaults(_action=cmd_fit)
    pr = sub.add_parser("predict", help="predict configurations")
    pr.add_argument("model", help="MODEL.json from 'costmodel fit'")
    pr.add_argument("--grid", nargs="+", metavar="KEY=V1,V2", help="a grid of knob values")
    pr.add_argument("--configs", help="a CSV of configurations (a measured rows.csv works)")
    pr.add_argument("--out", help="write the predictions as CSV")
    pr.add_argument("--level", type=float,
                    help="the prediction interval's level (default 0.8), from the held-out errors the model kept")
    pr.set_defaults(_action=cmd_predict)
    c = sub.add_parser("compare", help="predict a results folder's configurations and compare")
    c.add_argument("model")
    c.add_argument("results")
    c.add_argument("--step", choices=("predicted", "measured"), default="predicted",
                   help="each configuration's step: from the model (default) or its own measured device-resident bound")
    c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="predict the rows' machine from the model's (repeatable): hierarchy=h100_sxm|h200 puts "
                        "the step on that accelerator, cpu_count=N the host's cores, cpu_scale=X the host's CPU "
                        "time per unit of loader work over the calibrated host's")
    c.add_argument("--json", action="store_true")
    c.set_defaults(_action=cmd_compare)
    r = sub.add_parser("recommend", help="the cheapest loader configuration within a tolerance of the best predicted")
    r.add_argument("model")
    r.add_argument("--base", help="configurations CSV whose fastest row is recommended around (default: the "
                                  "fastest measured configuration of the model's first folder)")
    r.add_argument("--cpu_budget", type=int, help="cores the loader's workers may take (default: the host's)")
    r.add_argument("--ram_budget_mb", type=float, help="host MiB the loader's buffers may hold (default: no limit)")
    r.add_argument("--tolerance", type=float, default=0.05, help="how far below the best (default 0.05)")
    r.add_argument("--top", type=int, default=12, help="candidates printed (default 12)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(_action=cmd_recommend)
    v = sub.add_parser("cv", help="cross-validate on one results folder")
    v.add_argument("results")
    v.add_argument("--kind", choices=("kfold", "lokvo"), default="kfold")
    v.add_argument("--folds", type=int, default=5)
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--step", choices=("predicted", "measured"), default="predicted",
                   help="the held-out configurations' step: from the step model (default), or their own measured "
                        "device-resident bound (then only the pipeline around the step is predicted)")
    v.add_argument("--self_check", action="store_true",
                   help="cross-validate the model's own noise-free predictions instead of the measured samples/s "
                        "(every other column as measured): what the check can show at best for this design and "
                        "model (analysis.costmodel.evaluate.self_consistent_rows)")
    v.add_argument("--keep_probes", action="store_true",
                   help="keep the held-out configurations' own shapes in the step, stage and worker probes (by "
                        "default they are held out with the configurations; a study measures its probes over its "
                        "knobs' levels whichever configurations it runs, so this is the error for a configuration "
                        "it did not run inside its levels; see analysis.costmodel.evaluate.cross_validate)")
    v.add_argument("--loader_probe", action="store_true",
                   help="fit the loader terms to loader_probe/rows.csv too (off by default: on the committed "
                        "study it raised the held-out error; see analysis.costmodel.model.fit)")
    v.add_argument("--json", action="store_true")
    v.set_defaults(_action=cmd_cv)
    h = sub.add_parser("holdout", help="cv and compare over held-out pairs (study/ + second/), with the goal per pair")
    h.add_argument("folders", nargs="*", help="pair folders (study/ and second/, each with rows.csv) or folders of them")
    h.add_argument("--pair", nargs=2, action="append", default=[], metavar=("STUDY", "SECOND"),
                   help="a pair laid out otherwise: the study's folder and the second sweep's (repeatable)")
    h.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                   help="worker processes, each evaluating one pair at a time (default: 2, or 1 on one core)")
    h.add_argument("--goal", help="MEDIAN,MAX,TAU each check is held to (default 0.05,0.15,0.8)")
    h.add_argument("--out", help="write the table as CSV")
    h.add_argument("--by_config", action="store_true",
                   help="split each check's errors into each pair's shift, each configuration's bias over the "
                        "pairs, and the rest, and list the most biased configurations")
    h.add_argument("--errors_out", help="write every configuration's error in every pair and check as CSV")
    h.add_argument("--json", action="store_true")
    h.set_defaults(_action=cmd_holdout)


def run(args: argparse.Namespace) -> int:
    try:
        return args._action(args)
    except (CostModelError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def add_whatif_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="MODEL.json from 'costmodel fit'")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a knob to change (repeatable); hierarchy=h100_sxm|h200 moves the step to that "
                        "accelerator, cpu_count=N sets the host's cores, cpu_scale=X the host's CPU time per "
                        "unit of loader work over the calibrated host's")
    p.add_argument("--base", help="baseline configurations CSV (default: the fastest measured configuration "
                                  "of the first folder the model was fitted on)")
    p.add_argument("--json", action="store_true")


def base_config(model, base_csv: str | None, what: str) -> pd.DataFrame:
    """One configuration: the fastest of ``base_csv`` (a configurations CSV or a measured rows.csv)
    or, without it, the fastest measured configuration of the first folder the model was fitted on."""
    from analysis.costmodel.model import measured_configs
    if base_csv:
        if not Path(base_csv).is_file():
            raise CostModelError(f"--base {base_csv!r}: no such file")
        base = pd.read_csv(base_csv, dtype={"config_id": str})
        base = base.drop_duplicates("config_id") if "config_id" in base else base
    else:
        if not model.sources or not (Path(model.sources[0]) / "rows.csv").is_file():
            raise CostModelError(f"{what}: the model's rows are not at hand; give --base CONFIGS.csv")
        base = measured_configs(read_dir(model.sources[0])["rows"])
    base = base.sort_values("samples_per_s", ascending=False).head(1) if "samples_per_s" in base else base.head(1)
    return base.reset_index(drop=True)


def cmd_recommend(args) -> int:
    from analysis.costmodel.model import load
    from analysis.costmodel.recommend import choice, describe, recommend
    model = load(args.model)
    base = base_config(model, args.base, "recommend")
    if args.ram_budget_mb is not None and not args.ram_budget_mb > 0:
        raise CostModelError(f"--ram_budget_mb {args.ram_budget_mb!r}: a positive number of MiB")
    table = recommend(model, base, cpu_budget=args.cpu_budget, tolerance=args.tolerance,
                      ram_budget_bytes=None if args.ram_budget_mb is None else args.ram_budget_mb * 2**20)
    cols = ["num_workers", "prefetch_buffer_size", "feed", "samples_per_s", "speed_vs_best", "host_bytes",
            "within_budget", "near_best", "recommended", "bottleneck"]
    shown = table[table.within_budget].sort_values("samples_per_s", ascending=False)
    print(shown[cols].head(args.top).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(describe(table))
    if args.json:
        r = choice(table)
        _print_json({"num_workers": int(r.num_workers), "prefetch_buffer_size": int(r.prefetch_buffer_size),
                     "feed": r.feed, "samples_per_s": float(r.samples_per_s), "speed_vs_best": float(r.speed_vs_best),
                     "host_bytes": int(r.host_bytes), "device_bytes": int(r.device_bytes),
                     "bottleneck": r.bottleneck, "extrapolated": r.extrapolated})
    return 0


def run_whatif(args: argparse.Namespace) -> int:
    from analysis.costmodel.evaluate import whatif
    from analysis.costmodel.model import INTERVAL_LEVEL, load
    try:
        model = load(args.model)
        changes, machine = parse_sets(args.set)
        if not args.set:
            raise CostModelError("whatif: give at least one --set KEY=VALUE")
        table = whatif(model, base_config(model, args.base, "whatif"), changes, **machine)
    except (CostModelError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    w = table.iloc[1]
    span = (f" [{w.samples_per_s_lo:.4g}, {w.samples_per_s_hi:.4g}]"
            if "samples_per_s_lo" in table and np.isfinite(w.samples_per_s_lo) else "")
    print(f"what if {' '.join(args.set)}: {w.samples_per_s:.4g}{span} samples/s ({w.speedup:.2f}× the baseline), "
          f"bottleneck {w.bottleneck}, {w.input_bound}" + (f"; EXTRAPOLATION: {w.extrapolated}" if w.extrapolated else ""))
    if span:
        print(f"[lo, hi]: the {INTERVAL_LEVEL:.0%} prediction interval from the held-out errors of "
              f"the model's study")
    if args.json:
        extra = ({"samples_per_s_lo": float(w.samples_per_s_lo), "samples_per_s_hi": float(w.samples_per_s_hi)}
                 if span else {})
        _print_json({"samples_per_s": float(w.samples_per_s), "baseline_samples_per_s": float(table.samples_per_s.iloc[0]),
                     **extra, "speedup": float(w.speedup), "bottleneck": w.bottleneck, "stall_frac": float(w.stall_frac),
                     "extrapolated": w.extrapolated})
    return 0
