"""The "## Scaling" section of a study report: a Chinchilla fit of a rows table, in Markdown.

:func:`section` is the report's entry (``analysis.report.build_report``): it reads the study's
scaling run (``StudyResults.scaling_rows``, i.e. ``scaling/rows.csv``; rows from
``experiments.scaling``, the Transformer family on stdlib text at several token budgets), lists
the points and fits them with ``params`` as N, ``tokens`` as D and ``val_loss`` as the loss, with
a small bootstrap (``BOOTSTRAP`` resamples from ``SECTION_BOOTSTRAP_GRID``) so the report stays
quick. A table that cannot be fitted (failed points, too few rows) gives a section that says why
instead of a fit.

:func:`scaling_section` fits L(N, D) = E + A/N^α + B/D^β to the rows (Hoffmann et al. 2022,
Approach 3, via ``analysis.scaling``), writes the three figures of ``analysis.scaling.plots``
into ``out_dir`` and returns Markdown with the parameter table, fit statistics, the
compute-optimal allocation and links to the figures by file name. It is meant for the small
tables of a quick scaling run (10-20 rows): it uses a smaller bootstrap than the CLI by default
(``SECTION_BOOTSTRAP`` resamples) and says so, and it warns when the rows are few for five
parameters.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pandas as pd

from analysis.scaling import fit as scaling, plots as scaling_plots, search as ss
from analysis.scaling.fit_input import FitInputError
from analysis.tables import md_table

#: Bootstrap resamples used by the section (the CLI and ``fit_chinchilla`` default to 1,000).
SECTION_BOOTSTRAP = 100

#: Starts of each bootstrap resample in the section: every other value of each coordinate of the
#: paper's grid (3⁵ = 243 of 4,500 starts; the fit itself still starts from all 4,500). Measured on the
#: quick scaling run's 15 rows (2-core Xeon, 40 resamples): 4.2 s instead of 12.1 s, the same stderr
#: and interval ends to 5 digits but for the ends no bounded interval has (E's lower end, 7e-37 against
#: 3e-64; B's upper, 5e215 against 5e205; β's stderr 7.9 against 7.5 and upper end 3.36 against 3.30);
#: on 12 of those rows 1.2 s instead of 10.1 s, the same but for E's lower end. The command line keeps the
#: full grid.
SECTION_BOOTSTRAP_GRID = {k: v[::2] for k, v in ss.CHINCHILLA_GRID.items()}
_FEW_ROWS_PER_PARAM = 4


def _interval(lo: float, hi: float, fmt: str = ".4g") -> str:
    return "–" if not (np.isfinite(lo) and np.isfinite(hi)) else f"[{lo:{fmt}}, {hi:{fmt}}]"


def scaling_section(
    rows: pd.DataFrame,
    out_dir: pathlib.Path,
    n: str = "params",
    d: str = "tokens",
    loss: str = "val_loss",
    *,
    bootstrap: int = SECTION_BOOTSTRAP,
    seed: int = 0,
    drop_highest_loss: int = 0,
    bootstrap_grid: dict | None = SECTION_BOOTSTRAP_GRID,
) -> str:
    """Fit the rows and return a Markdown "## Scaling" section; figures go to ``out_dir``.

    Args:
        rows: one row per trained model (e.g. the rows CSV of a scaling run, read by pandas).
        out_dir: folder for the figures (created if missing); the Markdown links them by file
            name, so write the report into the same folder.
        n: column of the parameter count N.
        d: column of the training tokens D.
        loss: column of the loss.
        bootstrap: resamples for the intervals (default 100, for speed; 0: none).
        bootstrap_grid: starts of each resample (default ``SECTION_BOOTSTRAP_GRID``, for speed;
            None: the fit's 4,500).
        seed: seed of the bootstrap.
        drop_highest_loss: drop this many highest-loss rows first (reported).

    Returns:
        The section, starting with ``## Scaling``.

    Raises:
        analysis.scaling.fit_input.FitInputError: the rows cannot be fitted (the message names the
            column and rows).

    Example:
        >>> import tempfile
        >>> N, D = (a.ravel() for a in np.meshgrid([1e6, 3e6, 1e7, 3e7, 1e8], [2e7, 1e8, 5e8]))
        >>> rows = pd.DataFrame({"params": N, "tokens": D, "val_loss": 1.69 + 406.4 / N**0.34 + 410.7 / D**0.28})
        >>> md = scaling_section(rows, pathlib.Path(tempfile.mkdtemp()), bootstrap=0)
        >>> md.splitlines()[0], "scaling_frontier.png" in md
        ('## Scaling', True)
    """
    out_dir = pathlib.Path(out_dir)
    fit = scaling.fit_chinchilla(rows, n=n, d=d, loss=loss, bootstrap=0, seed=seed,
                                 drop_highest_loss=drop_highest_loss)
    if bootstrap:
        fit = scaling.bootstrap(fit, n_resamples=bootstrap, seed=seed, ci=fit.options["ci"], grid=bootstrap_grid)
    st = fit.stats.iloc[0]
    lines = [
        "## Scaling",
        "",
        f"Fit of `{fit.formula}` to {int(st['n'])} runs (N = `{n}`, D = `{d}`, loss = `{loss}`) by "
        "Hoffmann et al. (2022) Approach 3: log-loss predicted as LSE(a − α·log N, b − β·log D, e), "
        f"sum of Huber losses (δ = {st['huber_delta']:g}), L-BFGS from all {int(st['n_starts'])} grid starts; "
        f"{int(st['n_at_best'])} of them reached the best fit. Outliers: {fit.outlier_note()}.",
        "",
    ]
    if int(st["n"]) < _FEW_ROWS_PER_PARAM * int(st["n_params"]):
        lines += [
            f"> **Few rows:** {int(st['n'])} rows for {int(st['n_params'])} parameters. The law passes close "
            "to the points, but E, A and B trade off against the exponents: read the intervals, not the "
            "point values, and do not extrapolate far.",
            "",
        ]
    table = pd.DataFrame(
        {
            "param": fit.params["param"],
            "value": [f"{v:.4g}" for v in fit.params["value"]],
            "stderr": ["–" if np.isnan(v) else f"{v:.3g}" for v in fit.params["stderr"]],
            f"{fit.options['ci']:.0%} interval": [
                _interval(lo, hi) for lo, hi in zip(fit.params["ci_low"], fit.params["ci_high"])
            ],
        }
    )
    lines += [md_table(table), ""]
    lines += [
        f"Fit statistics: RMSE of log-loss {st['rmse_log']:.4g}, R² of log-loss {st['r2_log']:.4f}, "
        f"objective {st['objective']:.4g}.",
        "",
    ]
    if int(st["n_bootstrap"]):
        lines += [
            f"Uncertainty: {int(st['n_bootstrap'])} bootstrap resamples of the rows (seed {seed}), each refitted "
            f"from {fit.bootstrap_starts_note()} — fewer than the command line's 1,000 from all, to keep the "
            f"report quick; `python -m analysis scaling ROWS.csv --bootstrap 1000` gives the full intervals"
            f"{fit.diverged_note()}.",
            "",
        ]
    else:
        lines += ["Uncertainty: not computed (bootstrap=0).", ""]

    lines += ["### Compute-optimal allocation (C ≈ 6·N·D)", ""]
    c_runs = 6.0 * fit.data[n].to_numpy(float) * fit.data[d].to_numpy(float)
    budgets = np.unique(np.r_[10.0 ** np.round(np.log10([c_runs.min(), np.sqrt(c_runs.min() * c_runs.max()), c_runs.max()]), 1),
                              10.0 ** np.round(np.log10(c_runs.max()) + 2)])
    try:
        opt = scaling.compute_optimal(fit, budgets)
    except ValueError as exc:
        lines += [f"Not available: {exc}", ""]
        opt = None
    if opt is not None:
        ex = opt.exponents.set_index("param")
        a, b = ex.loc["a"], ex.loc["b"]
        lines += [
            f"N_opt ∝ C^a with a = β/(α+β) = {a['value']:.3f} {_interval(a['ci_low'], a['ci_high'], '.3f')}; "
            f"D_opt ∝ C^b with b = α/(α+β) = {b['value']:.3f} {_interval(b['ci_low'], b['ci_high'], '.3f')} "
            "(Chinchilla reported a ≈ b ≈ 0.5).",
            "",
        ]
        fr = opt.frontier
        has_ci = "n_opt_low" in fr
        tab = pd.DataFrame(
            {
                "C (FLOPs)": [f"{v:.2g}" for v in fr["flops"]],
                "N_opt": [f"{v:.3g}" for v in fr["n_opt"]],
                "D_opt": [f"{v:.3g}" for v in fr["d_opt"]],
                "tokens/param": [f"{v:.3g}" for v in fr["tokens_per_param"]],
                "loss": [f"{v:.4g}" for v in fr["loss_opt"]],
            }
        )
        if has_ci:
            tab["N_opt interval"] = [_interval(lo, hi, ".3g") for lo, hi in zip(fr["n_opt_low"], fr["n_opt_high"])]
        lines += [
            md_table(tab),
            "",
            "The first three budgets span the runs; the last extrapolates 100× beyond the largest.",
            "",
        ]
    figs = (
        scaling_plots.write_figures(fit, out_dir)
        if opt is not None
        else {"loss_vs_n": scaling_plots.save(scaling_plots.loss_vs_n_figure(fit),
                                          out_dir / scaling_plots.FIGURES["loss_vs_n"])}
    )
    captions = {
        "loss_vs_n": "Loss against N per D, fitted law",
        "isoflop": "IsoFLOP curves of the fitted law",
        "frontier": "Compute-optimal frontier with its bootstrap band",
    }
    lines += [f"![{captions[k]}]({p.name})" for k, p in figs.items()]
    return "\n".join(lines) + "\n"


#: Bootstrap resamples of the study report's fit (tests set 0 to skip the intervals). Each starts from
#: ``SECTION_BOOTSTRAP_GRID``: on the 2-core Xeon on 2026-11-29 the section on the quick run's 15 rows
#: took 4.6 s without a bootstrap (compilation included), +1.6 s with 40 resamples and +3.7 s with 100;
#: from all 4,500 starts 40 resamples had taken +12 s of a demo that must stay under 8 minutes.
BOOTSTRAP = 100

_COLUMNS = ["width", "depth", "params", "tokens", "flops_6nd", "flops_xla", "train_loss", "val_loss", "wall_s"]


def rows_table(rows: pd.DataFrame) -> str:
    """The scaling run's rows (ok points) as Markdown, smallest model and budget first.

    >>> print(rows_table(pd.DataFrame({"status": ["ok"], "params": [1200.0], "tokens": [65536],
    ...                                "val_loss": [2.34567], "wall_s": [1.25]})))
    | params   | tokens   | val_loss   | wall_s   |
    |:---------|:---------|:-----------|:---------|
    | 1,200    | 65,536   | 2.3457     | 1.2      |
    """
    ok = rows[rows.status == "ok"] if "status" in rows else rows
    t = ok[[c for c in _COLUMNS if c in ok]].sort_values(["params", "tokens"])
    fmt = {c: (lambda v: f"{v:,.0f}") for c in ("params", "tokens")}
    fmt.update({c: (lambda v: f"{v:.3g}") for c in ("flops_6nd", "flops_xla")})
    fmt.update({c: (lambda v: f"{v:.4f}") for c in ("train_loss", "val_loss")})
    fmt["wall_s"] = lambda v: f"{v:.1f}"
    return md_table(t.assign(**{c: t[c].map(f) for c, f in fmt.items() if c in t}))


def section(study) -> str:
    """The report's "## Scaling" section of a study (``analysis.report.StudyResults``).

    Raises:
        RuntimeError: the study's scaling stage failed (its error is in ``study.errors``); the
            report shows the failure in place of the section.
    """
    if study.errors.get("scaling"):
        raise RuntimeError(f"the scaling run failed: {study.errors['scaling']}")
    rows = study.scaling_rows
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
        fit_md = scaling_section(ok, study.path, "params", "tokens", "val_loss", bootstrap=BOOTSTRAP)
    except FitInputError as e:
        return f"## Scaling\n\n{head}\nNo fit: {e}\n"
    first, _, rest = fit_md.partition("\n")
    return f"{first}\n\n{head}\n{rest.lstrip()}"
