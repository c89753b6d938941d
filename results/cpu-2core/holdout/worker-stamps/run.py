"""The holdout README's "Two ways to move the stages' offset" table: in each pair's worker probe (one
loader worker, RAM, no augmentation passes, a step too small to wait for) the stamped stages of each
shape (the median over its repeats of read + decode + augment CPU per sample, as
``analysis.costmodel.model._worker_probe_rows`` takes them) less the stage probe's median for the same
(source, image size, augmentation), then medians per CPU over the pairs. From the repository root
(``stamps.csv`` holds every pair's shapes):

    .venv/bin/python results/cpu-2core/holdout/worker-stamps/run.py
"""
import importlib.util, os, sys, pandas as pd
sys.path.insert(0, ".")
from analysis.costmodel.holdout import find_pairs
from analysis.costmodel.model import _worker_probe_rows
H = "results/cpu-2core/holdout/"
# the stage probe's medians per pair, as the "Version 18" table takes them (a folder name with a dash
# is not importable by name)
_spec = importlib.util.spec_from_file_location("stage_offset", H + "stage-offset/run.py")
stage_offset = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stage_offset)
KEY = stage_offset.KEY


def rows():
    out = []
    for n, _, _ in find_pairs([H]):
        d = H + n + "/study/"
        alone = stage_offset.alone_of(n) if os.path.exists(d + "worker_probe/rows.csv") else None
        if alone is None:
            continue
        wp = _worker_probe_rows(pd.read_csv(d + "worker_probe/rows.csv"))
        if wp is None:
            continue
        w = wp[KEY + ["batch_size", "cpu_model", "cpu_stamped_s_per_sample"]].rename(columns={"cpu_stamped_s_per_sample": "st"})
        out.append(w.merge(alone, on=KEY).assign(pair=n))
    return pd.concat(out, ignore_index=True)


if __name__ == "__main__":
    r = rows()
    r.to_csv(H + "worker-stamps/stamps.csv", index=False)
    r["cpu"] = r.cpu_model.str.extract(r"stepping ([0-9/]+)")[0].fillna("?")
    r["added_us"] = 1e6 * (r.st - r.alone)
    g = r.groupby(["cpu", "image_size", "batch_size"]).agg(pairs=("pair", "nunique"), alone_us=("alone", lambda x: 1e6 * x.median()),
                                                            stamped_us=("st", lambda x: 1e6 * x.median()), added_us=("added_us", "median"))
    print(g.round(1).to_string())
    # the same pair's shape at batch 32 less at batch 128, and the per-batch cost that difference implies
    p = r.pivot_table(index=["pair", "cpu", "image_size"], columns="batch_size", values="added_us").dropna()
    p["d32_128"] = p[32] - p[128]
    p["per_batch_us"] = p.d32_128 / (1 / 32 - 1 / 128)
    q = p.groupby(["cpu", "image_size"]).agg(pairs=("d32_128", "size"), d32_128_us=("d32_128", "median"),
                                            above_0=("d32_128", lambda x: (x > 0).mean()), per_batch_us=("per_batch_us", "median"))
    print(q.round(2).to_string())
