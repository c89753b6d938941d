"""Service-time shapes and the counter-based random numbers behind them."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import jax
import jax.numpy as jnp

from memsim import distributions as D
from memsim.distributions import Dist, batch_shape_params
from memsim.knobs import ConfigError


def draws(dist: Dist, n_per_item: int, lanes: int = 200_000, item: int = 3, dtype=jnp.float32):
    kind, p = batch_shape_params(dist, np.full(lanes, n_per_item))
    if kind == "gamma" and np.all(p == 1):
        kind = "exp"
    streams = jnp.asarray(D.stream_ids(np.arange(lanes), seed=1))
    key = D.item_key(jnp.int32(item), 1, jnp.uint32(12345))
    out = D.draw(kind, streams, key, jnp.asarray(p, dtype), jnp.asarray(D.unit_table(dist), dtype), dtype)
    return np.asarray(out, dtype=np.float64)


@pytest.mark.parametrize("dist,n,cv", [
    (Dist("exponential"), 1, 1.0), (Dist("exponential"), 16, 0.25), (Dist("gamma", cv=0.5), 1, 0.5),
    (Dist("gamma", cv=2.0), 1, 2.0), (Dist("gamma", cv=0.5), 4, 0.25), (Dist("lognormal", cv=0.3), 1, 0.3),
    (Dist("lognormal", cv=1.0), 4, 0.5), (Dist("deterministic"), 8, 0.0)])
def test_unit_mean_and_the_coefficient_of_variation_of_the_batch_sum(dist, n, cv):
    x = draws(dist, n)
    se_mean = max(cv, 1e-9) / np.sqrt(len(x))
    assert abs(x.mean() - 1) < 5 * se_mean + 1e-7
    assert x.std() == pytest.approx(cv, rel=0.03, abs=1e-7)


@pytest.mark.parametrize("dist,ref", [(Dist("exponential"), stats.expon()),
                                      (Dist("gamma", cv=0.5), stats.gamma(4, scale=0.25)),
                                      (Dist("gamma", cv=2.0), stats.gamma(0.25, scale=4.0)),
                                      (Dist("lognormal", cv=0.5), stats.lognorm(np.sqrt(np.log(1.25)),
                                                                                scale=np.exp(-np.log(1.25) / 2)))])
def test_whole_distribution_matches_by_kolmogorov_smirnov(dist, ref):
    x = draws(dist, 1, lanes=50_000)
    assert stats.kstest(x, ref.cdf).pvalue > 1e-3


def test_empirical_resamples_the_measured_times_rescaled_to_unit_mean():
    times = [0.01, 0.02, 0.02, 0.05]
    x = draws(Dist.empirical(times), 64)  # empirical times are per item already: not summed
    vals, counts = np.unique(np.round(x, 6), return_counts=True)
    np.testing.assert_allclose(vals, np.round(np.array([0.01, 0.02, 0.05]) / 0.025, 6))
    np.testing.assert_allclose(counts / len(x), [0.25, 0.5, 0.25], atol=0.01)


def test_uniforms_are_uniform_and_streams_independent():
    streams = jnp.asarray(D.stream_ids(np.arange(100_000), seed=0))
    u = np.asarray(D.uniform(streams, D.item_key(jnp.int32(0), 0, jnp.uint32(9)), jnp.float32), np.float64)
    assert 0 < u.min() and u.max() < 1
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    v = np.asarray(D.uniform(streams, D.item_key(jnp.int32(1), 0, jnp.uint32(9)), jnp.float32), np.float64)
    w = np.asarray(D.uniform(streams, D.item_key(jnp.int32(0), 1, jnp.uint32(9)), jnp.float32), np.float64)
    for a, b in ((u, v), (u, w), (u[:-1], u[1:])):  # next item, next stage, neighbouring stream
        assert abs(np.corrcoef(a, b)[0, 1]) < 5 / np.sqrt(len(a))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_lognormal_draws_are_the_exact_quantile_of_their_uniforms(dtype):
    # the draw is exp(σ Φ⁻¹(u) − σ²/2) of the lane's uniform; compare with scipy in float64,
    # in the tails too (the 23-bit grid reaches u = 2**-24)
    with jax.enable_x64(dtype == jnp.float64):
        streams = jnp.asarray(D.stream_ids(np.arange(200_000), seed=3))
        key = D.item_key(jnp.int32(7), 2, jnp.uint32(11))
        sigma = 0.4
        u = np.asarray(D.uniform(streams, key, dtype), np.float64)
        got = np.asarray(D.draw("lognormal", streams, key, jnp.full(streams.shape, sigma, dtype), None, dtype),
                         np.float64)
        edge = np.asarray(D.draw("lognormal", jnp.zeros(2, jnp.uint32), jnp.uint32(0), jnp.full(2, sigma, dtype),
                                 None, dtype))
    want = np.exp(sigma * stats.norm.ppf(u) - 0.5 * sigma**2)
    np.testing.assert_allclose(got, want, rtol=2e-6 if dtype == jnp.float32 else 1e-12)
    assert np.isfinite(edge).all()


def test_parse_and_errors():
    assert Dist.parse("gamma:0.25") == Dist("gamma", cv=0.25)
    assert str(Dist.parse(str(Dist("lognormal", cv=0.3)))) == "lognormal:0.3"
    with pytest.raises(ConfigError, match="weibull"):
        Dist.parse("weibull")
    with pytest.raises(ConfigError, match="cv"):
        Dist.parse("gamma:abc")
    with pytest.raises(ConfigError, match="-1"):
        Dist("gamma", cv=-1.0)
    with pytest.raises(ConfigError, match="samples"):
        Dist.empirical([])
    with pytest.raises(ConfigError, match="-0.5"):
        Dist.empirical([1.0, -0.5])
