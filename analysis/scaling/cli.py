"""The ``scaling`` subcommand: fit L(N, D) = E + A/N^α + B/D^β to a rows CSV, print, plot.

    python -m analysis scaling ROWS.csv --n params --d tokens --loss val_loss \
        [--out DIR] [--bootstrap N] [--seed S] [--drop-highest-loss K] [--query EXPR]

Prints the fit report (parameters with bootstrap stderr and intervals, fit statistics, how many
of the 4,500 starts reached the best fit) and the compute-optimal allocation; writes into
``--out`` (default: ``<ROWS dir>/scaling_fit``) the three figures of
``analysis.scaling.plots`` and the tables ``scaling_params.csv``, ``scaling_stats.csv``,
``scaling_compute_optimal.csv`` and ``scaling_bootstrap.csv``.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np
import pandas as pd

HELP = "fit a Chinchilla scaling law (Hoffmann et al. Approach 3) to a rows CSV; print and plot it"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("rows", type=pathlib.Path, help="CSV with one row per trained model")
    p.add_argument("--n", default="params", help="column of the parameter count N (default: params)")
    p.add_argument("--d", default="tokens", help="column of the training tokens D (default: tokens)")
    p.add_argument("--loss", default="val_loss", help="column of the loss (default: val_loss)")
    p.add_argument("--out", type=pathlib.Path, default=None,
                   help="folder for figures and tables (default: <ROWS dir>/scaling_fit)")
    p.add_argument("--bootstrap", type=int, default=1000,
                   help="bootstrap resamples, each refitted from all starts (default: 1000; 0: none)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default: 0)")
    p.add_argument("--drop-highest-loss", type=int, default=0, metavar="K",
                   help="drop the K highest-loss rows before fitting (default: 0, reported)")
    p.add_argument("--query", default=None,
                   help="pandas query selecting rows first, e.g. \"dataset == 'rpj'\"")


def budgets_for(fit) -> np.ndarray:
    """Compute budgets for the printed table: the runs' 6·N·D range, then 10x and 100x beyond."""
    c = 6.0 * fit.data[fit.columns["n"]].to_numpy(float) * fit.data[fit.columns["d"]].to_numpy(float)
    lo, hi = np.log10(c.min()), np.log10(c.max())
    return np.unique(np.r_[10.0 ** np.round(np.linspace(lo, hi, 4), 1), 10.0 ** np.round(hi + 1), 10.0 ** np.round(hi + 2)])


def _with_interval(fr: pd.DataFrame, key: str) -> list[str]:
    if f"{key}_low" not in fr:
        return [f"{v:.4g}" for v in fr[key]]
    return [f"{v:.4g} [{lo:.3g}, {hi:.3g}]" for v, lo, hi in zip(fr[key], fr[f"{key}_low"], fr[f"{key}_high"])]


def format_optimal(opt) -> str:
    """The exponents a, b and the frontier table (values with bootstrap intervals), as text."""
    ex = opt.exponents.set_index("param")
    lines = []
    for key, what in (("a", "N_opt ∝ C^a"), ("b", "D_opt ∝ C^b")):
        e = ex.loc[key]
        ci = "" if np.isnan(e["ci_low"]) else f"  [{e['ci_low']:.4f}, {e['ci_high']:.4f}]"
        lines.append(f"    {what}: {key} = {e['value']:.4f}{ci}")
    fr = opt.frontier
    table = pd.DataFrame(
        {
            "C (FLOPs)": [f"{v:.3g}" for v in fr["flops"]],
            "N_opt": _with_interval(fr, "n_opt"),
            "D_opt": _with_interval(fr, "d_opt"),
            "tokens/param": _with_interval(fr, "tokens_per_param"),
            "loss": _with_interval(fr, "loss_opt"),
        }
    )
    return "\n".join(lines + ["    " + line for line in table.to_string(index=False).splitlines()])


def format_stats(fit) -> str:
    st = fit.stats.iloc[0]
    return "\n".join(f"    {k:12s} = {v:.6g}" if isinstance(v, float) else f"    {k:12s} = {v}" for k, v in st.items())


def run(args: argparse.Namespace) -> int:
    from analysis.scaling import fit as scaling, plots as scaling_plots
    from analysis.scaling.fit_input import FitInputError

    for flag, v in (("--bootstrap", args.bootstrap), ("--drop-highest-loss", args.drop_highest_loss)):
        if v < 0:
            print(f"error: {flag}={v}: must be >= 0 (0: none)", file=sys.stderr)
            return 2
    if not args.rows.is_file():
        print(f"error: rows file {str(args.rows)!r} does not exist", file=sys.stderr)
        return 2
    df = pd.read_csv(args.rows)
    if args.query:
        try:
            df = df.query(args.query)
        except Exception as exc:  # pandas raises many types for a bad expression
            print(f"error: --query {args.query!r} failed: {exc}", file=sys.stderr)
            return 2
    try:
        fit = scaling.fit_chinchilla(
            df, n=args.n, d=args.d, loss=args.loss, bootstrap=args.bootstrap, seed=args.seed,
            drop_highest_loss=args.drop_highest_loss,
        )
    except FitInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = args.out if args.out is not None else args.rows.parent / "scaling_fit"
    out.mkdir(parents=True, exist_ok=True)
    print(f"Scaling fit of {args.rows} ({len(df)} rows" + (f" after --query {args.query!r}" if args.query else "") + ")")
    print(fit.report())
    print("[[Statistics]]")
    print(format_stats(fit))
    try:
        opt = scaling.compute_optimal(fit, budgets_for(fit))
    except ValueError as exc:  # no interior optimum (an exponent <= 0): say so, still plot the data
        print(f"[[Compute-optimal]]\n    not available: {exc}")
        opt = None
    else:
        print("[[Compute-optimal]]  (C = 6·N·D)")
        print(format_optimal(opt))
    fit.params.to_csv(out / "scaling_params.csv", index=False)
    fit.stats.to_csv(out / "scaling_stats.csv", index=False)
    written = [out / "scaling_params.csv", out / "scaling_stats.csv"]
    if fit.bootstrap_params is not None:
        fit.bootstrap_params.to_csv(out / "scaling_bootstrap.csv", index=False)
        written.append(out / "scaling_bootstrap.csv")
    if opt is not None:
        opt.frontier.to_csv(out / "scaling_compute_optimal.csv", index=False)
        written.append(out / "scaling_compute_optimal.csv")
        written += list(scaling_plots.write_figures(fit, out).values())
    else:
        written.append(scaling_plots.save(scaling_plots.loss_vs_n_figure(fit), out / scaling_plots.FIGURES["loss_vs_n"]))
    print("[[Written]]")
    for path in written:
        print(f"    {path}")
    return 0
