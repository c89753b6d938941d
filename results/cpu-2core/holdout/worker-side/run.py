"""The holdout README's "A worker's CPU beyond its period" tables: in runs with one loader worker, the
worker's CPU per sample (``worker_cpu_s_per_sample``) against the run's seconds per sample
(1 / ``samples_per_s``), and the main process's cores beside them (``host_cpu_util`` × cores less the
worker's). A worker that kept its step waiting and whose CPU were all on its period's path would
take no more CPU per sample than the period. From the repository root (it reads the pairs' committed
rows, the worker probe's and the studies' and second sweeps' runs with one worker):

    .venv/bin/python results/cpu-2core/holdout/worker-side/run.py
"""
import os, sys, pandas as pd
sys.path.insert(0, ".")
from analysis.costmodel.holdout import find_pairs
from analysis.costmodel.model import contention_observed
H = "results/cpu-2core/holdout/"
KNOBS = ["model", "precision", "grad_accum_steps", "batch_size", "image_size", "source", "augment_cost", "feed"]
COLS = KNOBS + ["num_workers", "cpu_model", "cpu_count", "samples_per_s", "worker_cpu_s_per_sample", "host_cpu_util",
                "data_wait_frac", "read_cpu_s_per_sample", "decode_cpu_s_per_sample", "augment_cpu_s_per_sample"]


def rows(cols=COLS, need="worker_cpu_s_per_sample"):
    """The runs with one worker of every pair whose rows carry ``need``: ``cols``, the pair and which
    file (``worker_probe``, ``study``, ``second``)."""
    out = []
    for n, _, _ in find_pairs([H]):
        for which, f in (("worker_probe", "study/worker_probe/rows.csv"), ("study", "study/rows.csv"),
                         ("second", "second/rows.csv")):
            if not os.path.exists(H + n + "/" + f):
                continue
            r = pd.read_csv(H + n + "/" + f)
            r = r[(r.status == "ok") & (r.num_workers == 1)]
            if len(r) and need in r:  # early pairs' rows lack it (and the CPU's name)
                out.append(r.reindex(columns=cols).assign(pair=n, which=which))
    return pd.concat(out, ignore_index=True)


if __name__ == "__main__":
    r = rows()
    r["cpu"] = r.cpu_model.astype("string").str.extract(r"stepping ([0-9/]+)")[0].fillna("?")
    r["period_us"] = 1e6 / r.samples_per_s
    r["worker_us"] = 1e6 * r.worker_cpu_s_per_sample
    r["stamped_us"] = 1e6 * (r.read_cpu_s_per_sample + r.decode_cpu_s_per_sample + r.augment_cpu_s_per_sample)
    r["beyond_us"] = r.worker_us - r.period_us
    r["ratio"] = r.worker_us / r.period_us
    # the main process's CPU per batch as the cost model reads it from a run, per second of the run
    T = r.batch_size / r.samples_per_s
    r["main_cores"] = contention_observed(r, r.batch_size.to_numpy(float), T.to_numpy(float), r.cpu_count.to_numpy(float))[1] / T
    cols = dict(pairs=("pair", "nunique"), period_us=("period_us", "median"), worker_us=("worker_us", "median"),
                stamped_us=("stamped_us", "median"), beyond_us=("beyond_us", "median"), ratio=("ratio", "median"),
                ratio_p10=("ratio", lambda x: x.quantile(0.1)), ratio_p90=("ratio", lambda x: x.quantile(0.9)),
                main_cores=("main_cores", "median"), wait=("data_wait_frac", "median"))
    pd.set_option("display.width", 250)
    wp = r[r.which == "worker_probe"]
    print("worker probe, per CPU"); print(wp.groupby(["cpu", "batch_size", "image_size"]).agg(**cols).round(2).to_string())
    runs = r[(r.which != "worker_probe") & (r.pair.str[4:].astype(int) >= 79)]
    print("runs with one worker, pair79 on"); print(runs.groupby(["which"] + KNOBS).agg(**cols).round(2).to_string())
