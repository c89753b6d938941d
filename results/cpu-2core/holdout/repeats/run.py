"""The holdout README's "Four repeats" table: version 17 cross-validated on subsets of one quick study
run with four interleaved repeats (``study/``), with the probes held out and kept, and each subset's
noise floor. A subset keeps, per configuration, some of its repeats: two (``r01``, ``r23``), three
(``r012``), all four, or two plus a third only where the two differ by more than 10% in samples/s
(``adapt01``: repeats 0 and 1, then 2 where they disagree). From the repository root:

    .venv/bin/python results/cpu-2core/holdout/repeats/run.py
"""
import sys, warnings, pandas as pd
sys.path.insert(0, ".")
H = "results/cpu-2core/holdout/repeats/"
SPREAD = 0.10  # the adaptive subsets' threshold: max/min - 1 of the two repeats' samples/s


def subsets(rows):
    ok = rows[rows.status == "ok"]
    ids = sorted(ok.config_id.unique())
    def spread(a, b):
        g = ok[ok.repeat.isin([a, b])].groupby("config_id").samples_per_s
        return g.max() / g.min() - 1
    out = {name: {c: reps for c in ids} for name, reps in
           (("r01", [0, 1]), ("r23", [2, 3]), ("r012", [0, 1, 2]), ("r0123", [0, 1, 2, 3]))}
    for a, b, c in ((0, 1, 2), (1, 2, 3)):
        s = spread(a, b)
        out[f"adapt{a}{b}"] = {i: [a, b, c] if s[i] > SPREAD else [a, b] for i in ids}
    return out


def main():
    warnings.simplefilter("ignore")
    from analysis.costmodel.cli import read_dir
    from analysis.costmodel.evaluate import cross_validate, noise_floor, summary
    d = read_dir(H + "study")
    recs = []
    for name, keep in subsets(d["rows"]).items():
        sel = lambda f: f[[int(r) in keep.get(str(c), ()) for c, r in zip(f.config_id.astype(str), f.repeat)]]
        rows, steps = sel(d["rows"]), sel(d["steps"])
        rec = {"subset": name, "runs": len(rows)}
        for tag, hold in (("cv", True), ("cv_kept", False)):
            cmp = cross_validate(rows, probes=d["probes"], steps=steps, step_probe=d["step_probe"],
                                 stage_probe=d["stage_probe"], worker_probe=d["worker_probe"], hold_out_probes=hold)
            s = summary(cmp)
            f = noise_floor(rows, cmp.config_id, observed=s)
            rec.update({f"{tag}_median": s["median_abs_rel_error"], f"{tag}_max": s["max_abs_rel_error"],
                        f"{tag}_tau": s["kendall_tau"], f"{tag}_signed_median": float(cmp.rel_error.median()),
                        f"{tag}_floor_median": f["median_abs_rel_error"], f"{tag}_floor_max": f["max_abs_rel_error"],
                        f"{tag}_floor_p_goal": f["p_goal"], f"{tag}_p_max": f["p_max"]})
            i = cmp.rel_error.abs().idxmax(); r = cmp.loc[i]
            rec[f"{tag}_worst"] = (f"{r.model} {r.precision} {r.batch_size}/{r.image_size} x{r.grad_accum_steps} "
                                   f"w{r.num_workers} {r.rel_error:+.1%}")
        rec["noise_sd"] = f["noise_sd"]
        recs.append(rec)
        print(name, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in rec.items()}, flush=True)
    pd.DataFrame(recs).to_csv(H + "repeats.csv", index=False)


if __name__ == "__main__":
    main()
