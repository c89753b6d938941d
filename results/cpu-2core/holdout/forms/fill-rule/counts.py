"""Counts of pairs meeting the goal per model form, from the tables `costmodel holdout --out` wrote for
each form (this folder's CSVs; see the holdout README's section on `pair188`–`pair192`). From the
repository root:

    .venv/bin/python results/cpu-2core/holdout/forms/fill-rule/counts.py
"""
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).parent
SPANS = ((152, 168), (169, 187), (152, 187), (2, 151), (188, 192))


def main() -> int:
    rows = []
    for f in sorted(HERE.glob("*.csv")):
        t = pd.read_csv(f)
        t["n"] = t.pair.str[4:].astype(int)
        for lo, hi in SPANS:
            s = t[(t.n >= lo) & (t.n <= hi)]
            if not len(s):
                continue
            # each check's verdict as `costmodel holdout` wrote it (analysis.costmodel.holdout.meets)
            cv, ck, cm = (s[c + "_meets"].astype(bool) for c in ("cv", "cvk", "cmp"))
            rows.append({"form": f.stem, "pairs": f"{lo}-{hi}", "n": len(s), "cv": int(cv.sum()),
                         "cv_kept": int(ck.sum()), "compare": int(cm.sum()), "both": int((cv & cm).sum()),
                         "both_kept": int((ck & cm).sum()),
                         "cv_med": round(100 * s.cv_median_abs_rel_error.median(), 1),
                         "cv_max": round(100 * s.cv_max_abs_rel_error.median(), 1),
                         "cmp_med": round(100 * s.cmp_median_abs_rel_error.median(), 1),
                         "cmp_max": round(100 * s.cmp_max_abs_rel_error.median(), 1)})
    print(pd.DataFrame(rows).sort_values(["pairs", "form"]).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
