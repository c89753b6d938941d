"""The holdout README's "The pipeline's thread as the workers' period" table: in runs with one loader
worker, the CPU of the worker's busiest thread (its pipeline's, ``worker_thread_cpu_s_per_sample``)
and of the whole worker (``worker_cpu_s_per_sample``) against the run's seconds per sample
(1 / ``samples_per_s``), per configuration, medians over the pairs whose rows carry the thread's CPU
(measured at or after commit b499c84). From the repository root:

    .venv/bin/python results/cpu-2core/holdout/worker-side/duty.py
"""
import os, sys, pandas as pd
sys.path[:0] = [".", os.path.dirname(os.path.abspath(__file__))]
from run import rows as runs_with_one_worker
KNOBS = ["model", "precision", "grad_accum_steps", "batch_size", "image_size", "source", "augment_cost"]
THREAD = "worker_thread_cpu_s_per_sample"


def rows():
    return runs_with_one_worker(KNOBS + ["samples_per_s", "worker_cpu_s_per_sample", THREAD], need=THREAD)


if __name__ == "__main__":
    r = rows()
    period = 1 / r.samples_per_s
    r = r.assign(thread_per_period=r.worker_thread_cpu_s_per_sample / period,
                 whole_per_period=r.worker_cpu_s_per_sample / period,
                 period_us=1e6 * period, side_us=1e6 * (r.worker_cpu_s_per_sample - r.worker_thread_cpu_s_per_sample))
    g = r.groupby(["which"] + KNOBS)
    t = g[["period_us", "thread_per_period", "whole_per_period", "side_us"]].median().round(3)
    t.insert(0, "pairs", g.pair.nunique())
    pd.set_option("display.width", 200)
    print(f"runs with one worker, pairs {', '.join(sorted(r.pair.unique(), key=lambda s: int(s[4:])))}: medians per configuration")
    print(t.reset_index().to_string(index=False))
