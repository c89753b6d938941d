"""The holdout README's "What the fill and drain rules changed": the committed pairs split by the
warm-up rule their runs were measured under (before the fill rule: ``pair2``–``pair151``; the fill
rule: ``pair152``–``pair173``; the fill and drain rules: ``pair174`` on). For each pair's study and
second sweep, each run with workers: the workers' CPU per sample beyond the stamped stages, measured
(``worker_cpu_s_per_sample`` less the stamps) against the pair's own version-21 model
(``model.json``: its loader per batch less its stamped stages), medians per configuration and rule.
Then version 21's scores (``intervals/summary.csv``) and held-out errors (``intervals/errors.csv.gz``)
by rule, over the quiet pairs (an exact model meets cross-validation's goal in more than 80% of draws).
From the repository root (about 15 s with two processes):

    .venv/bin/python results/cpu-2core/holdout/eras/run.py > results/cpu-2core/holdout/eras/run.txt
"""
import sys, warnings, os, numpy as np, pandas as pd
sys.path.insert(0, ".")
from concurrent.futures import ProcessPoolExecutor
H = "results/cpu-2core/holdout/"
KEYS = ["model", "precision", "grad_accum_steps", "batch_size", "image_size", "source", "augment_cost",
        "num_workers", "prefetch_buffer_size", "feed"]


def rule(name: str) -> str:
    n = int(name[4:])
    return "3 fill+drain" if n >= 174 else "2 fill" if n >= 152 else "1 before"


def one(name):
    warnings.simplefilter("ignore")
    from analysis.costmodel.model import load, predict
    m = load(H + name + "/model.json")
    out = []
    for part in ("study", "second"):
        f = H + name + "/" + part + "/rows.csv"
        if not os.path.exists(f):
            continue
        r = pd.read_csv(f, low_memory=False)
        r = r[(r.status == "ok") & (r.num_workers >= 1)].copy()
        if not len(r) or "worker_cpu_s_per_sample" not in r:
            continue
        r["stamped"] = r.read_cpu_s_per_sample + r.decode_cpu_s_per_sample + r.augment_cpu_s_per_sample
        r["wait"] = r.data_wait_frac
        g = r.groupby(KEYS, dropna=False)[["worker_cpu_s_per_sample", "stamped", "wait"]].median().reset_index()
        first = r.groupby(KEYS, dropna=False).head(1).set_index(KEYS)
        cfg = first.loc[pd.MultiIndex.from_frame(g[KEYS])].reset_index()
        p = predict(m, cfg, level=None)
        g["rest_measured"] = g.worker_cpu_s_per_sample - g.stamped
        g["rest_model"] = p.loader_s_per_batch.to_numpy() / g.batch_size - p.stage_s_per_sample.to_numpy()
        g["bottleneck"] = p.bottleneck.to_numpy()
        g["pair"], g["part"] = name, part
        out.append(g)
    return pd.concat(out) if out else None


if __name__ == "__main__":
    pd.set_option("display.width", 250); pd.set_option("display.max_rows", 200)
    s = pd.read_csv(H + "intervals/summary.csv")
    s = s[s.pair.str.startswith("pair")].copy()
    s["rule"] = s.pair.map(rule)
    s["quiet"] = s.cv_floor_p_goal > 0.8
    q = s[s.quiet].pair.tolist()
    with ProcessPoolExecutor(2) as ex:
        d = pd.concat([x for x in ex.map(one, q) if x is not None])
    d["rule"] = d.pair.map(rule)
    d["ratio"] = d.rest_measured / d.rest_model
    print("Workers' CPU per sample beyond the stamped stages, measured / version 21's, quiet pairs, medians "
          "per configuration (µs: the measured rest); wait = the fed loop's share waiting for data:")
    t = d.groupby(["part", "model", "precision", "grad_accum_steps", "batch_size", "image_size", "num_workers", "rule"]).agg(
        pairs=("ratio", "size"), ratio=("ratio", "median"), rest_us=("rest_measured", lambda x: 1e6 * x.median()),
        wait=("wait", "median"))
    print(t.round(3).unstack("rule").to_string())
    print()
    print("Version 21 by warm-up rule (intervals/summary.csv): pairs, pairs meeting each check, the exact model's "
          "expected pairs meeting both, medians over pairs of cv's and compare's median / max |error|:")
    a = s.groupby(["rule", "quiet"]).agg(pairs=("pair", "size"), cv=("cv_meets", "sum"), cv_kept=("cvk_meets", "sum"),
                                         compare=("cmp_meets", "sum"), both=("both_meet", "sum"),
                                         exact_both=("floor_p_both", "sum"),
                                         cv_med=("cv_median_abs_rel_error", "median"), cv_max=("cv_max_abs_rel_error", "median"),
                                         cmp_med=("cmp_median_abs_rel_error", "median"), cmp_max=("cmp_max_abs_rel_error", "median"))
    print(a.round(3).to_string())
    print()
    e = pd.read_csv(H + "intervals/errors.csv.gz")
    e = e[e.pair.isin(s[s.quiet & (s.rule == "3 fill+drain")].pair)]
    print(f"Held-out errors on the {e.pair.nunique()} quiet pairs measured with both rules, per configuration "
          "(median signed error, share beyond 10%), worst first:")
    k = ["check", "model", "precision", "grad_accum_steps", "batch_size", "image_size", "source", "augment_cost", "num_workers"]
    g = e.groupby(k).rel_error.agg(n="size", median="median", beyond_10pct=lambda x: (x.abs() > 0.1).mean())
    print(g.sort_values("beyond_10pct", ascending=False).head(12).round(3).to_string())
