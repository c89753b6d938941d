"""Pairs meeting the goal under each form scored in "Version 22" (holdout README) against version 21's
rows (``summary.csv`` at 89c57d78, before version 22 rewrote it). From the repository root:

    .venv/bin/python results/cpu-2core/holdout/forms/v22/score.py results/cpu-2core/holdout/forms/v22/*.csv

``--base COMMIT`` scores against another commit's ``summary.csv`` (version 23's forms against
version 22's: ``--base ef4b5a2b results/cpu-2core/holdout/forms/v23/line_*.csv``).

"Quiet" pairs are those where a model that predicted every configuration exactly would meet
cross-validation's goal in more than half the draws (``cv_floor_p_goal > 0.5``)."""
import io, subprocess, sys
import numpy as np, pandas as pd

args = sys.argv[1:]
commit, label = "89c57d78", "version 21"
if args[:1] == ["--base"]:
    commit, label, args = args[1], f"at {args[1]}", args[2:]
base = pd.read_csv(io.StringIO(subprocess.run(["git", "show", f"{commit}:results/cpu-2core/holdout/summary.csv"],
                                              check=True, capture_output=True, text=True).stdout))
base = base[base.pair.str.match(r"^pair\d+$")].set_index("pair")
for f in args:
    t = pd.read_csv(f)
    t["pair"] = t.pair.astype(str).str.split("/").str[-1]
    t = t.set_index("pair")
    b = base.loc[t.index]
    quiet = (b.cv_floor_p_goal > 0.5).to_numpy()
    for name, x in ((label, b), (f.split("/")[-1], t)):
        for lab, m in (("all", np.ones(len(x), bool)), ("quiet", quiet)):
            y = x[m]
            print(f"{name:14s} {lab:5s} n={len(y):3d} cv {int(y.cv_meets.sum()):3d} cvk {int(y.cvk_meets.sum()):3d} "
                  f"cmp {int(y.cmp_meets.sum()):3d} both {int(y.both_meet.sum()):3d}  "
                  f"cv {y.cv_median_abs_rel_error.median():.3f}/{y.cv_max_abs_rel_error.median():.3f}/{y.cv_kendall_tau.median():.3f}  "
                  f"cmp {y.cmp_median_abs_rel_error.median():.3f}/{y.cmp_max_abs_rel_error.median():.3f}/{y.cmp_kendall_tau.median():.3f}")
    d = t.cv_max_abs_rel_error.to_numpy() - b.cv_max_abs_rel_error.to_numpy()
    e = t.cmp_max_abs_rel_error.to_numpy() - b.cmp_max_abs_rel_error.to_numpy()
    print(f"  largest error lower / higher by over half a point: cv {np.sum(d < -0.005)} / {np.sum(d > 0.005)}, "
          f"compare {np.sum(e < -0.005)} / {np.sum(e > 0.005)}")
