"""The runs of ``run.sh``: samples/s, the workers' CPU per sample and its part beyond the stamped
stages, per set and arm. From the repository root: .venv/bin/python results/cpu-2core/holdout/fill/table.py"""
import sys
import pandas as pd
sys.path.insert(0, ".")
from analysis.costmodel.model import _cpu_stamped

r = pd.read_csv("results/cpu-2core/holdout/fill/rows.csv")
r = r.assign(warmup_steps=r.warmup_steps_run, window_s=r.measure_s, stamps_us=1e6 * _cpu_stamped(r),
             worker_us=1e6 * r.worker_cpu_s_per_sample)
r["rest_us"] = r.worker_us - r.stamps_us
pd.set_option("display.width", 200)
cols = ["set", "arm", "order", "warmup_s", "warmup_steps", "window_s", "samples_per_s", "stamps_us", "worker_us", "rest_us"]
print(r[cols].round(2).to_string(index=False))
print(r.groupby(["set", "arm"], sort=False)[cols[3:]].median().round(1).to_string())
s = pd.read_csv("results/cpu-2core/holdout/fill/rule_steps.csv")
s = s[s.phase == "fed"]
print("the rule's first run, the batches' age by step (two workers in turn):")
print(s[["step", "warmup", "step_time_s", "batch_age_s"]].round(3).to_string(index=False))
