"""Saturating throughput fits (Amdahl / smooth minimum): ceiling and knee."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.fit_input import FitInputError
from analysis.throughput_fit import fit_throughput


def sweep(law, k, noise, seed=0, x="num_workers"):
    y = law(k) * np.exp(np.random.default_rng(seed).normal(0, noise, k.size))
    return pd.DataFrame({x: k, "samples_per_s": y})


def test_amdahl_recovers_ceiling_and_knee():
    k = np.repeat([1, 2, 3, 4, 6, 8, 12, 16, 24], 3).astype(float)
    df = sweep(lambda k: 1 / (1 / (500 * k) + 1 / 3000), k, 0.02, seed=1)
    fit = fit_throughput(df, form="amdahl")
    p = fit.params.set_index("param")
    assert fit.value("ceiling") == pytest.approx(3000, rel=0.05)
    assert fit.value("slope") == pytest.approx(500, rel=0.05)
    assert fit.value("knee") == pytest.approx(6.0, rel=0.08)
    assert fit.value("y_at_knee") == pytest.approx(fit.value("ceiling") / 2)
    for name, true in (("ceiling", 3000), ("slope", 500), ("knee", 6.0)):
        assert p.loc[name, "ci_low"] < true < p.loc[name, "ci_high"], name
    assert bool(fit.stats.iloc[0]["knee_in_data"])


def test_smooth_min_recovers_a_sharp_knee_that_amdahl_misses():
    k = np.repeat([1, 2, 3, 4, 5, 6, 8, 10, 12, 16], 2).astype(float)
    df = sweep(lambda k: np.minimum(800 * k, 5000), k, 0.01, seed=2)
    sharp = fit_throughput(df)
    assert sharp.value("ceiling") == pytest.approx(5000, rel=0.03)
    assert sharp.value("knee") == pytest.approx(6.25, rel=0.05)
    assert sharp.value("sharpness") > 5
    amdahl = fit_throughput(df, form="amdahl")
    assert amdahl.stats.iloc[0]["rmse_log"] > 3 * sharp.stats.iloc[0]["rmse_log"]


def test_batch_size_overhead_law_and_extrapolated_ceiling():
    b = np.array([8, 16, 32, 64, 128.0])  # per-step overhead 20 ms, 0.1 ms per sample: knee at 200
    df = sweep(lambda b: b / (0.02 + 1e-4 * b), b, 0.005, seed=3, x="batch_size")
    fit = fit_throughput(df, x="batch_size", form="amdahl")
    assert fit.value("ceiling") == pytest.approx(1e4, rel=0.1)
    assert not bool(fit.stats.iloc[0]["knee_in_data"])
    assert "ceiling is extrapolated" in fit.report()


def test_predict_and_residuals():
    k = np.array([1, 2, 4, 8, 16.0])
    df = sweep(lambda k: 1 / (1 / (100 * k) + 1 / 600), k, 0.0)
    fit = fit_throughput(df, form="amdahl")
    np.testing.assert_allclose(fit.predict(df), df["samples_per_s"], rtol=1e-6)
    np.testing.assert_allclose(fit.residuals()["rel_error"], 0.0, atol=1e-6)
    np.testing.assert_allclose(fit.predict(np.array([1e6])), 600, rtol=1e-3)


def test_bad_input_is_named():
    df = pd.DataFrame({"num_workers": [0, 1, 2, 4], "samples_per_s": [50.0, 90, 160, 250]})
    with pytest.raises(FitInputError, match=r"'num_workers' must be > 0, but rows \[0\] hold \[0.0\]"):
        fit_throughput(df)
    df2 = pd.DataFrame({"num_workers": [1, 1, 2, 2], "samples_per_s": [50.0, 51, 90, 91]})
    with pytest.raises(FitInputError, match="only 2 distinct value"):
        fit_throughput(df2)
    df3 = pd.DataFrame({"num_workers": [1, 2, 4], "samples_per_s": [50.0, np.inf, 90]})
    with pytest.raises(FitInputError, match=r"infinite values at rows \[1\]"):
        fit_throughput(df3, form="amdahl")
    with pytest.raises(ValueError, match="form must be one of"):
        fit_throughput(df2, form="usl")
