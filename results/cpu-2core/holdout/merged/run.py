"""The holdout README's "A bigger study, emulated": each pair's study and second sweep cross-validated
as one study of 29 configurations (the study's probes; a configuration both ran keeps the study's
runs), 5-fold as ``costmodel cv`` does, the probes held out. Scored on all 29 held-out
configurations and on the study's own 17, against the pair's ``cv`` (``summary.csv``). From the
repository root:

    .venv/bin/python results/cpu-2core/holdout/merged/run.py          # cross-validate, then score
    .venv/bin/python results/cpu-2core/holdout/merged/run.py --score  # score merged.csv again
"""
import sys, warnings, pandas as pd
sys.path.insert(0, ".")
from concurrent.futures import ProcessPoolExecutor
H = "results/cpu-2core/holdout/"
OUT = H + "merged/merged.csv"


def one(name):
    warnings.simplefilter("ignore")
    from analysis.costmodel.cli import read_dir
    from analysis.costmodel.evaluate import cross_validate, summary
    d, s = read_dir(H + name + "/study"), read_dir(H + name + "/second")
    both = set(d["rows"].config_id) & set(s["rows"].config_id)
    rows = pd.concat([d["rows"], s["rows"][~s["rows"].config_id.isin(both)]], ignore_index=True)
    steps = None
    if d["steps"] is not None and s["steps"] is not None:
        steps = pd.concat([d["steps"], s["steps"][~s["steps"].config_id.isin(both)]], ignore_index=True)
    cmp = cross_validate(rows, probes=d["probes"], steps=steps, step_probe=d["step_probe"],
                         stage_probe=d["stage_probe"], worker_probe=d["worker_probe"])
    own = cmp[cmp.config_id.astype(str).isin(set(d["rows"].config_id.astype(str)))]
    out = {"pair": name, "shared": len(both)}
    for k, c in (("all", cmp), ("study", own)):
        m = summary(c)
        out.update({f"{k}_median": m["median_abs_rel_error"], f"{k}_max": m["max_abs_rel_error"],
                    f"{k}_tau": m["kendall_tau"], f"{k}_n": m["n"]})
    return out


def measure():
    from analysis.costmodel.holdout import find_pairs
    names = [n for n, _, _ in find_pairs([H])]
    with ProcessPoolExecutor(2) as ex:
        t = pd.DataFrame(list(ex.map(one, names)))
    t.to_csv(OUT, index=False)


def score():
    from analysis.costmodel.holdout import meets
    s = pd.read_csv(H + "summary.csv"); t = pd.read_csv(OUT)
    s["cpu"] = s.cpu_model.str.extract(r"stepping (\S+)\)")[0].fillna("n/a")
    r = t.merge(s[["pair", "cpu", "cv_median_abs_rel_error", "cv_max_abs_rel_error", "cv_kendall_tau", "cv_meets",
                   "cmp_meets"]], on="pair")
    for k in ("all", "study"):
        r[f"{k}_meets"] = [meets({"median_abs_rel_error": a, "max_abs_rel_error": b, "kendall_tau": c})
                           for a, b, c in zip(r[f"{k}_median"], r[f"{k}_max"], r[f"{k}_tau"])]
    g = r.groupby("cpu").agg(n=("pair", "size"), cv_med=("cv_median_abs_rel_error", "median"),
                             cv_max=("cv_max_abs_rel_error", "median"), cv_meets=("cv_meets", "sum"),
                             all_med=("all_median", "median"), all_max=("all_max", "median"), all_meets=("all_meets", "sum"),
                             study_med=("study_median", "median"), study_max=("study_max", "median"),
                             study_meets=("study_meets", "sum"))
    print(g.round(3).to_string())
    print("all pairs:", len(r), "cv meets", int(r.cv_meets.sum()), "| merged, all 29:", int(r.all_meets.sum()),
          "| merged, the study's 17:", int(r.study_meets.sum()),
          "| study's 17 max lower than cv's:", int((r.study_max < r.cv_max_abs_rel_error).sum()),
          "higher:", int((r.study_max > r.cv_max_abs_rel_error).sum()))


if __name__ == "__main__":
    if "--score" not in sys.argv:
        measure()
    score()
