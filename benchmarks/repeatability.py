"""Repeatability benchmark: how much do repeated measurements of one configuration agree?

    python -m benchmarks.repeatability [--json] [--preset default|quick] [--repeats N] [--no-baseline]

Three configurations (num_workers 0, 1, 2 of the issue-11 configuration: mlp 512×2, arrayrecord,
augment_cost 2, prefetch 4, grain_device_put), each measured ``--repeats`` times (default 5) through
the real sweep (a process per run, repeats interleaved round-robin in a seeded shuffled order).
Printed per configuration: the median, interval and CV over repeats of samples/s and of the
device-resident bound, and the feed-efficiency interval.

The baseline, measured in the same sweep and interleaved with the rest, is the protocol the toolkit
used before time-based windows: a fixed 30 measured steps after 3 warm-up steps (about a third of a
second here), with everything else identical (same configurations, same process per run, same
loader-stopped bound). Its CV against ours is the ratio reported: it isolates what the windows buy.

``--preset default`` measures 3 s windows (the goal: median CV <= 2% on a quiet 2-core machine);
``--preset quick`` uses the quick study's settings (goal <= 5%). With ``--json`` the last line is one
JSON object with ``median_cv_samples_per_s``, ``median_cv_bound`` and ``max_feed_efficiency_upper``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

PRESETS = {  # the measurement windows of each protocol
    "default": dict(min_steps=30, min_measure_s=3.0, warmup_steps=3, max_warmup_s=3.0),
    "quick": None,  # filled from experiments.sweep.quick()
}
BASELINE = dict(min_steps=30, min_measure_s=0.0, warmup_steps=3, warmup_time_s=1e-9, max_warmup_s=3.0)
WINDOW_KEYS = ("min_steps", "min_measure_s", "warmup_steps", "warmup_time_s", "max_warmup_s")


def sweep_config(windows: dict, repeats: int, seed: int):
    from experiments import sweep
    return dataclasses.replace(sweep.quick(), sample_size=0, num_workers=(0, 1, 2), prefetch_buffer_size=(4,),
                               feed=("grain_device_put",), repeats=repeats, order_seed=seed, grain_stats=False,
                               **windows)


def _table(summary, label: str) -> list[str]:
    lines = [f"  {label}", f"  {'num_workers':>11s} {'samples/s [interval]':>28s} {'CV':>6s} "
             f"{'bound [interval]':>28s} {'CV':>6s} {'feed_efficiency [interval]':>28s}"]
    for _, r in summary.sort_values("num_workers").iterrows():
        lines.append(f"  {int(r.num_workers):>11d} {r.samples_per_s:9.0f} [{r.samples_per_s_lo:7.0f}, {r.samples_per_s_hi:7.0f}] "
                     f"{r.samples_per_s_cv:6.1%} {r.device_resident_samples_per_s:9.0f} "
                     f"[{r.device_resident_samples_per_s_lo:7.0f}, {r.device_resident_samples_per_s_hi:7.0f}] "
                     f"{r.device_resident_samples_per_s_cv:6.1%} {r.feed_efficiency:9.3f} "
                     f"[{r.feed_efficiency_lo:6.3f}, {r.feed_efficiency_hi:6.3f}]")
    return lines


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    ap.add_argument("--preset", choices=tuple(PRESETS), default="default",
                    help="measurement windows: default (3 s) or quick (the quick study's)")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved repeats per configuration (default 5)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the fixed-30-step baseline (half the time)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the run order")
    args = ap.parse_args(argv)
    if args.repeats < 2:
        ap.error(f"--repeats={args.repeats}: a CV needs at least 2 repeats")
    import pandas as pd
    from experiments import env, results, sweep

    windows = PRESETS[args.preset] or {k: getattr(sweep.quick(), k) for k in WINDOW_KEYS}
    protocols = {"windows": sweep_config(windows, args.repeats, args.seed)}
    if not args.no_baseline:
        protocols["baseline"] = sweep_config(BASELINE, args.repeats, args.seed)
    # One sweep runs both protocols' configurations interleaved: a combined schedule over the union.
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="memsim-repeatability-") as tmp:
        union = [(name, tc) for name, cfg in protocols.items() for tc in cfg.train_configs()]
        order = sweep.schedule(len(union), args.repeats, args.seed)
        runner = sweep.Runner()
        rows = []
        try:
            for i, rep in order:
                name, tc = union[i]
                out = runner.run(tc, 600)
                if "error" in out:
                    raise SystemExit(f"a run failed ({name}, num_workers={tc.num_workers}, repeat {rep}): {out['error']}")
                rows.append({**out["row"], "protocol": name, "repeat": rep,
                             "config_id": f"{name}-{tc.num_workers}"})
        finally:
            runner.close()
    wall = time.perf_counter() - t0
    df = pd.DataFrame(rows)
    summ = {name: results.summarize(df[df.protocol == name]) for name in protocols}
    ours = summ["windows"]
    e = env.environment()
    out = {
        "benchmark": "repeatability", "preset": args.preset, "repeats": args.repeats,
        "platform": e["platform"], "device_kind": e["device_kind"], "cpu_count": e["cpu_count"],
        "windows": windows, "wall_s": round(wall, 1),
        "cv_samples_per_s": {int(r.num_workers): r.samples_per_s_cv for _, r in ours.iterrows()},
        "cv_bound": {int(r.num_workers): r.device_resident_samples_per_s_cv for _, r in ours.iterrows()},
        "median_cv_samples_per_s": results.repeatability(ours),
        "median_cv_bound": results.repeatability(ours, "device_resident_samples_per_s"),
        "max_feed_efficiency_upper": float(ours.feed_efficiency_hi.max()),
        "bound_exceeded": int(ours.bound_exceeded.sum()),
        "goal_median_cv": 0.02 if args.preset == "default" else 0.05,
    }
    out["goal_met"] = bool(out["median_cv_samples_per_s"] <= out["goal_median_cv"])
    print(f"repeatability benchmark on {e['platform']} ({e['device_kind']}, {e['cpu_count']} cores): "
          f"{args.repeats} interleaved repeats, preset {args.preset} {windows}; {wall:.0f} s")
    for line in _table(ours, "time-based windows"):
        print(line)
    if "baseline" in summ:
        base = summ["baseline"]
        out["baseline_median_cv_samples_per_s"] = results.repeatability(base)
        out["baseline_median_cv_bound"] = results.repeatability(base, "device_resident_samples_per_s")
        out["baseline_cv/windows_cv"] = out["baseline_median_cv_samples_per_s"] / out["median_cv_samples_per_s"]
        for line in _table(base, "baseline: 30 fixed steps after 3 warm-up steps"):
            print(line)
        print(f"  median CV of samples/s: windows {out['median_cv_samples_per_s']:.2%}, baseline "
              f"{out['baseline_median_cv_samples_per_s']:.2%} (baseline/windows = {out['baseline_cv/windows_cv']:.2f}×)")
    print(f"  goal: median CV of samples/s <= {out['goal_median_cv']:.0%}: "
          f"{'met' if out['goal_met'] else 'NOT met'} ({out['median_cv_samples_per_s']:.2%})")
    if args.json:
        print(json.dumps(out, default=float))
    return out


if __name__ == "__main__":
    main()
    sys.exit(0)
