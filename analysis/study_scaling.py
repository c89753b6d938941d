"""The study's "Scaling" section: a Chinchilla fit of the study's quick scaling run.

The rows come from ``experiments.scaling`` (the Transformer family on stdlib text at several token
budgets); the fit uses ``params`` as N, ``tokens`` as D and ``val_loss`` as the loss, with a small
bootstrap so the report stays quick. A table that cannot be fitted (failed points, too few rows)
gives a section that says why instead of a fit.
"""

from __future__ import annotations

import pandas as pd

from analysis.fit_input import FitInputError
from analysis.report import md_table
from analysis.scaling_section import scaling_section

#: Bootstrap resamples of the section's fit (tests set 0 to skip the intervals). Fewer than the
#: section's default: on the 2-core CPU the fit of the quick run's 15 rows takes 6.6 s without a
#: bootstrap and about 0.4 s per resample (100 resamples: 54 s of a demo that must stay under 8 minutes).
BOOTSTRAP = 40

_COLUMNS = ["width", "depth", "params", "tokens", "flops_6nd", "flops_xla", "train_loss", "val_loss", "wall_s"]


def rows_table(rows: pd.DataFrame) -> str:
    """The scaling run's rows (ok points) as Markdown, smallest model and budget first."""
    ok = rows[rows.status == "ok"] if "status" in rows else rows
    t = ok[[c for c in _COLUMNS if c in ok]].sort_values(["params", "tokens"])
    fmt = {c: (lambda v: f"{v:,.0f}") for c in ("params", "tokens")}
    fmt.update({c: (lambda v: f"{v:.3g}") for c in ("flops_6nd", "flops_xla")})
    fmt.update({c: (lambda v: f"{v:.4f}") for c in ("train_loss", "val_loss")})
    fmt["wall_s"] = lambda v: f"{v:.1f}"
    return md_table(t.assign(**{c: t[c].map(f) for c, f in fmt.items() if c in t}))


def section(ctx) -> str:
    if getattr(ctx, "errors", {}).get("scaling"):
        raise RuntimeError(f"the scaling run failed: {ctx.errors['scaling']}")
    rows = getattr(ctx, "scaling_rows", None)
    if rows is None:
        return ("## Scaling\n\nNo scaling run in this study (scaling_preset=none). "
                "Run `python -m experiments scaling --preset quick` and fit it with "
                "`python -m analysis scaling results/scaling/<run_id>/rows.csv`.\n")
    failed = rows[rows.status != "ok"] if "status" in rows else rows.iloc[:0]
    ok = rows[rows.status == "ok"] if "status" in rows else rows
    head = (f"Scaling run: {len(rows)} points ({len(failed)} failed), the Transformer family on the standard "
            f"library's text, rows in `scaling/rows.csv`. Loss is next-byte cross-entropy in nats on held-out "
            "files; FLOPs as 6·N·D and as XLA's cost analysis of the compiled step × steps.\n\n"
            + rows_table(rows) + "\n")
    if len(failed):
        head += "\nFailed points: " + "; ".join(f"width {r.width} × {r.token_budget:,} tokens: `{r.error}`"
                                             for r in failed.itertuples()) + "\n"
    try:
        fit_md = scaling_section(ok, ctx.out_dir, "params", "tokens", "val_loss", bootstrap=BOOTSTRAP)
    except FitInputError as e:
        return f"## Scaling\n\n{head}\nNo fit: {e}\n"
    first, _, rest = fit_md.partition("\n")
    return f"{first}\n\n{head}\n{rest.lstrip()}"
