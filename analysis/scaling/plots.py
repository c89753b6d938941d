"""Figures of scaling-law fits: loss against N per D, IsoFLOP curves, the compute-optimal frontier.

Matplotlib's object API with the Agg canvas (no pyplot, no global backend switch). Each
``*_figure`` function returns the ``Figure`` (a notebook shows it, a test reads its axes);
:func:`save` writes one PNG and :func:`write_figures` all three under fixed file names
(:data:`FIGURES`) so reports can link them.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pandas as pd
import matplotlib
from matplotlib import colors
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis.scaling.fit import ComputeOptimal, ScalingFit, compute_optimal

#: figure key -> file name
FIGURES = {
    "loss_vs_n": "scaling_loss_vs_n.png",
    "isoflop": "scaling_isoflop.png",
    "frontier": "scaling_frontier.png",
}


def save(fig: Figure, path: pathlib.Path) -> pathlib.Path:
    """Write ``fig`` as a PNG at ``path`` (folders created) and return the path."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def _levels(values: np.ndarray, max_levels: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Group positive values into levels: the distinct values if few, else log-spaced bins.

    Returns (level value per group, group index per value).
    """
    distinct = np.unique(values)
    if len(distinct) <= max_levels:
        return distinct, np.searchsorted(distinct, values)
    edges = np.geomspace(values.min(), values.max() * (1 + 1e-12), max_levels + 1)
    group = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, max_levels - 1)
    centers = np.sqrt(edges[:-1] * edges[1:])
    used = np.unique(group)
    return centers[used], np.searchsorted(used, group)


def _title(fit: ScalingFit) -> str:
    v = fit.values
    return f"E={v['E']:.3g}, A={v['A']:.3g}, B={v['B']:.3g}, α={v['alpha']:.3g}, β={v['beta']:.3g}"


def _predict(fit: ScalingFit, n, d) -> np.ndarray:
    return fit.predict(pd.DataFrame({fit.columns["n"]: n, fit.columns["d"]: d})).to_numpy()


def loss_vs_n_figure(fit: ScalingFit) -> Figure:
    """Measured loss against N on log-log axes, one colour per D level, with the fitted law at
    each level (D levels: the distinct D values if at most 6, else 6 log-spaced bins)."""
    cols = fit.columns
    n = fit.data[cols["n"]].to_numpy(float)
    d = fit.data[cols["d"]].to_numpy(float)
    loss = fit.data[cols["loss"]].to_numpy(float)
    levels, group = _levels(d)
    cmap = matplotlib.colormaps["viridis"]
    norm = colors.LogNorm(vmin=levels.min(), vmax=levels.max() * (1 + 1e-9))
    fig = Figure(figsize=(6.4, 4.6))
    ax = fig.add_subplot()
    grid_n = np.geomspace(n.min() / 1.5, n.max() * 1.5, 200)
    for i, lev in enumerate(levels):
        c = cmap(norm(lev)) if len(levels) > 1 else "C0"
        sel = group == i
        ax.scatter(n[sel], loss[sel], color=c, s=22, edgecolor="k", linewidth=0.3, zorder=3)
        ax.plot(grid_n, _predict(fit, grid_n, np.full_like(grid_n, lev)), color=c, lw=1.4,
                label=f"D ≈ {lev:.3g}")
    if len(fit.dropped):
        ax.scatter(fit.dropped[cols["n"]], fit.dropped[cols["loss"]], marker="x", color="r", s=30,
                   label="dropped (outlier)", zorder=4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"N ({cols['n']})")
    ax.set_ylabel(f"loss ({cols['loss']})")
    ax.set_title("Loss against N per D; lines: fitted law\n" + _title(fit), fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.25)
    return fig


def _flops_levels(fit: ScalingFit, k: int = 6) -> np.ndarray:
    c = 6.0 * fit.data[fit.columns["n"]].to_numpy(float) * fit.data[fit.columns["d"]].to_numpy(float)
    return np.geomspace(c.min(), c.max(), k)


def isoflop_figure(fit: ScalingFit, flops: np.ndarray | None = None) -> Figure:
    """IsoFLOP curves: fitted loss against N along D = C/(6N) for several budgets C, with the
    fitted minimum (N_opt) marked and the runs whose 6·N·D falls in each budget's bin."""
    cols = fit.columns
    n = fit.data[cols["n"]].to_numpy(float)
    d = fit.data[cols["d"]].to_numpy(float)
    loss = fit.data[cols["loss"]].to_numpy(float)
    budgets = _flops_levels(fit) if flops is None else np.asarray(flops, float)
    opt = compute_optimal(fit, budgets).frontier
    c_runs = 6.0 * n * d
    log_edges = np.log(budgets)
    half = np.diff(log_edges).mean() / 2 if len(budgets) > 1 else np.inf
    cmap = matplotlib.colormaps["plasma"]
    fig = Figure(figsize=(6.4, 4.6))
    ax = fig.add_subplot()
    for i, c in enumerate(budgets):
        colr = cmap(i / max(1, len(budgets) - 1) * 0.85)
        n_opt = opt["n_opt"].iloc[i]
        grid_n = np.geomspace(min(n.min(), n_opt) / 4, max(n.max(), n_opt) * 4, 300)
        ax.plot(grid_n, _predict(fit, grid_n, c / (6.0 * grid_n)), color=colr, lw=1.3, label=f"C = {c:.2g}")
        ax.scatter([n_opt], [opt["loss_opt"].iloc[i]], color=colr, marker="*", s=90, edgecolor="k",
                   linewidth=0.4, zorder=4)
        near = np.abs(np.log(c_runs) - np.log(c)) <= half
        ax.scatter(n[near], loss[near], color=colr, s=16, alpha=0.8, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"N ({cols['n']})")
    ax.set_ylabel(f"loss ({cols['loss']})")
    ax.set_title("IsoFLOP curves of the fitted law (★: compute-optimal N); dots: runs near each C",
                 fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.25)
    return fig


def frontier_figure(fit: ScalingFit, opt: ComputeOptimal | None = None) -> Figure:
    """Compute-optimal N and D against C, with the bootstrap interval band when the fit has
    one, and the runs (N and D against their 6·N·D) for reference."""
    cols = fit.columns
    n = fit.data[cols["n"]].to_numpy(float)
    d = fit.data[cols["d"]].to_numpy(float)
    c_runs = 6.0 * n * d
    if opt is None:
        opt = compute_optimal(fit, np.geomspace(c_runs.min() / 10, c_runs.max() * 100, 60))
    fr = opt.frontier
    ex = opt.exponents.set_index("param")
    fig = Figure(figsize=(10, 4.2))
    for j, (key, runs, label) in enumerate((("n_opt", n, "N"), ("d_opt", d, "D"))):
        ax = fig.add_subplot(1, 2, j + 1)
        ax.plot(fr["flops"], fr[key], color="C0", lw=1.6, label=f"{label}_opt (fit)")
        if f"{key}_low" in fr:
            ci = fit.options.get("ci", 0.95)
            ax.fill_between(fr["flops"], fr[f"{key}_low"], fr[f"{key}_high"], color="C0", alpha=0.2,
                            label=f"{ci:.0%} bootstrap band ({int(fit.stats.iloc[0]['n_bootstrap'])} resamples)")
        ax.scatter(c_runs, runs, s=12, color="0.4", alpha=0.7, label="runs")
        e = ex.loc["a" if key == "n_opt" else "b"]
        interval = "" if np.isnan(e["ci_low"]) else f" [{e['ci_low']:.3f}, {e['ci_high']:.3f}]"
        ax.set_title(f"{label}_opt ∝ C^{e['value']:.3f}{interval}", fontsize=9)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("C = 6·N·D (FLOPs)")
        ax.set_ylabel(f"{label}_opt")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=7)
    fig.suptitle("Compute-optimal frontier: " + _title(fit), fontsize=9)
    return fig


def write_figures(fit: ScalingFit, out_dir: pathlib.Path, opt: ComputeOptimal | None = None) -> dict[str, pathlib.Path]:
    """Write all three figures of a Chinchilla fit into ``out_dir``; returns key -> path."""
    out_dir = pathlib.Path(out_dir)
    return {
        "loss_vs_n": save(loss_vs_n_figure(fit), out_dir / FIGURES["loss_vs_n"]),
        "isoflop": save(isoflop_figure(fit), out_dir / FIGURES["isoflop"]),
        "frontier": save(frontier_figure(fit, opt), out_dir / FIGURES["frontier"]),
    }
