"""Replays the fed loop's warm-up rule on each run of ``steps.csv`` (the runs of ``run.sh``) and prints
what the quick sweep's 1 s window would have read after each rule's stop, against the same run's
window from 2 s to 6 s (its steady state). "growth" is the rule before the drain check (the batches'
age no longer growing), "drain" the rule now in ``experiments.train._filled``. From the repository
root: ``.venv/bin/python results/cpu-2core/holdout/drain/table.py``."""
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, ".")
from experiments.train import FILL_MAX_S, FILL_TOL, FILL_WINDOW, _filled, _steady  # noqa: E402

HERE = Path(__file__).parent
MAX_WARMUP_S = 1.0  # the quick sweep's


def growth_only(ages, times, k):
    """The rule before the drain check: no worker's batches growing older."""
    k, w = max(1, k), FILL_WINDOW
    recent = ages[-2 * w * k:]
    if len(recent) < 2 * w * k or not all(math.isfinite(a) for a in recent):
        return False
    tol = FILL_TOL * float(np.median(times[-w * k:]))
    return all(np.mean(recent[j::k][w:]) - np.mean(recent[j::k][:w]) <= tol for j in range(k))


def stop(t, ages, waits, k, rule):
    """The step after which ``measure_window`` would stop warming up (its startup steps: the first
    ``k + 1`` waits with workers do not count toward the limits)."""
    warm = startup = 0.0
    for i in range(len(t)):
        warm += t[i]
        if k and i < k + 1:
            startup += waits[i]
        if i + 1 < 3:  # warmup_steps
            continue
        s = warm - startup
        if (_steady(list(t[:i + 1])) or s >= MAX_WARMUP_S) and (rule(list(ages[:i + 1]), list(t[:i + 1]), k)
                                                                or s >= max(MAX_WARMUP_S, FILL_MAX_S)):
            return i + 1
    return None


def rate(t, start, seconds=1.0, min_steps=5):
    """Steps per second of the window that starts at ``start`` and lasts ``seconds`` (or min_steps)."""
    c = np.cumsum(t[start:])
    n = max(min_steps, int(np.searchsorted(c, seconds)) + 1)
    return n / t[start:start + n].sum()


def main():
    steps, rows = pd.read_csv(HERE / "steps.csv"), pd.read_csv(HERE / "rows.csv")
    out = []
    for (code, run), g in steps.groupby(["code", "run"], sort=False):
        r = rows[(rows.code == code) & (rows.run == run)].iloc[0]
        t, ages, waits = (g[c].to_numpy(float) for c in ("step_time_s", "batch_age_s", "data_wait_s"))
        k, warm = int(r.num_workers), int(g.warmup.sum())
        rec = {"code": code, "run": run, "warm-up steps": warm}
        for name, rule in (("growth", growth_only), ("drain", _filled)):
            at = stop(t, ages, waits, k, rule)
            rec[f"{name} stop"] = at
            rec[f"{name} 1 s"] = r.batch_size * rate(t, at)
        w = np.cumsum(t[warm:])
        late = warm + int(np.searchsorted(w, 2.0))
        rec["2-6 s"] = r.batch_size * len(t[late:]) / t[late:].sum()
        rec["first 0.5 s age ms"] = 1e3 * np.nanmean(ages[warm:warm + int(np.searchsorted(w, 0.5)) + 1])
        rec["after age ms"] = 1e3 * np.nanmean(ages[late:])
        out.append(rec)
    d = pd.DataFrame(out)
    # the code that ran must stop where its own rule says: growth for the first set, drain for the second
    own = np.where(d.code == "growth rule", d["growth stop"], d["drain stop"])
    assert (own == d["warm-up steps"]).all(), "a replayed rule does not reproduce the recorded warm-up"
    pd.set_option("display.width", 200)
    print(d.round(1).to_string(index=False))
    d["cfg"] = d.run.str.split("_").str[0]
    for (code, cfg), g in d.groupby(["code", "cfg"], sort=False):
        print(f"{code}, {cfg}: the 1 s window over the run's 2-6 s, median of {len(g)}: "
              f"growth rule {np.median(g['growth 1 s'] / g['2-6 s']) - 1:+.1%}, "
              f"drain rule {np.median(g['drain 1 s'] / g['2-6 s']) - 1:+.1%}")


if __name__ == "__main__":
    main()
