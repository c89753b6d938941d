"""The holdout README's "Self-consistency" table: for each pair's study, version 17 fitted on all its
rows, then ``cross_validate`` of ``self_consistent_rows`` (what ``costmodel cv --self_check`` runs),
with the probes held out and kept. From the repository root:

    .venv/bin/python results/cpu-2core/holdout/self_check/run.py 52 130
"""
import sys, numpy as np, pandas as pd, warnings
sys.path.insert(0, ".")
from concurrent.futures import ProcessPoolExecutor
H = "results/cpu-2core/holdout/"
def one(name):
    warnings.simplefilter("ignore")
    from analysis.costmodel.cli import read_dir
    from analysis.costmodel.model import fit
    from analysis.costmodel.evaluate import cross_validate, self_consistent_rows, summary
    study = H + name + "/study"; d = read_dir(study)
    model = fit(d["rows"], d["probes"], d["steps"], d["step_probe"], sources=[study], stage_probe=d["stage_probe"], worker_probe=d["worker_probe"])
    syn = self_consistent_rows(model, d["rows"])
    out = {"pair": name, "cpu": model.environment.get("cpu_model", "")}
    for tag, hold in (("held", True), ("kept", False)):
        cmp = cross_validate(syn, probes=d["probes"], steps=d["steps"], step_probe=d["step_probe"], stage_probe=d["stage_probe"], worker_probe=d["worker_probe"], hold_out_probes=hold)
        s = summary(cmp)
        out.update({f"{tag}_med": s["median_abs_rel_error"], f"{tag}_max": s["max_abs_rel_error"], f"{tag}_tau": s["kendall_tau"]})
        i = cmp.rel_error.abs().idxmax(); r = cmp.loc[i]
        out[f"{tag}_worst"] = f"{r.model} {r.precision} {r.batch_size}/{r.image_size} x{r.grad_accum_steps} w{r.num_workers} {r.rel_error:+.1%}"
    return out
if __name__ == "__main__":
    names = [f"pair{i}" for i in range(int(sys.argv[1]), int(sys.argv[2]) + 1)]
    with ProcessPoolExecutor(2) as ex:
        t = pd.DataFrame(list(ex.map(one, names)))
    t.to_csv("results/cpu-2core/holdout/self_check/version17.csv", index=False)
    meets = lambda p: (t[p+"_med"] <= .05) & (t[p+"_max"] <= .15) & (t[p+"_tau"] >= .8)
    t["held_meets"], t["kept_meets"] = meets("held"), meets("kept")
    t["cpu"] = t.cpu.str.replace(r"\(R\)|Processor |family/model/stepping ", "", regex=True)
    g = t.groupby("cpu")
    print(pd.DataFrame({"pairs": g.size(), "held med": g.held_med.median(), "held max": g.held_max.median(), "held meets": g.held_meets.sum(),
                        "kept med": g.kept_med.median(), "kept max": g.kept_max.median(), "kept meets": g.kept_meets.sum()}).round(3).to_string())
    print("all", len(t), "held meets", t.held_meets.sum(), "kept meets", t.kept_meets.sum(), "held max median", t.held_max.median().round(3))
    print(t.held_worst.str.rsplit(" ", n=1).str[0].value_counts().head(8).to_string())
    print(t.kept_worst.str.rsplit(" ", n=1).str[0].value_counts().head(8).to_string())
