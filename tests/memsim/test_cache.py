"""memsim.cache: the trace-driven simulator against a plain-Python reference and the closed forms."""

from __future__ import annotations

import math
from collections import OrderedDict, deque

import numpy as np
import pytest

from memsim.cache import (CacheConfig, access_order, cache_sweep, closed_form_hit_rate, simulate_cache,
                          steady_hit_rate, trace_hits)
from memsim.knobs import ConfigError


def reference_hits(order: np.ndarray, cap: int, policy: str) -> list[int]:
    """Textbook caches in plain Python, hits per epoch."""
    out = []
    lru, fifo, fifo_set, static = OrderedDict(), deque(), set(), set()
    for epoch in order:
        h = 0
        for x in epoch.tolist():
            if policy == "lru":
                if x in lru:
                    h += 1
                    lru.move_to_end(x)
                elif cap > 0:
                    if len(lru) >= cap:
                        lru.popitem(last=False)
                    lru[x] = True
            elif policy == "fifo":
                if x in fifo_set:
                    h += 1
                elif cap > 0:
                    if len(fifo) >= cap:
                        fifo_set.discard(fifo.popleft())
                    fifo.append(x)
                    fifo_set.add(x)
            elif policy == "static":
                if x in static:
                    h += 1
                elif len(static) < cap:
                    static.add(x)
        out.append(h)
    return out


@pytest.mark.parametrize("pattern", ["sequential", "random", "fixed", "windowed"])
@pytest.mark.parametrize("policy", ["lru", "fifo", "static"])
def test_trace_simulator_matches_textbook_caches_exactly(pattern, policy):
    order = access_order(120, pattern, 4, window=30 if pattern == "windowed" else 0, seed=3)
    caps = [0, 1, 17, 60, 95, 119, 120, 150]
    got = trace_hits(order, caps, policy)
    for c, row in zip(caps, got):
        assert row.tolist() == reference_hits(order, c, policy), (pattern, policy, c)


def test_arbitrary_traces_with_rereads_match_too():
    rng = np.random.default_rng(0)
    order = rng.integers(0, 40, size=(3, 200))  # not permutations: skewed re-reads within an epoch
    for policy in ("lru", "fifo", "static"):
        got = trace_hits(order, [5, 20], policy)
        for c, row in zip([5, 20], got):
            assert row.tolist() == reference_hits(order, c, policy)


def test_lru_sequential_scan_hit_rate_is_zero_after_the_first_epoch():
    df = simulate_cache(CacheConfig(dataset_records=500, record_bytes=4096, cache_bytes=4096 * 499,
                                    policy="lru", pattern="sequential", epochs=4))
    assert df.hit_rate.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert df.bytes_from_slow_tier.tolist() == [500 * 4096.0] * 4
    full = simulate_cache(CacheConfig(dataset_records=500, record_bytes=4096, cache_bytes=4096 * 500,
                                      policy="lru", pattern="sequential", epochs=3))
    assert full.hit_rate.tolist() == [0.0, 1.0, 1.0]


def test_closed_forms_equal_the_trace_where_they_are_exact():
    df = cache_sweep(300, 1.0, [0, 30, 150, 299, 300, 450], epochs=3, window=50, seed=1)
    exact = df[(df.policy.isin(["static", "none"])) | (df.pattern.isin(["sequential", "fixed"]))
               | (df.cache_fraction >= 1) | (df.epoch == 1)]
    assert len(exact) > 100
    np.testing.assert_allclose(exact.hit_rate, exact.closed_form_hit_rate, atol=0)


@pytest.mark.parametrize("n,c,window", [(200, 100, 0), (200, 150, 0), (200, 60, 0), (240, 220, 40)])
def test_lru_shuffled_orders_match_the_closed_form(n, c, window):
    pattern = "windowed" if window else "random"
    epochs = 40
    order = access_order(n, pattern, epochs, window=window, seed=5)
    hits = trace_hits(order, [c], "lru")[0, 1:] / n  # epochs 2..40
    want = closed_form_hit_rate(n, c, "lru", pattern, 2, window)
    se = hits.std(ddof=1) / math.sqrt(len(hits))
    assert 0 < want < 1
    assert abs(hits.mean() - want) < 4 * se + 1e-3, (hits.mean(), want, se)


def test_lru_random_closed_form_approaches_the_large_n_limit():
    g = 0.5
    limit = g + (1 - g) * math.log(1 - g)
    lru = lambda n, c: closed_form_hit_rate(n, c, "lru", "random", 2)  # noqa: E731
    assert lru(400, 200) == pytest.approx(limit, abs=2e-3)
    assert lru(100, 50) - limit == pytest.approx(0.25 / 100, rel=0.3)
    assert lru(10**6, 5 * 10**5) == pytest.approx(limit, abs=1e-6)
    # exact at every size: the finite sum (1/n) Σ_{p<c} (c − p)/(n − p), beyond 400 records too
    for n, c in ((7, 3), (1024, 512), (5000, 1234)):
        direct = sum((c - p) / (n - p) for p in range(c)) / n
        assert lru(n, c) == pytest.approx(direct, rel=1e-9)
    # windowed: the other n − w records take n − w slots; with fewer slots than that, no hits
    assert closed_form_hit_rate(240, 220, "lru", "windowed", 2, window=40) == pytest.approx(
        sum((20 - p) / (40 - p) for p in range(20)) / 40, rel=1e-9)
    assert closed_form_hit_rate(240, 100, "lru", "windowed", 2, window=40) == 0.0
    assert math.isnan(closed_form_hit_rate(100, 10, "fifo", "random", 2))  # none known
    assert math.isnan(closed_form_hit_rate(100, 95, "lru", "windowed", 2, window=30))  # unequal windows


def test_orders_are_permutations_and_windows_stay_in_place():
    for pattern in ("sequential", "random", "fixed", "windowed"):
        o = access_order(100, pattern, 3, window=25, seed=0)
        assert all(sorted(e.tolist()) == list(range(100)) for e in o)
    w = access_order(100, "windowed", 2, window=25, seed=0)
    assert all(set(w[e, s:s + 25].tolist()) == set(range(s, s + 25)) for e in range(2) for s in range(0, 100, 25))
    assert not np.array_equal(w[0], w[1])
    f = access_order(100, "fixed", 2, seed=0)
    assert np.array_equal(f[0], f[1]) and not np.array_equal(f[0], np.arange(100))


def test_steady_hit_rate_for_the_pipeline():
    assert steady_hit_rate(1000, 1.0, 250.0, policy="static") == 0.25
    assert steady_hit_rate(1000, 1.0, 999.0, policy="lru", pattern="sequential") == 0.0
    r = steady_hit_rate(200, 1.0, 100.0, policy="fifo", pattern="random")  # no closed form: traced
    assert 0.1 < r < 0.4


@pytest.mark.parametrize("kw,msg", [
    (dict(dataset_records=0), "dataset_records=0"), (dict(cache_bytes=-1.0), "cache_bytes=-1.0"),
    (dict(record_bytes=0.0), "record_bytes=0.0"), (dict(policy="arc"), "policy='arc'"),
    (dict(pattern="zipf"), "pattern='zipf'"), (dict(pattern="windowed", window=0), "window=0"),
    (dict(epochs=0), "epochs=0")])
def test_bad_cache_configs_name_field_and_value(kw, msg):
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        CacheConfig(**kw)


def test_bad_sweeps():
    with pytest.raises(ConfigError, match="cache_bytes=\\[\\]"):
        cache_sweep(100, 1.0, [])
    with pytest.raises(ConfigError, match="capacities contain -1"):
        trace_hits(access_order(10, "sequential", 1), [-1], "lru")
    with pytest.raises(ConfigError, match="policy='mru'"):
        trace_hits(access_order(10, "sequential", 1), [1], "mru")
