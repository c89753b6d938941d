"""Where a run's noise sits: within its 1 s window or between runs. For every configuration measured
twice in the pairs' sweeps, from the steps of each run's window (``steps.csv``, warm-up left out):
- the two halves of one window: the rms of log(first half's mean step / second half's), less the
  halves' mean difference;
- the two repeats: the rms of log(repeat 0's mean step / repeat 1's).
If the noise were white within the window, the halves would differ by sqrt(2) times the repeats
(variance ratio 2); if it were all between runs, not at all (0). Then each run's samples/s estimated
otherwise (median of 3 or 5 blocks' rates, steps over 3× the median left out, the median step) and
the one-run noise of each (rms of the repeats' log ratio / sqrt 2). From the repository root:

    .venv/bin/python results/cpu-2core/holdout/drain/window_noise.py 152 173
"""
import sys
from pathlib import Path

import numpy as np
import pandas as pd

H = Path("results/cpu-2core/holdout")


def main(first: int, last: int):
    out = []
    for n in range(first, last + 1):
        for part in ("study", "second"):
            f = H / f"pair{n}" / part / "steps.csv"
            if not f.exists():
                continue
            s = pd.read_csv(f)
            s = s[(s.phase == "fed") & ~s.warmup.astype(bool)]
            for (cid, rep), g in s.groupby(["config_id", "repeat"]):
                t = g.step_time_s.to_numpy()
                if len(t) < 8:
                    continue
                h = len(t) // 2
                out.append({"pair": n, "part": part, "cid": cid, "rep": rep,
                            "half": np.log(t[:h].mean() / t[len(t) - h:].mean()), "mean": np.log(t.mean()),
                            "blocks 3": np.log(np.median([b.mean() for b in np.array_split(t, 3)])),
                            "blocks 5": np.log(np.median([b.mean() for b in np.array_split(t, 5)])),
                            "trimmed": np.log(t[t < 3 * np.median(t)].mean()), "median step": np.log(np.median(t))})
    d = pd.DataFrame(out)
    rep = d.pivot_table(index=["pair", "part", "cid"], columns="rep", values="mean").dropna()
    rd = rep[0] - rep[1]
    half = d.half - d.half.mean()
    print(f"{len(d)} runs: halves rms {np.sqrt((half ** 2).mean()):.3f} (mean {d.half.mean():+.3f}), repeats rms "
          f"{np.sqrt((rd ** 2).mean()):.3f}, variance ratio {(half ** 2).mean() / (rd ** 2).mean():.2f}")
    for est in ("mean", "blocks 3", "blocks 5", "trimmed", "median step"):
        p = d.pivot_table(index=["pair", "part", "cid"], columns="rep", values=est).dropna()
        x = p[0] - p[1]
        print(f"{est:12s} one run's noise {np.sqrt((x ** 2).mean() / 2):.3f}, median |repeat difference| "
              f"{x.abs().median():.3f}, 90th percentile {x.abs().quantile(0.9):.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
