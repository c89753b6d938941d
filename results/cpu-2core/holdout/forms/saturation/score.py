import sys, pandas as pd, numpy as np
base = pd.read_csv("results/cpu-2core/holdout/intervals/summary.csv")
base["pair"] = base.pair.astype(str).str.split("/").str[-1]
for f in sys.argv[1:]:
    t = pd.read_csv(f); t["pair"] = t.pair.astype(str).str.split("/").str[-1]; t = t[t.pair.isin(base.pair)]
    b = base[base.pair.isin(t.pair)].set_index("pair").loc[t.pair]
    t = t.set_index("pair")
    quiet = b.cv_floor_p_goal > 0.8
    for name, x in (("base", b), (f.split("/")[-1], t)):
        for lab, m in (("all", slice(None)), ("quiet", quiet.values)):
            y = x[m] if lab == "quiet" else x
            print(f"{name:24s} {lab:5s} n={len(y):3d} cv {int(y.cv_meets.sum()):3d} cvk {int(y.cvk_meets.sum()):3d} cmp {int(y.cmp_meets.sum()):3d} both {int(y.both_meet.sum()):3d}  "
                  f"cv {y.cv_median_abs_rel_error.median():.3f}/{y.cv_max_abs_rel_error.median():.3f}/{y.cv_kendall_tau.median():.3f}  "
                  f"cmp {y.cmp_median_abs_rel_error.median():.3f}/{y.cmp_max_abs_rel_error.median():.3f}/{y.cmp_kendall_tau.median():.3f}")
    d = t.cv_max_abs_rel_error.values - b.cv_max_abs_rel_error.values
    e = t.cmp_median_abs_rel_error.values - b.cmp_median_abs_rel_error.values
    print(f"  cv max better/worse {np.sum(d < -0.005)}/{np.sum(d > 0.005)}; cmp median better/worse {np.sum(e < -0.005)}/{np.sum(e > 0.005)}")
