"""Scaling-law fits: recovery of known laws, a published data set, bad input, compute-optimal.

Bootstraps here use 8 resamples (one compiled shape shared with the CLI tests) to keep the
suite fast; the 1,000-resample default is exercised by ``benchmarks/scaling_fit.py``.
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
import pytest
from scipy import optimize

from analysis.scaling import fit as scaling
from analysis.scaling import search as ss
from analysis.scaling.fit_input import FitInputError

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "gadre2024" / "final_losses.csv"
CHINCHILLA = dict(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)  # Hoffmann et al. 2022, eq. 10


def chinchilla_table(noise: float = 0.0, seed: int = 0) -> pd.DataFrame:
    """48 runs (8 sizes x 6 token budgets) from the published law, log-normal noise."""
    n, d = (a.ravel() for a in np.meshgrid(np.geomspace(1e7, 1e10, 8), np.geomspace(1e9, 1e12, 6)))
    p = CHINCHILLA
    loss = p["E"] + p["A"] / n ** p["alpha"] + p["B"] / d ** p["beta"]
    loss = loss * np.exp(np.random.default_rng(seed).normal(0.0, noise, loss.size))
    return pd.DataFrame({"params": n, "tokens": d, "val_loss": loss})


@pytest.fixture(scope="module")
def gadre() -> pd.DataFrame:
    return pd.read_csv(DATA).query("dataset == 'rpj'").reset_index(drop=True)


@pytest.fixture(scope="module")
def gadre_fit(gadre) -> scaling.ScalingFit:
    return scaling.fit_chinchilla(gadre, n="params", d="tokens", loss="loss_openlm", bootstrap=0)


def huber_sum_numpy(values: dict, n, d, loss, delta=1e-3) -> float:
    """Independent numpy evaluation of the Approach 3 objective at natural parameters."""
    pred = np.logaddexp.reduce(
        np.stack(
            [
                np.log(values["A"]) - values["alpha"] * np.log(n),
                np.log(values["B"]) - values["beta"] * np.log(d),
                np.full(len(n), np.log(values["E"])),
            ]
        ),
        axis=0,
    )
    r = np.abs(pred - np.log(loss))
    return float(np.sum(np.where(r <= delta, 0.5 * r**2, delta * (r - 0.5 * delta))))


# ---------------------------------------------------------------------------------------------
# recovery of known laws


@pytest.mark.latest
def test_chinchilla_noise_free_recovers_published_parameters_exactly():
    fit = scaling.fit_chinchilla(chinchilla_table(), bootstrap=0)
    for name, true in CHINCHILLA.items():
        assert fit.value(name) == pytest.approx(true, rel=1e-4), name
    st = fit.stats.iloc[0]
    assert st["n_starts"] == 4500
    assert 1 <= st["n_at_best"] <= 4500
    assert st["r2_log"] > 1 - 1e-9
    assert st["objective"] < 1e-12


def test_chinchilla_with_noise_recovers_parameters():
    fit = scaling.fit_chinchilla(chinchilla_table(noise=0.01, seed=1), bootstrap=0)
    v = fit.values
    assert v["alpha"] == pytest.approx(0.34, abs=0.04)
    assert v["beta"] == pytest.approx(0.28, abs=0.04)
    assert v["E"] == pytest.approx(1.69, abs=0.15)
    # A and B are strongly correlated with the exponents; a factor of 2 is a real check still
    # (a wrong optimum lands orders of magnitude away).
    assert 0.5 < v["A"] / 406.4 < 2.0 and 0.5 < v["B"] / 410.7 < 2.0
    assert fit.stats.iloc[0]["rmse_log"] == pytest.approx(0.01, rel=0.3)


def test_objective_is_the_sum_of_huber_losses_and_no_scipy_start_beats_it():
    df = chinchilla_table(noise=0.01, seed=1)
    fit = scaling.fit_chinchilla(df, bootstrap=0)
    n, d, loss = (df[c].to_numpy() for c in ("params", "tokens", "val_loss"))
    ours = huber_sum_numpy(fit.values, n, d, loss)
    assert fit.stats.iloc[0]["objective"] == pytest.approx(ours, rel=1e-9)

    # scipy's L-BFGS-B from 20 grid starts (raw coordinates, the usual way) finds nothing lower.
    def f(x):
        a, alpha, b, beta, e = x
        return huber_sum_numpy(dict(A=np.exp(a), alpha=alpha, B=np.exp(b), beta=beta, E=np.exp(e)), n, d, loss)

    starts = ss.grid_starts(ss.CHINCHILLA_GRID)[:: 4500 // 20]
    best_scipy = min(optimize.minimize(f, x0, method="L-BFGS-B").fun for x0 in starts)
    assert ours <= best_scipy * (1 + 1e-6)


@pytest.mark.latest
def test_optax_lbfgs_agrees_with_the_fitted_optimum():
    df = chinchilla_table(noise=0.01, seed=1)
    fit = scaling.fit_chinchilla(df, bootstrap=0)
    log_x = np.log(df[["params", "tokens"]].to_numpy().T)
    log_y = np.log(df["val_loss"].to_numpy())
    st = ss.Standardizer.from_log_x(log_x)
    with jax.enable_x64(True):
        rows = dict(z=jnp.asarray(st.z(log_x)), y=jnp.asarray(log_y), w=jnp.ones(len(log_y)))
        shared = dict(delta=jnp.asarray(1e-3))
        fun = lambda t: ss.lse_huber(t, rows, shared)[0]  # noqa: E731
        x = jnp.asarray(st.to_internal(fit.raw)) + 0.05  # start off the optimum
        opt = optax.lbfgs()
        vg = optax.value_and_grad_from_state(fun)

        @jax.jit
        def run(x):
            def step(carry, _):
                x, state = carry
                value, grad = vg(x, state=state)
                updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=fun)
                return (optax.apply_updates(x, updates), state), None

            (x, _), _ = jax.lax.scan(step, (x, opt.init(x)), length=200)
            return x

        found = float(fun(run(x)))
        assert found >= fit.stats.iloc[0]["objective"] * (1 - 1e-6)
        assert found == pytest.approx(fit.stats.iloc[0]["objective"], rel=1e-3)


def test_power_law_noise_free_recovers_kaplan_exponent():
    x = np.geomspace(1e6, 1e10, 40)
    loss = (8.8e13 / x) ** 0.076  # Kaplan et al. 2020, eq. 1.1: no irreducible term
    fit = scaling.fit_power_law(pd.DataFrame({"N": x, "L": loss}), x="N", y="L", bootstrap=0)
    assert fit.value("alpha") == pytest.approx(0.076, abs=1e-3)
    assert fit.value("k") == pytest.approx(8.8e13**0.076, rel=0.01)
    assert fit.value("L_inf") < 1e-2  # losses here are 2.0 .. 4.0


@pytest.mark.latest
def test_power_law_with_noise_recovers_kaplan_exponent():
    x = np.geomspace(1e6, 1e10, 40)
    loss = (8.8e13 / x) ** 0.076 * np.exp(np.random.default_rng(2).normal(0, 0.002, x.size))
    fit = scaling.fit_power_law(pd.DataFrame({"N": x, "L": loss}), x="N", y="L", bootstrap=0)
    assert fit.value("alpha") == pytest.approx(0.076, abs=0.006)
    assert fit.value("L_inf") < 0.2


def test_power_law_with_floor():
    x = np.geomspace(1e6, 1e10, 40)
    loss = (1.5 + 40.0 * x**-0.3) * np.exp(np.random.default_rng(3).normal(0, 0.005, x.size))
    fit = scaling.fit_power_law(pd.DataFrame({"C": x, "L": loss}), x="C", y="L", bootstrap=0)
    assert fit.value("L_inf") == pytest.approx(1.5, abs=0.05)
    assert fit.value("alpha") == pytest.approx(0.3, abs=0.03)


# ---------------------------------------------------------------------------------------------
# published data: Gadre et al. 2024 (RedPajama models)


def test_gadre_fit_converges_to_a_plausible_law(gadre_fit):
    st = gadre_fit.stats.iloc[0]
    assert st["n"] == 35
    assert st["r2_log"] > 0.97
    assert st["n_at_best"] >= 20  # the best fit is found from many starts, not one lucky one
    v = gadre_fit.values
    assert 0.1 < v["alpha"] < 0.6 and 0.1 < v["beta"] < 0.6
    assert 0.5 < v["E"] < 2.5  # below every measured loss (the smallest is 1.90)
    assert (gadre_fit.residuals()["rel_error"].abs() < 0.25).all()


def test_gadre_fit_is_stable_across_restarts(gadre, gadre_fit):
    again = scaling.fit_chinchilla(gadre, loss="loss_openlm", bootstrap=0)
    assert again.values == gadre_fit.values  # deterministic
    shuffled = scaling.fit_chinchilla(gadre.sample(frac=1, random_state=7), loss="loss_openlm", bootstrap=0)
    shifted_grid = {k: v + (2.5 if k in ("a", "b") else 0.25) for k, v in ss.CHINCHILLA_GRID.items()}
    other_starts = scaling.fit_chinchilla(gadre, loss="loss_openlm", bootstrap=0, grid=shifted_grid)
    for fit in (shuffled, other_starts):
        assert fit.stats.iloc[0]["objective"] == pytest.approx(gadre_fit.stats.iloc[0]["objective"], rel=1e-7)
        for name, value in gadre_fit.values.items():
            assert fit.value(name) == pytest.approx(value, rel=1e-4), name


def test_gadre_bootstrap_is_seeded_and_stable_across_seeds(gadre_fit):
    b0 = scaling.bootstrap(gadre_fit, n_resamples=8, seed=0)
    b0_again = scaling.bootstrap(gadre_fit, n_resamples=8, seed=0)
    b1 = scaling.bootstrap(gadre_fit, n_resamples=8, seed=1)
    pd.testing.assert_frame_equal(b0.bootstrap_params, b0_again.bootstrap_params)
    assert not b0.bootstrap_params.equals(b1.bootstrap_params)
    for b in (b0, b1):
        p = b.params.set_index("param")
        assert (p["ci_low"] <= p["ci_high"]).all()
        assert b.stats.iloc[0]["n_bootstrap"] == 8
        assert (b.bootstrap_params["n_at_best"] >= 1).all()
        for name in ("alpha", "beta"):
            assert p.loc[name, "ci_low"] - 0.02 <= p.loc[name, "value"] <= p.loc[name, "ci_high"] + 0.02
            assert 0.005 < p.loc[name, "stderr"] < 0.1
    for name in ("alpha", "beta"):
        s0 = b0.params.set_index("param").loc[name, "stderr"]
        s1 = b1.params.set_index("param").loc[name, "stderr"]
        assert 0.4 < s0 / s1 < 2.5
        assert abs(b0.bootstrap_params[name].median() - b1.bootstrap_params[name].median()) < 0.03
    assert "8 bootstrap resamples" in b0.report()
    assert b0.stats.iloc[0]["n_bootstrap_diverged"] == 0 and "diverged" not in b0.report()


def test_a_diverged_resample_is_infinite_and_said_not_an_overflow(gadre_fit):
    # A resample of a small scaling run can send a coefficient's log past float64's range; its
    # estimate is inf (no overflow warning), that parameter's stderr inf, and the report says how many
    import dataclasses
    import warnings
    raw = np.array([[1.0, 0.3, 800.0, 0.2, 0.5], [1.0, 0.3, 2.0, 0.2, 0.5]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nat = scaling.natural_params("chinchilla", raw)
        samples = np.vstack([nat, nat[1:] * 1.1, nat[:1]])  # two of four resamples diverged
        std, n = scaling.resample_std(samples)
        lo, hi = scaling.resample_interval(samples, 0.95)
    assert np.isinf(nat[0, 2]) and np.isfinite(nat[1]).all()
    assert n == 2 and np.isinf(std[2]) and np.isfinite(np.delete(std, 2)).all()
    assert np.isinf(hi[2]) and np.isfinite(lo[2]) and np.isfinite(np.delete(hi, 2)).all()
    assert (lo <= hi).all()
    stats = gadre_fit.stats.copy()
    stats["n_bootstrap"], stats["n_bootstrap_diverged"] = 8, 3
    note = dataclasses.replace(gadre_fit, stats=stats, options={**gadre_fit.options, "ci": 0.95, "seed": 0})
    assert "3 resample(s) diverged" in note.uncertainty_note()


# ---------------------------------------------------------------------------------------------
# reports, outliers, predictions


def test_report_and_frames_have_the_documented_columns(gadre_fit):
    assert list(gadre_fit.params.columns) == ["param", "value", "stderr", "ci_low", "ci_high"]
    assert list(gadre_fit.params["param"]) == ["E", "A", "B", "alpha", "beta"]
    for col in ("n", "objective", "rmse_log", "r2_log", "n_starts", "n_at_best"):
        assert col in gadre_fit.stats.columns
    assert gadre_fit.params["stderr"].isna().all()  # no bootstrap: no fake stderr
    text = gadre_fit.report()
    assert "none dropped (drop_highest_loss=0)" in text
    assert "no bootstrap" in text
    assert "4500 grid starts" in text


def test_drop_highest_loss_is_explicit_and_reported(gadre):
    fit = scaling.fit_chinchilla(gadre, loss="loss_openlm", bootstrap=0, drop_highest_loss=2)
    worst = gadre["loss_openlm"].nlargest(2).index
    assert sorted(fit.dropped.index) == sorted(worst)
    assert fit.stats.iloc[0]["n"] == 33 and fit.stats.iloc[0]["n_dropped"] == 2
    assert not set(worst) & set(fit.data.index)
    assert "dropped the 2 rows with the highest 'loss_openlm'" in fit.report()


def test_predict_and_residuals_agree(gadre_fit, gadre):
    res = gadre_fit.residuals()
    pred = gadre_fit.predict(gadre)
    np.testing.assert_allclose(res["predicted"], pred.loc[res.index])
    np.testing.assert_allclose(res["rel_error"], (pred - gadre["loss_openlm"]) / gadre["loss_openlm"])
    np.testing.assert_allclose(res["residual_log"], np.log(gadre["loss_openlm"] / pred))
    with pytest.raises(FitInputError, match="tokens"):
        gadre_fit.predict(gadre.drop(columns="tokens"))


# ---------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize(
    "column, row, value, message",
    [
        ("val_loss", 5, np.nan, r"column 'val_loss' has NaN at rows \[5\]"),
        ("tokens", 7, np.inf, r"column 'tokens' has infinite values at rows \[7\]"),
        ("params", 2, 0.0, r"column 'params' must be > 0, but rows \[2\] hold \[0.0\]"),
        ("tokens", 3, -1e9, r"column 'tokens' must be > 0, but rows \[3\] hold \[-1000000000.0\]"),
        ("val_loss", 0, -2.0, r"column 'val_loss' must be > 0, but rows \[0\] hold \[-2.0\]"),
    ],
)
def test_bad_values_raise_naming_column_and_rows(column, row, value, message):
    df = chinchilla_table()
    df.loc[row, column] = value
    with pytest.raises(FitInputError, match=message):
        scaling.fit_chinchilla(df, bootstrap=0)


def test_bad_values_in_several_rows_are_all_named():
    df = chinchilla_table()
    df.index = [f"run{i}" for i in range(len(df))]
    df.loc[["run3", "run11"], "val_loss"] = np.nan
    with pytest.raises(FitInputError, match=r"rows \['run3', 'run11'\]"):
        scaling.fit_chinchilla(df, bootstrap=0)


def test_missing_column_is_named():
    with pytest.raises(FitInputError, match=r"missing column\(s\) \['loss'\].*'params', 'tokens', 'val_loss'"):
        scaling.fit_chinchilla(chinchilla_table(), loss="loss", bootstrap=0)


def test_fewer_rows_than_parameters():
    with pytest.raises(FitInputError, match="4 rows cannot determine 5 parameters"):
        scaling.fit_chinchilla(chinchilla_table().iloc[[0, 9, 18, 27]], bootstrap=0)
    with pytest.raises(FitInputError, match="2 rows cannot determine 3 parameters"):
        scaling.fit_power_law(pd.DataFrame({"x": [1.0, 2.0], "y": [3.0, 2.0]}), x="x", y="y", bootstrap=0)
    with pytest.raises(FitInputError, match="after dropping the 44 highest-loss rows, 4 rows remain"):
        scaling.fit_chinchilla(chinchilla_table(), bootstrap=0, drop_highest_loss=44)


def test_a_single_distinct_size_cannot_give_an_exponent():
    df = chinchilla_table()
    df["params"] = 1e8
    with pytest.raises(FitInputError, match="column 'params' holds only 1 distinct value"):
        scaling.fit_chinchilla(df, bootstrap=0)


def test_non_numeric_column_is_named():
    df = chinchilla_table().astype({"val_loss": object})
    df.loc[4, "val_loss"] = "diverged"
    with pytest.raises(FitInputError, match=r"column 'val_loss' must be numeric, but rows \[4\] hold \['diverged'\]"):
        scaling.fit_chinchilla(df, bootstrap=0)


# ---------------------------------------------------------------------------------------------
# compute-optimal allocation


@pytest.mark.latest
def test_compute_optimal_matches_the_closed_form_and_a_brute_force_search():
    fit = scaling.chinchilla_from_values(**CHINCHILLA)
    budgets = np.array([1e18, 1e21, 5.76e23])
    opt = scaling.compute_optimal(fit, budgets)
    ex = opt.exponents.set_index("param")["value"]
    assert ex["a"] == pytest.approx(0.28 / 0.62, rel=1e-12)
    assert ex["b"] == pytest.approx(0.34 / 0.62, rel=1e-12)
    fr = opt.frontier
    np.testing.assert_allclose(6 * fr["n_opt"] * fr["d_opt"], budgets, rtol=1e-12)
    np.testing.assert_allclose(fr["tokens_per_param"], fr["d_opt"] / fr["n_opt"], rtol=1e-12)
    for c, n_opt, loss_opt in zip(budgets, fr["n_opt"], fr["loss_opt"]):
        n = np.geomspace(n_opt / 100, n_opt * 100, 200_001)
        d = c / (6 * n)
        loss = 1.69 + 406.4 / n**0.34 + 410.7 / d**0.28
        assert n[np.argmin(loss)] == pytest.approx(n_opt, rel=1e-3)
        assert loss.min() == pytest.approx(loss_opt, rel=1e-9)


def test_compute_optimal_intervals_come_from_the_bootstrap(gadre_fit):
    boot = scaling.bootstrap(gadre_fit, n_resamples=8, seed=0)
    opt = scaling.compute_optimal(boot, [1e19, 1e22])
    fr, ex = opt.frontier, opt.exponents.set_index("param")
    for key in ("n_opt", "d_opt", "tokens_per_param", "loss_opt"):
        assert (fr[f"{key}_low"] <= fr[f"{key}_high"]).all()
    assert ex.loc["a", "value"] + ex.loc["b", "value"] == pytest.approx(1.0)
    assert ex.loc["a", "ci_low"] <= ex.loc["a", "ci_high"]
    assert ex.loc["a", "n_valid"] == 8
    # a = beta / (alpha + beta) per resample
    bp = boot.bootstrap_params
    a_samples = bp["beta"] / (bp["alpha"] + bp["beta"])
    assert ex.loc["a", "ci_low"] == pytest.approx(np.percentile(a_samples, 2.5))


def test_compute_optimal_refuses_what_it_cannot_answer():
    x = np.geomspace(1, 1e3, 40)  # 40 rows: the compiled shape of the other power-law tests
    power = scaling.fit_power_law(pd.DataFrame({"x": x, "y": 2 + x**-0.5}), x="x", y="y", bootstrap=0)
    with pytest.raises(ValueError, match="needs a Chinchilla fit"):
        scaling.compute_optimal(power, 1e20)
    flat = scaling.chinchilla_from_values(E=1.7, A=400.0, B=400.0, alpha=0.0, beta=0.3)
    with pytest.raises(ValueError, match="no compute-optimal interior point: alpha=0"):
        scaling.compute_optimal(flat, 1e20)
    with pytest.raises(ValueError, match="positive finite"):
        scaling.compute_optimal(scaling.chinchilla_from_values(**CHINCHILLA), [1e20, -1.0])


def test_resample_counts_draw_rows_with_replacement():
    counts = scaling.resample_counts(50, 400, seed=3)
    assert counts.shape == (400, 50) and (counts.sum(axis=1) == 50).all()
    # each row is drawn Binomial(50, 1/50) times: mean 1, and about 1 - (49/50)^50 = 63.6% distinct
    assert counts.mean() == pytest.approx(1.0)
    assert (counts > 0).mean() == pytest.approx(1 - (49 / 50) ** 50, abs=0.01)
    np.testing.assert_array_equal(counts, scaling.resample_counts(50, 400, seed=3))
