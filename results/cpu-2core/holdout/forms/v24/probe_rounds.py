"""The step probe's rounds against the runs' own step, at the shapes both measured.

For every pair whose step probe has three rounds (``pair52`` on), each shape's step estimated from
the rounds in several ways, over the runs' device-resident step of the same shape (the study's
runs and the second sweep's), as log ratios; medians per CPU (``bias``), the median |log ratio|
(``mad``) and its 90th percentile (``p90``). Estimators: ``all`` the median of the three rounds
(what calibration takes, ``analysis.costmodel.model._step_probe_rows``); ``later`` the mean of the two later rounds (warmed up in two steps); ``r0`` the first round
alone (compiled, then warmed up until steady, as a run is); ``minr0med`` the first round unless it
is slower than the median; ``min`` the fastest round; ``corr`` the median after dividing the later
rounds by the study's median later / first ratio; ``mean01`` the geometric mean. It extends
``forms/v22/probe_vs_runs.py`` (the median of the rounds only, ``pair174``–``pair222``) to every
round and every pair with three. From the repository root:

    .venv/bin/python results/cpu-2core/holdout/forms/v24/probe_rounds.py > results/cpu-2core/holdout/forms/v24/probe_rounds.txt
"""
import glob, os
import numpy as np, pandas as pd

K = ["model", "precision", "grad_accum_steps", "batch_size", "image_size"]
out = []
for d in sorted(glob.glob("results/cpu-2core/holdout/pair*")):
    p = os.path.join(d, "study/step_probe/rows.csv")
    if not os.path.exists(p):
        continue
    r = pd.read_csv(p)
    r = r[r.status == "ok"]
    if r.repeat.nunique() < 3:
        continue
    w = r.pivot_table(index=K, columns="repeat", values="device_resident_step_median_s")
    c = np.exp(np.median(np.log(w[[1, 2]].div(w[0], axis=0)).values))
    est = pd.DataFrame({"all": w.median(axis=1), "r0": w[0], "later": w[[1, 2]].median(axis=1), "minr0med": np.minimum(w[0], w.median(axis=1)),
                        "min": w.min(axis=1), "corr": pd.concat([w[0], w[1] / c, w[2] / c], axis=1).median(axis=1),
                        "mean01": np.exp(np.log(w).mean(axis=1))})
    for sub in ("study", "second"):
        q = os.path.join(d, sub, "rows.csv")
        if not os.path.exists(q):
            continue
        s = pd.read_csv(q)
        s = s[s.status == "ok"]
        run = s.groupby(K).device_resident_step_median_s.median().rename("run")
        j = est.join(run, how="inner")
        for col in est:
            j["q_" + col] = np.log(j[col] / j.run)
        j["pair"], j["sub"], j["cpu"] = os.path.basename(d), sub, str(s.cpu_model.iloc[0])[:5]
        out.append(j.reset_index())
J = pd.concat(out)
qs = [c for c in J if c.startswith("q_")]
print(f"{J.pair.nunique()} pairs, {len(J)} shape × sweep medians")
for grp in (["cpu"], ["cpu", "sub"]):
    g = J.groupby(grp)
    print(pd.concat({"bias": g[qs].median(), "mad": g[qs].agg(lambda x: np.median(np.abs(x))),
                     "p90": g[qs].agg(lambda x: np.quantile(np.abs(x), 0.9))}, axis=1).round(3).to_string())
