"""How often each held-out pair's second sweep fell inside the prediction intervals its study sized.

Reads the per-configuration errors of ``python -m analysis costmodel holdout ... --errors_out
ERRORS.csv`` (every pair's cross-validation and comparison) and, per pair, sizes the interval at
each level from the study's cross-validated errors as ``costmodel fit`` does
(``analysis.costmodel.model.interval_halfwidth``: the ⌈(n + 1)·level⌉-th smallest of the n held-out
``|log(predicted / measured)|``), then counts the second sweep's configurations whose measured
median lies inside ``predicted ×/÷ e^q``. Prints the coverage per level over every pair, per CPU,
for the quiet pairs (an exact model meets cross-validation's goal in more than 80% of its draws,
from ``SUMMARY.csv``, the same command's ``--out``), and the configurations most often outside.

    .venv/bin/python results/cpu-2core/holdout/intervals/coverage.py ERRORS.csv SUMMARY.csv
"""

import math
import sys

import numpy as np
import pandas as pd

from analysis.costmodel.holdout import CONFIG_KEY
from analysis.costmodel.model import interval_halfwidth

LEVELS = (0.5, 0.8, 0.9)


def per_pair(errors: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for pair, g in errors.groupby("pair", sort=False):
        cv = np.abs(np.log1p(g[g.check == "cv"].rel_error.to_numpy(float)))
        cmp = g[g.check == "compare"]
        if len(cv) < 2 or not len(cmp):
            continue
        le = np.abs(np.log1p(cmp.rel_error.to_numpy(float)))
        for level in LEVELS:
            q = interval_halfwidth(cv, level)
            for (_, r), e in zip(cmp.iterrows(), le):
                rows.append({"pair": pair, "level": level, "halfwidth": q, "n_cv": len(cv), "inside": e <= q,
                             **{k: r[k] for k in CONFIG_KEY}})
    return pd.DataFrame(rows)


def main(errors_csv: str, summary_csv: str) -> None:
    errors = pd.read_csv(errors_csv)
    summary = pd.read_csv(summary_csv).set_index("pair")
    d = per_pair(errors)
    d["cpu"] = d.pair.map(summary.cpu_model).fillna("").astype(str).str.replace(r"\(R\)", "", regex=True)
    quiet = set(summary.index[summary.cv_floor_p_goal > 0.8])
    print(f"{d.pair.nunique()} pairs, {len(d) // len(LEVELS)} second-sweep predictions")
    for level in LEVELS:
        x = d[d.level == level]
        k = [math.ceil((n + 1) * level - 1e-9) / (n + 1) for n in x.groupby("pair").n_cv.first()]
        widths = np.exp(x.groupby("pair").halfwidth.first())
        finite = widths[np.isfinite(widths)]
        print(f"level {level:.0%}: inside {x.inside.mean():.1%} of {len(x)} (split-conformal promise for "
              f"exchangeable errors: {np.mean(k):.1%}); pairs' interval x/÷ median {finite.median():.3f} "
              f"(p10 {finite.quantile(0.1):.3f}, p90 {finite.quantile(0.9):.3f})")
        q = x[x.pair.isin(quiet)]
        print(f"  quiet pairs ({q.pair.nunique()}): inside {q.inside.mean():.1%} of {len(q)}; "
              f"the others ({x.pair.nunique() - q.pair.nunique()}): {x[~x.pair.isin(quiet)].inside.mean():.1%}")
        for cpu, g in x.groupby("cpu"):
            print(f"  {cpu or '(not recorded)'}: {g.pair.nunique()} pairs, inside {g.inside.mean():.1%}")
        per_pair_share = x.groupby("pair").inside.mean()
        print(f"  per pair: median {per_pair_share.median():.0%}, pairs with every prediction inside "
              f"{(per_pair_share == 1).sum()}, with half or fewer {(per_pair_share <= 0.5).sum()}")
    x = d[d.level == 0.8]
    by = x.groupby(list(CONFIG_KEY)).inside.agg(["mean", "size"]).sort_values("mean")
    print("configurations of the second sweep least often inside the 80% interval:")
    print(by.head(6).to_string(float_format=lambda v: f"{v:.2f}"))


if __name__ == "__main__":
    main(*sys.argv[1:3])
