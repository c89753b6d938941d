"""A worker's CPU per sample beyond its stamped stages, against the wall time it spends on each sample
(``num_workers / samples_per_s``), for one loader in front of steps of growing length (``run.sh``).
From the repository root: .venv/bin/python results/cpu-2core/holdout/wait/table.py"""
import sys
import numpy as np, pandas as pd
sys.path.insert(0, ".")
from analysis.costmodel.model import _cpu_stamped

r = pd.read_csv("results/cpu-2core/holdout/wait/rows.csv")
r = r.assign(step_ms=1e3 * r.device_resident_step_median_s, wall_us=1e6 * r.num_workers / r.samples_per_s,
             stamps_us=1e6 * _cpu_stamped(r), busiest_us=1e6 * r.worker_thread_cpu_s_per_sample,
             worker_us=1e6 * r.worker_cpu_s_per_sample)
r["rest_us"] = r.worker_us - r.stamps_us
cols = ["width", "step_ms", "samples_per_s", "wall_us", "stamps_us", "busiest_us", "worker_us", "rest_us"]
pd.set_option("display.width", 200)
print(r[["order"] + cols].round(1).to_string(index=False))
print(r.groupby("width")[cols[1:]].median().round(1).to_string())
b = np.polyfit(r.wall_us, r.rest_us, 1)
print(f"rest = {b[1]:.1f} µs + {b[0]:.5f} × wall (the pairs' fit across configurations: 86 µs + 0.071 × wall)")
print(f"rest, first pass (order 0-4) median {r[r.order < 5].rest_us.median():.1f} µs, second pass {r[r.order >= 5].rest_us.median():.1f} µs")
