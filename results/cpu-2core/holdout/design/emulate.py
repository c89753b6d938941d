"""A study with more CNN runs with workers, emulated from the pairs: each pair's study plus its second
sweep's CNN configurations with workers (three) is cross-validated as one study of 20 (5-fold as
``costmodel cv``, the study's probes, held out as cv holds them), and the model fitted on those 20
predicts the second sweep's other nine. With ``--all`` every configuration of the second sweep is
added (29, the study of ``../merged/run.py``) and there is nothing left to compare. Run it with the
code as it is (version 18) and with the per-cell coupling of ``../forms/coupling-per-cnn-cell.diff``
applied and ``MEMSIM_EXP_CELL=cnn``. From the repository root:

    .venv/bin/python results/cpu-2core/holdout/design/emulate.py OUT.csv 152 173 [--all]
    .venv/bin/python results/cpu-2core/holdout/design/emulate.py --score OUT.csv [OUT2.csv ...]
"""
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor

import pandas as pd

sys.path.insert(0, ".")
H = "results/cpu-2core/holdout/"


def one(name, everything=False):
    warnings.simplefilter("ignore")
    from analysis.costmodel import model as M
    from analysis.costmodel.cli import read_dir
    from analysis.costmodel.evaluate import cross_validate, predicted_vs_measured
    d, s = read_dir(H + name + "/study"), read_dir(H + name + "/second")
    sr = s["rows"]
    add = sr[((sr.model == "cnn") & (sr.num_workers >= 1) | everything) & ~sr.config_id.isin(set(d["rows"].config_id))]
    ids = set(add.config_id)
    rows = pd.concat([d["rows"], add], ignore_index=True)
    steps = pd.concat([d["steps"], s["steps"][s["steps"].config_id.isin(ids)]], ignore_index=True)
    kw = dict(probes=d["probes"], step_probe=d["step_probe"], stage_probe=d["stage_probe"],
              worker_probe=d["worker_probe"])
    cv = cross_validate(rows, steps=steps, **kw).assign(pair=name, check="cv")
    cv["added"] = cv.config_id.astype(str).isin(ids)
    if everything:
        return cv
    model = M.fit(rows, steps=steps, **kw)
    rest = sr[~sr.config_id.isin(ids)]
    cp = predicted_vs_measured(model, rest, M.measured_configs(rest), step="predicted").assign(
        pair=name, check="compare", added=False)
    return pd.concat([cv, cp])


def score(paths):
    from analysis.costmodel.evaluate import summary
    from analysis.costmodel.holdout import meets
    for f in paths:
        t = pd.read_csv(f)
        t["added"] = t.added.astype(bool)
        t["config"] = (t.model + " " + t.precision + " " + t.batch_size.astype(str) + "/" + t.image_size.astype(str)
                       + " x" + t.grad_accum_steps.astype(str) + " " + t.source + " nw" + t.num_workers.astype(str))
        res = []
        for p, g in t.groupby("pair"):
            cv, cp = g[g.check == "cv"], g[g.check == "compare"]
            a, own = summary(cv), summary(cv[~cv.added])
            b = summary(cp) if len(cp) else {"max_abs_rel_error": float("nan")}
            res.append({"pair": p, "cv": meets(a), "cv_study": meets(own), "cmp": len(cp) > 0 and meets(b),
                        "cv_max": a["max_abs_rel_error"], "cv_study_max": own["max_abs_rel_error"],
                        "compare_max": b["max_abs_rel_error"]})
        r = pd.DataFrame(res)
        print(f"{f}: cv meets {int(r.cv.sum())} (on the study's own 17: {int(r.cv_study.sum())}), compare "
              f"{int(r.cmp.sum())}, both {int((r.cv & r.cmp).sum())} of {len(r)}; medians of the max: cv "
              f"{r.cv_max.median():.3f} (the study's 17: {r.cv_study_max.median():.3f}), compare {r.compare_max.median():.3f}")
        cfg = t.groupby(["check", "config"]).rel_error.agg(median="median", past_15=lambda x: int((x.abs() > 0.15).sum()))
        print(cfg[cfg.past_15 >= 3].round(3).to_string())


if __name__ == "__main__":
    if sys.argv[1] == "--score":
        score(sys.argv[2:])
    else:
        names = [f"pair{p}" for p in range(int(sys.argv[2]), int(sys.argv[3]) + 1)]
        with ProcessPoolExecutor(2) as ex:
            frames = ex.map(one, names, [sys.argv[4:] == ["--all"]] * len(names))
            pd.concat(list(frames)).to_csv(sys.argv[1], index=False)
