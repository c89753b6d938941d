"""The batched L-BFGS and the multi-start scheduler behind the scaling fits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize

from analysis.scaling import batched_lbfgs as bl
from analysis.scaling import multistart


def rosenbrock(z):
    return (1 - z[0]) ** 2 + 100 * (z[1] - z[0] ** 2) ** 2


def test_minimize_solves_rosenbrock_from_every_start():
    starts = np.random.default_rng(0).uniform(-2, 2, size=(64, 2))
    with jax.enable_x64(True):
        res = jax.jit(lambda x0: bl.minimize(jax.value_and_grad(rosenbrock), x0))(jnp.asarray(starts))
    np.testing.assert_allclose(np.asarray(res.x), 1.0, atol=1e-6)
    assert np.asarray(res.converged).all()
    assert (np.asarray(res.n_iter) < 500).all()


def test_minimize_matches_scipy_on_a_badly_scaled_quadratic():
    a = np.diag([1.0, 1e3, 1e-2, 50.0]) + 0.1
    b = np.array([1.0, -2.0, 3.0, 0.5])
    f = lambda x: 0.5 * x @ a @ x - b @ x  # noqa: E731
    with jax.enable_x64(True):
        res = bl.minimize(jax.value_and_grad(lambda x: 0.5 * x @ jnp.asarray(a) @ x - jnp.asarray(b) @ x),
                          jnp.zeros((1, 4)), tol=bl.Tolerances(gtol=1e-10, ftol=0.0, max_iter=2000))
    np.testing.assert_allclose(np.asarray(res.x)[0], np.linalg.solve(a, b), rtol=1e-6)
    assert float(res.f[0]) == pytest.approx(optimize.minimize(f, np.zeros(4), method="L-BFGS-B").fun, rel=1e-6)


def test_iteration_limit_is_not_convergence():
    with jax.enable_x64(True):
        res = bl.minimize(jax.value_and_grad(rosenbrock), jnp.array([[-1.2, 1.0]]),
                          tol=bl.Tolerances(gtol=0.0, ftol=0.0, max_iter=5))
    assert int(res.n_iter[0]) == 5 and not bool(res.converged[0])


def test_steps_never_land_on_non_finite_values():
    # log barrier: the objective is +inf left of 0; a unit first step from 0.01 would cross it
    fg = jax.value_and_grad(lambda x: jnp.where(x[0] > 0, x[0] - jnp.log(x[0]), jnp.inf))
    with jax.enable_x64(True):
        res = bl.minimize(fg, jnp.array([[0.01], [30.0]]))
    np.testing.assert_allclose(np.asarray(res.x)[:, 0], 1.0, rtol=1e-6)


def _weighted_mean(x, rows, shared):
    return jax.value_and_grad(lambda z: jnp.sum(rows["w"] * (rows["y"] - z[0]) ** 2))(x)


def test_scheduler_puts_every_run_in_its_own_slot():
    rng = np.random.default_rng(1)
    y = rng.normal(size=(7, 5)).astype(np.float32)
    w = rng.integers(0, 4, size=(7, 5)).astype(np.float32)
    w[:, 0] += 1  # no all-zero resample
    starts = rng.normal(scale=10, size=(13, 1)).astype(np.float32)
    # 91 runs through 4 lanes: lanes are refilled many times
    res = multistart.minimize_many(_weighted_mean, starts, dict(y=y, w=w), lanes=4,
                                   tol=bl.Tolerances(gtol=1e-5, ftol=0.0, max_iter=200))
    expect = (w * y).sum(1) / w.sum(1)
    assert res.x.shape == (7, 13, 1)
    np.testing.assert_allclose(res.x[..., 0], np.broadcast_to(expect[:, None], (7, 13)), atol=1e-4)
    assert res.converged.all()
    assert (res.n_iter >= 1).all()


def test_scheduler_accepts_starts_per_resample_and_traces_once():
    rows = dict(y=np.array([[1.0, 3.0], [10.0, 20.0]], np.float32), w=np.ones((2, 2), np.float32))
    starts = np.array([[[0.0], [5.0]], [[100.0], [-3.0]]], np.float32)
    before = multistart.compiled_variants()
    for _ in range(3):
        res = multistart.minimize_many(_weighted_mean, starts, rows)
    assert multistart.compiled_variants() == before + 1  # one compile for three calls
    np.testing.assert_allclose(res.x[..., 0], [[2.0, 2.0], [15.0, 15.0]], atol=1e-4)


def test_scheduler_rejects_inconsistent_shapes():
    with pytest.raises(ValueError, match="same leading"):
        multistart.minimize_many(_weighted_mean, np.zeros((3, 1), np.float32),
                                 dict(y=np.zeros((2, 4)), w=np.zeros((3, 4))))
    with pytest.raises(ValueError, match=r"starts must be"):
        multistart.minimize_many(_weighted_mean, np.zeros((3, 3, 1), np.float32),
                                 dict(y=np.zeros((2, 4)), w=np.zeros((2, 4))))
