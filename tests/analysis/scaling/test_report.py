"""The "## Scaling" report section on the small table of a quick scaling run."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from analysis.scaling import plots as scaling_plots
from analysis.scaling.fit_input import FitInputError
from analysis.scaling.report import SECTION_BOOTSTRAP, scaling_section


def quick_run_rows(seed: int = 0) -> pd.DataFrame:
    """15 rows like a quick scaling run: 5 model sizes x 3 token budgets, 2% noise."""
    n, d = (a.ravel() for a in np.meshgrid(np.geomspace(2e5, 6e6, 5), [2e6, 8e6, 3.2e7]))
    loss = (1.69 + 406.4 / n**0.34 + 410.7 / d**0.28) * np.exp(np.random.default_rng(seed).normal(0, 0.02, n.size))
    return pd.DataFrame({"params": n, "tokens": d, "val_loss": loss, "model": [f"m{i}" for i in range(n.size)]})


def test_section_on_a_small_table(tmp_path):
    md = scaling_section(quick_run_rows(), tmp_path, bootstrap=8)
    lines = md.splitlines()
    assert lines[0] == "## Scaling"
    assert "15 runs" in md and "Few rows" in md  # warns: 15 rows for 5 parameters
    assert "8 bootstrap resamples" in md and "fewer than the command line's 1,000 from all" in md
    assert "each refitted from 243 of the fit's 4500 grid starts" in md  # SECTION_BOOTSTRAP_GRID
    assert re.search(r"^\| param +\| value +\| stderr +\| 95% interval +\|$", md, re.M)
    assert "### Compute-optimal allocation" in md and "a = β/(α+β)" in md
    for name in scaling_plots.FIGURES.values():
        assert f"]({name})" in md  # linked by file name
        assert (tmp_path / name).stat().st_size > 10_000
    table = [l for l in lines if l.startswith("| alpha")]
    assert len(table) == 1 and "[" in table[0]  # an interval, not a dash


def test_section_says_when_there_is_no_bootstrap(tmp_path):
    md = scaling_section(quick_run_rows(), tmp_path, bootstrap=0)
    assert "Uncertainty: not computed (bootstrap=0)." in md


def test_section_defaults_to_a_reduced_bootstrap():
    assert 0 < SECTION_BOOTSTRAP < 1000


def test_bootstrap_from_a_thinned_grid_keeps_the_fit_and_records_its_starts():
    from analysis.scaling import fit as F
    from analysis.scaling.report import SECTION_BOOTSTRAP_GRID
    fit = F.fit_chinchilla(quick_run_rows(), bootstrap=0)
    full, thin = F.bootstrap(fit, 16, seed=1), F.bootstrap(fit, 16, seed=1, grid=SECTION_BOOTSTRAP_GRID)
    assert int(full.stats.iloc[0]["n_bootstrap_starts"]) == 4500
    assert int(thin.stats.iloc[0]["n_bootstrap_starts"]) == 243
    assert "from all 4500 starts" in full.uncertainty_note()
    assert "from 243 of the fit's 4500 grid starts" in thin.uncertainty_note()
    pd.testing.assert_frame_equal(full.params[["param", "value"]], thin.params[["param", "value"]])
    # the same resamples end at the same optima: 2% noise on 15 rows leaves no far basin
    np.testing.assert_allclose(thin.params["stderr"], full.params["stderr"], rtol=1e-3)
    with pytest.raises(ValueError, match="the start grid needs 5 coordinates, got 3"):
        F.bootstrap(fit, 4, grid={"c": [0.0], "alpha": [0.5], "e": [0.0]})


def test_section_raises_on_bad_rows(tmp_path):
    rows = quick_run_rows()
    rows.loc[4, "val_loss"] = np.nan
    with pytest.raises(FitInputError, match=r"'val_loss' has NaN at rows \[4\]"):
        scaling_section(rows, tmp_path)


def test_study_section_reports_a_failed_scaling_stage_and_an_absent_run(tmp_path):
    from analysis.report import StudyResults
    from analysis.scaling import section

    def study(meta, rows=None):
        return StudyResults(path=tmp_path, rows=pd.DataFrame(), runs=pd.DataFrame(), config={}, meta=meta,
                            scaling_rows=rows)

    with pytest.raises(RuntimeError, match="the scaling run failed: ValueError: nan loss"):
        section(study({"errors": {"scaling": "ValueError: nan loss"}}, quick_run_rows()))
    md = section(study({}))
    assert md.startswith("## Scaling") and "No scaling run in this study" in md
    assert not list(tmp_path.iterdir())  # nothing fitted, nothing drawn
