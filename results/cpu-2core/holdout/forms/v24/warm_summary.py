"""Per run of ``warm.py`` (``warm/A1``, ``A2``: two warm-up steps in the later rounds, as committed;
``B1``, ``B2``: at least 30 ms), the later rounds' median over the first round's: per shape, then
the median over all shapes, over the steps under 5 ms and over the others. From the repository root:

    .venv/bin/python results/cpu-2core/holdout/forms/v24/warm_summary.py > results/cpu-2core/holdout/forms/v24/warm.txt
"""
import glob

import numpy as np, pandas as pd

K = ["model", "precision", "grad_accum_steps", "batch_size", "image_size"]
for d in sorted(glob.glob("results/cpu-2core/holdout/forms/v24/warm/*")):
    r = pd.read_csv(d + "/rows.csv")
    r = r[r.status == "ok"]
    w = r.pivot_table(index=K, columns="repeat", values="device_resident_step_median_s")
    q = np.log(w[[1, 2]].median(axis=1) / w[0])
    small = w[0] < 0.005
    wu = r[r.repeat > 0].resident_warmup_steps_run.median()
    print(d, f"later/first median {np.exp(q.median()):.3f}  small-step shapes {np.exp(q[small].median()):.3f} "
             f"(n={small.sum()})  others {np.exp(q[~small].median()):.3f}  warmup steps later rounds {wu}")
