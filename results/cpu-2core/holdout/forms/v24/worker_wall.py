"""A loader worker's period against its CPU: runs with workers that keep their step waiting
(``data_wait_frac`` > 0.3), ``pair52`` on. ``r`` is the run's seconds per batch over its workers'
CPU per batch divided by the number of workers (below 1: part of a worker's CPU runs beside its
pipeline); ``ov`` the CPU a sample beyond the period, µs, for the runs with one worker. From the
repository root:

    .venv/bin/python results/cpu-2core/holdout/forms/v24/worker_wall.py
"""
import glob, os
import numpy as np, pandas as pd

out = []
for d in sorted(glob.glob("results/cpu-2core/holdout/pair*")):
    if int(os.path.basename(d)[4:]) < 52:
        continue
    for sub in ("study", "second", "study/worker_probe"):
        q = os.path.join(d, sub, "rows.csv")
        if not os.path.exists(q):
            continue
        s = pd.read_csv(q)
        if "worker_cpu_s_per_sample" not in s:
            continue
        s = s[(s.status == "ok") & (s.num_workers >= 1) & (s.data_wait_frac > 0.3)].copy()
        if not len(s):
            continue
        s["T"] = s.batch_size / s.samples_per_s
        s["W"] = s.batch_size * s.worker_cpu_s_per_sample
        s["r"] = s["T"] / (s.W / s.num_workers)
        s["ov"] = (s.W - s["T"]) / s.batch_size * 1e6
        s["pair"], s["sub"] = os.path.basename(d), sub
        s["cpu"] = s.cpu_model.astype(str).str[:5] if "cpu_model" in s else "na"
        out.append(s)
J = pd.concat(out)
K = ["cpu", "sub", "model", "precision", "grad_accum_steps", "batch_size", "image_size", "source", "augment_cost",
     "num_workers"]
print(J.groupby(K).agg(n=("r", "size"), r=("r", "median"), ov=("ov", "median")).round(3).to_string())
