"""The holdout README's "Version 18" table: for each pair's study and second sweep, each configuration's
stamped stages (the median over its runs of read + decode + augment CPU per sample) less the stage
probe's median for the same (source, image size, augmentation), then medians over the pairs named.
From the repository root (``offsets.csv`` holds every pair's rows):

    .venv/bin/python results/cpu-2core/holdout/stage-offset/run.py 79 140
    .venv/bin/python results/cpu-2core/holdout/stage-offset/run.py 2 78
"""
import os, sys, numpy as np, pandas as pd
sys.path.insert(0, ".")
from analysis.costmodel.holdout import find_pairs
from analysis.costmodel.model import _cpu_stamped
H = "results/cpu-2core/holdout/"
KEY = ["source", "image_size", "augment_cost"]


def alone_of(n):
    """Pair ``n``'s stage probe: the median stamped stages per (source, image size, augmentation),
    column ``alone``; None where the study has no stage probe (``worker-stamps/run.py`` reads it too)."""
    path = H + n + "/study/stage_probe/rows.csv"
    if not os.path.exists(path):
        return None
    sp = pd.read_csv(path)
    sp = sp[sp.status == "ok"].assign(st=lambda f: _cpu_stamped(f))
    return sp.groupby(KEY).st.median().rename("alone").reset_index()


def rows():
    out = []
    for n, _, _ in find_pairs([H]):
        alone = alone_of(n)
        if alone is None:
            continue
        for part in ("study", "second"):
            r = pd.read_csv(H + n + "/" + part + "/rows.csv").assign(st=lambda f: _cpu_stamped(f))
            g = r.groupby(["config_id", "model", "batch_size"] + KEY + ["num_workers"]).st.median().reset_index()
            out.append(g.merge(alone, on=KEY).assign(pair=n, part=part))
    return pd.concat(out, ignore_index=True)


if __name__ == "__main__":
    lo, hi = (int(a) for a in sys.argv[1:3])
    r = rows()
    r.to_csv(H + "stage-offset/offsets.csv", index=False)
    r = r[r.pair.str[4:].astype(int).between(lo, hi)]
    r["workers"] = np.where(r.num_workers > 0, "w", "none")
    g = r.groupby(KEY + ["workers", "part", "model", "batch_size"]).agg(
        n=("pair", "size"), alone_us=("alone", lambda x: 1e6 * x.median()), stamped_us=("st", lambda x: 1e6 * x.median()),
        ratio=("st", "size"))
    g["ratio"] = (r.st / r.alone).groupby([r[k] for k in KEY + ["workers", "part", "model", "batch_size"]]).median()
    g["added_us"] = (1e6 * (r.st - r.alone)).groupby([r[k] for k in KEY + ["workers", "part", "model", "batch_size"]]).median()
    print(g.round(3).to_string())
