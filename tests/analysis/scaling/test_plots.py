"""analysis.scaling.plots: each figure's axes, series and labels, from a fit of a known law."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.scaling import compute_optimal, fit_chinchilla
from analysis.scaling import plots
from tests.analysis.scaling.test_report import quick_run_rows


@pytest.fixture(scope="module")
def fit():
    return fit_chinchilla(quick_run_rows(), n="params", d="tokens", loss="val_loss", bootstrap=0)


def test_loss_vs_n_has_a_fitted_line_and_points_per_token_level(fit):
    ax = plots.loss_vs_n_figure(fit).axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    assert ax.get_xlabel() == "N (params)" and ax.get_ylabel() == "loss (val_loss)"
    levels = sorted(fit.data["tokens"].unique())
    assert [ln.get_label() for ln in ax.get_lines()] == [f"D ≈ {d:.3g}" for d in levels]
    assert len(ax.collections) == len(levels)  # one scatter of runs per level
    assert sum(len(c.get_offsets()) for c in ax.collections) == len(fit.data)


def test_isoflop_marks_the_optimum_of_each_budget(fit):
    budgets = np.array([1e13, 1e14, 1e15])
    ax = plots.isoflop_figure(fit, budgets).axes[0]
    assert [ln.get_label() for ln in ax.get_lines()] == ["C = 1e+13", "C = 1e+14", "C = 1e+15"]
    stars = [c.get_offsets()[0] for c in ax.collections[::2]]  # the ★ of each budget, then its runs
    opt = compute_optimal(fit, budgets).frontier
    np.testing.assert_allclose([s[0] for s in stars], opt["n_opt"], rtol=1e-6)


def test_frontier_has_a_panel_for_n_and_d(fit):
    fig = plots.frontier_figure(fit)
    assert [ax.get_ylabel() for ax in fig.axes] == ["N_opt", "D_opt"]
    assert all(ax.get_xlabel() == "C = 6·N·D (FLOPs)" for ax in fig.axes)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["N_opt (fit)", "runs"]  # no bootstrap, so no band


def test_write_figures_saves_the_three_files(fit, tmp_path):
    paths = plots.write_figures(fit, tmp_path / "figs")
    assert {k: p.name for k, p in paths.items()} == plots.FIGURES
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths.values())
