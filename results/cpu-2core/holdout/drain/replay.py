"""Replays the fed loop's warm-up on every run of the pairs' sweeps (their ``steps.csv``) under three
rules and prints, per configuration, how much later each would have stopped and what the window
after that stop reads against the window the run measured. "growth" is the rule the runs ran
(it reproduces every recorded warm-up, which the script checks), "youngest" the drain check now in
``experiments.train._filled`` (the youngest batches no longer getting younger), "every" a stricter
one (no worker's batches getting younger). ``bias``: log of the recorded window's mean step over
the mean step of its steps after the rule's stop, that is of the samples/s after the stop over the
recorded window's (negative: the recorded window read fast; median over the runs; NaN where the
stop falls within three steps of the window's end, counted in ``beyond``). From the repository root:

    .venv/bin/python results/cpu-2core/holdout/drain/replay.py 152 173
"""
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, ".")
from experiments.train import FILL_TOL, FILL_WINDOW, _filled  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from table import growth_only, stop  # noqa: E402

H = Path("results/cpu-2core/holdout")


def every_level(ages, times, k):
    k, w = max(1, k), FILL_WINDOW
    if not growth_only(ages, times, k):
        return False
    recent = ages[-2 * w * k:]
    tol = FILL_TOL * float(np.median(times[-w * k:]))
    return all(abs(np.mean(recent[j::k][w:]) - np.mean(recent[j::k][:w])) <= tol for j in range(k))


def main(first: int, last: int):
    rules = {"growth": growth_only, "youngest": _filled, "every": every_level}
    out = []
    for n in range(first, last + 1):
        for part in ("study", "second"):
            d = H / f"pair{n}" / part
            if not (d / "steps.csv").exists():
                continue
            s, r = pd.read_csv(d / "steps.csv"), pd.read_csv(d / "rows.csv")
            s = s[s.phase == "fed"]
            for _, row in r[r.status == "ok"].iterrows():
                g = s[(s.config_id == row["config_id"]) & (s["repeat"] == row["repeat"])]
                t, ages, waits = (g[c].to_numpy(float) for c in ("step_time_s", "batch_age_s", "data_wait_s"))
                warm, k = int(g.warmup.sum()), int(row.num_workers)
                rec = {"part": part, "config": f"{row.model} {row.precision} {row.batch_size}/{row.image_size} "
                       f"x{row.grad_accum_steps} {row.source} nw{k} pb{row.prefetch_buffer_size} {row.feed}",
                       "warm": warm}
                for name, rule in rules.items():
                    at = stop(t, ages, waits, k, rule)
                    rec[f"{name}_stop"] = at
                    if at is None or at >= len(t) - 3:
                        rec[f"{name}_bias"] = rec[f"{name}_extra_s"] = np.nan
                    else:
                        rec[f"{name}_bias"] = (math.log(t[warm:].mean() / t[max(at, warm):].mean()) if at > warm else 0.0)
                        rec[f"{name}_extra_s"] = float(t[warm:at].sum()) if at > warm else 0.0
                out.append(rec)
    d = pd.DataFrame(out)
    assert (d.growth_stop == d.warm).all(), "the growth rule does not reproduce a recorded warm-up"
    pd.set_option("display.width", 220)
    for name in ("youngest", "every"):
        later = d[f"{name}_stop"] > d.warm
        print(f"{name}: {len(d)} runs, {int(later.sum())} stop later, {int(d[f'{name}_bias'].isna().sum())} beyond "
              f"the recorded window; warm-up added where known {d[f'{name}_extra_s'].sum():.0f} s")
    g = d.groupby(["part", "config"]).agg(
        runs=("warm", "size"),
        youngest_later=("youngest_stop", lambda x: int((x > d.loc[x.index, "warm"]).sum())),
        youngest_beyond=("youngest_bias", lambda x: int(x.isna().sum())),
        youngest_bias=("youngest_bias", "median"), youngest_extra_s=("youngest_extra_s", "median"),
        every_beyond=("every_bias", lambda x: int(x.isna().sum())),
        every_bias=("every_bias", "median"), every_extra_s=("every_extra_s", "median"))
    print(g.round(3).sort_values("youngest_bias").to_string())


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
