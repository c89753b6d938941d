"""A dataset cache of C bytes in front of a slower tier (the page cache in front of a disk).

A dataset of ``n`` records of ``record_bytes`` each is read once per epoch in one of four orders:

* ``sequential`` — 0, 1, ..., n-1 every epoch;
* ``random`` — a fresh uniform permutation every epoch;
* ``fixed`` — one permutation, the same every epoch;
* ``windowed`` — "quasi-random": consecutive windows of ``window`` records, visited in order, each
  shuffled afresh every epoch (Grain's window shuffle, a shuffle buffer);

through a cache holding ``c = floor(cache_bytes / record_bytes)`` records, with policy ``lru``
(evict the least recently used), ``fifo`` (evict the oldest insertion; hits do not reorder),
``static`` (keep the first c records read, never evict) or ``none``.

:func:`simulate_cache` is an exact trace-driven simulator (JAX ``lax.scan`` over accesses,
``vmap`` over cache sizes); :func:`closed_form_hit_rate` gives the hit rate where a closed form
exists. Both are per epoch; the first epoch is all compulsory misses. Closed forms (epochs ≥ 2,
c < n):

* every policy but ``none`` with c ≥ n: 1;  ``none``: 0;
* ``static``, any order: c / n (each record is read once per epoch; c of them stay);
* ``lru`` or ``fifo``, ``sequential`` or ``fixed``: 0 (the classic LRU sequential-scan flood);
* ``lru``, ``random``: a record last read with ``a`` records after it, now preceded by ``i``
  records, has stack distance ``a + i − H``, ``H ~ Hypergeometric(n−1, a, i)`` (the overlap);
  it hits iff that distance is below c. Averaged over uniform ``a``, ``i``:
  ``(1/n²) Σ_a Σ_i P(a + i − H ≤ c − 1)``, computed exactly for n ≤ 400 and otherwise by the
  large-n limit ``γ + (1 − γ) ln(1 − γ)`` with ``γ = c / n`` (derived from the same picture with
  positions as uniform fractions x, y: hit iff 1 − (1 − x)(1 − y) < γ);
* ``lru``, ``windowed`` (n divisible by the window w): every other window is read once in
  between, so the distance gains ``n − w``: the ``random`` formula with n → w and c → c − (n − w);
* ``fifo`` with ``random`` or ``windowed`` orders: no closed form known (NaN).

Records have one size; variable sizes are not modelled.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from memsim.distributions import ConfigError

POLICIES = ("lru", "fifo", "static", "none")
PATTERNS = ("sequential", "random", "fixed", "windowed")
MAX_TRACE_RECORDS = 50_000  # the LRU trace costs O(epochs · n²) work


@dataclasses.dataclass(frozen=True)
class CacheConfig:
    """A dataset, a cache and an access pattern.

    Example:
        >>> CacheConfig(dataset_records=1000, record_bytes=4096, cache_bytes=2048000).capacity_records
        500
        >>> CacheConfig(dataset_records=0, record_bytes=1, cache_bytes=1)
        Traceback (most recent call last):
        ...
        memsim.knobs.ConfigError: dataset_records=0: must be a positive integer (records in the dataset)
    """

    dataset_records: int = 1000
    record_bytes: float = 3072.0
    cache_bytes: float = 1536000.0
    policy: str = "lru"
    pattern: str = "random"
    window: int = 0
    epochs: int = 3
    seed: int = 0

    def __post_init__(self):
        _check_int("dataset_records", self.dataset_records, 1, "records in the dataset")
        _check_int("epochs", self.epochs, 1, "epochs to simulate")
        _check_int("seed", self.seed, 0, "random seed")
        _check_int("window", self.window, 0, "records per window of the windowed order")
        if not _finite(self.record_bytes) or self.record_bytes <= 0:
            raise ConfigError(f"record_bytes={self.record_bytes!r}: must be a finite number > 0")
        if not _finite(self.cache_bytes) or self.cache_bytes < 0:
            raise ConfigError(f"cache_bytes={self.cache_bytes!r}: must be a finite number >= 0")
        if self.policy not in POLICIES:
            raise ConfigError(f"policy={self.policy!r}: expected one of {POLICIES}")
        if self.pattern not in PATTERNS:
            raise ConfigError(f"pattern={self.pattern!r}: expected one of {PATTERNS}")
        if self.pattern == "windowed" and not 1 <= self.window <= self.dataset_records:
            raise ConfigError(f"window={self.window!r}: the windowed order needs 1 <= window <= "
                              f"dataset_records ({self.dataset_records})")

    @property
    def capacity_records(self) -> int:
        """Whole records that fit in the cache."""
        return int(self.cache_bytes // self.record_bytes)


def _finite(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) and math.isfinite(x)


def _check_int(name, value, lo, what):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ConfigError(f"{name}={value!r}: must be {'a positive' if lo == 1 else 'an'} integer"
                          f"{'' if lo == 1 else f' >= {lo}'} ({what})")


# ----------------------------------------------------------------------------- access orders

def access_order(dataset_records: int, pattern: str, epochs: int, window: int = 0,
                 seed: int = 0) -> np.ndarray:
    """Record ids read in each epoch, shape (epochs, dataset_records).

    Example:
        >>> access_order(4, "sequential", 2).tolist()
        [[0, 1, 2, 3], [0, 1, 2, 3]]
        >>> o = access_order(6, "windowed", 1, window=3)
        >>> sorted(o[0, :3].tolist()), sorted(o[0, 3:].tolist())
        ([0, 1, 2], [3, 4, 5])
    """
    cfg = CacheConfig(dataset_records=dataset_records, pattern=pattern, epochs=epochs, window=window,
                      seed=seed)
    n = cfg.dataset_records
    rng = np.random.default_rng(cfg.seed)
    if pattern == "sequential":
        return np.tile(np.arange(n), (epochs, 1))
    if pattern == "fixed":
        return np.tile(rng.permutation(n), (epochs, 1))
    if pattern == "random":
        return np.stack([rng.permutation(n) for _ in range(epochs)])
    out = np.empty((epochs, n), dtype=np.int64)
    for e in range(epochs):
        for s in range(0, n, window):
            out[e, s:s + window] = s + rng.permutation(min(window, n - s))
    return out


# ------------------------------------------------------------------------- trace simulation

@functools.partial(jax.jit, static_argnames=("n",))
def _lru_dist(order, n):
    last0 = jnp.full((n,), -1, jnp.int32)

    def step(last, tx):
        t, x = tx
        prev = last[x]
        dist = jnp.where(prev < 0, -1, jnp.sum(last > prev).astype(jnp.int32))
        return last.at[x].set(t), dist

    _, d = jax.lax.scan(step, last0, (jnp.arange(order.shape[0], dtype=jnp.int32), order))
    return d


@functools.partial(jax.jit, static_argnames=("n", "policy"))
def _queue_hits(order, caps, n, policy):
    """FIFO or static hits per access for every capacity in ``caps`` (vmapped)."""

    def one(cap):
        state = (jnp.zeros((n,), bool), jnp.zeros((n,), jnp.int32), jnp.int32(0), jnp.int32(0))

        def step(state, x):
            inc, queue, head, count = state
            hit = inc[x]
            miss = ~hit
            if policy == "fifo":
                evict = miss & (count >= cap) & (cap > 0)
                victim = queue[head % n]
                inc = inc.at[victim].set(jnp.where(evict, False, inc[victim]))
                head = head + evict
                count = count - evict
                insert = miss & (cap > 0)
            else:  # static: fill once, never evict
                insert = miss & (count < cap)
            slot = (head + count) % n
            queue = queue.at[slot].set(jnp.where(insert, x, queue[slot]))
            inc = inc.at[x].set(inc[x] | insert)
            count = count + insert
            return (inc, queue, head, count), hit

        return jax.lax.scan(step, state, order)[1]

    return jax.vmap(one)(caps)


def trace_hits(order: np.ndarray, capacities: Sequence[int], policy: str) -> np.ndarray:
    """Hits per epoch for each capacity, by exact trace-driven simulation.

    Args:
        order: record ids, shape (epochs, n) (every record once per epoch, or any trace).
        capacities: cache sizes in records.
        policy: one of ``POLICIES``.

    Returns:
        int array (len(capacities), epochs).

    Example:
        >>> trace_hits(access_order(10, "sequential", 3), [5, 10], "lru").tolist()
        [[0, 0, 0], [0, 10, 10]]
    """
    if policy not in POLICIES:
        raise ConfigError(f"policy={policy!r}: expected one of {POLICIES}")
    order = np.asarray(order)
    if order.ndim != 2 or order.size == 0:
        raise ConfigError(f"order shape {order.shape}: expected (epochs, accesses) with accesses > 0")
    caps = np.asarray(list(capacities), dtype=np.int64)
    if caps.size == 0:
        raise ConfigError("capacities=[]: give at least one cache size")
    if np.any(caps < 0):
        raise ConfigError(f"capacities contain {int(caps[caps < 0][0])}: must be >= 0 records")
    epochs, per = order.shape
    n = int(order.max()) + 1
    if policy == "none":
        return np.zeros((len(caps), epochs), dtype=np.int64)
    flat = jnp.asarray(order.ravel(), jnp.int32)
    if policy == "lru":
        if n > MAX_TRACE_RECORDS:
            raise ConfigError(f"dataset_records={n}: the LRU trace costs O(epochs·n²); use at most "
                              f"{MAX_TRACE_RECORDS} records, or closed_form_hit_rate")
        d = np.asarray(_lru_dist(flat, n)).reshape(epochs, per)
        hits = (d[None] >= 0) & (d[None] < caps[:, None, None])
    else:
        hits = np.asarray(_queue_hits(flat, jnp.asarray(np.minimum(caps, n), jnp.int32), n, policy))
        hits = hits.reshape(len(caps), epochs, per)
    return hits.sum(-1).astype(np.int64)


# ----------------------------------------------------------------------------- closed forms

EXACT_MAX_RECORDS = 400  # the exact double sum costs O(m²) hypergeometric tails


@functools.lru_cache(maxsize=4096)
def _lru_permutation_hit_rate(m: int, c: int) -> float:
    """LRU hit rate when each epoch reads m records in a fresh uniform order, capacity c.

    Exact double sum for m <= EXACT_MAX_RECORDS; above, the large-m limit (its error is about
    3e-4 at m = 1000, c = m/2, and shrinks like 1/m).
    """
    if c <= 0:
        return 0.0
    if c >= m:
        return 1.0
    if m > EXACT_MAX_RECORDS:
        g = c / m
        return g + (1 - g) * math.log1p(-g)
    from scipy.stats import hypergeom

    a = np.arange(m)[:, None]
    i = np.arange(m)[None, :]
    # hit iff a + i - H <= c - 1  <=>  H >= a + i - c + 1
    k = a + i - c + 1
    p = hypergeom.sf(k - 1, m - 1, a, i)  # P(H >= k)
    p = np.where(k <= 0, 1.0, p)
    return float(p.mean())


def closed_form_hit_rate(dataset_records: int, capacity_records: int, policy: str, pattern: str,
                         epoch: int, window: int = 0) -> float:
    """Expected hit rate in ``epoch`` (1-based), or NaN where no closed form is known.

    Example:
        >>> closed_form_hit_rate(1000, 500, "static", "random", 2)
        0.5
        >>> closed_form_hit_rate(1000, 999, "lru", "sequential", 2)
        0.0
        >>> round(closed_form_hit_rate(10**6, 5 * 10**5, "lru", "random", 2), 4)  # γ + (1-γ)ln(1-γ)
        0.1534
    """
    n, c = int(dataset_records), int(capacity_records)
    if policy not in POLICIES:
        raise ConfigError(f"policy={policy!r}: expected one of {POLICIES}")
    if pattern not in PATTERNS:
        raise ConfigError(f"pattern={pattern!r}: expected one of {PATTERNS}")
    if policy == "none" or epoch <= 1:
        return 0.0
    if c >= n:
        return 1.0
    if policy == "static":
        return c / n
    if pattern in ("sequential", "fixed"):
        return 0.0
    if policy == "fifo":
        return math.nan
    if pattern == "random":
        return _lru_permutation_hit_rate(n, c)
    if not window or n % window:
        return math.nan  # unequal windows: no single formula
    return _lru_permutation_hit_rate(window, c - (n - window))


# ------------------------------------------------------------------------------ public API

def simulate_cache(config: CacheConfig) -> pd.DataFrame:
    """Per-epoch hits, hit rate and bytes read from the slow tier for one configuration.

    Returns:
        DataFrame, one row per epoch: ``epoch``, ``accesses``, ``hits``, ``hit_rate``,
        ``bytes_from_slow_tier``, ``closed_form_hit_rate`` (NaN where none is known), plus the
        config fields and ``capacity_records``.

    Example:
        >>> df = simulate_cache(CacheConfig(dataset_records=100, record_bytes=1, cache_bytes=50,
        ...                                 policy="static", pattern="random"))
        >>> df.hit_rate.tolist()
        [0.0, 0.5, 0.5]
    """
    return cache_sweep(config.dataset_records, config.record_bytes, [config.cache_bytes],
                       policies=[config.policy], patterns=[config.pattern], epochs=config.epochs,
                       window=config.window, seed=config.seed)


def cache_sweep(dataset_records: int, record_bytes: float, cache_bytes: Sequence[float],
                policies: Sequence[str] = POLICIES, patterns: Sequence[str] = PATTERNS, *,
                epochs: int = 3, window: int = 0, seed: int = 0) -> pd.DataFrame:
    """Trace-driven hit rates for every cache size × policy × pattern, with closed forms beside.

    Args:
        dataset_records: records in the dataset.
        record_bytes: bytes per record.
        cache_bytes: cache sizes to simulate.
        policies: subset of ``POLICIES``.
        patterns: subset of ``PATTERNS`` (``windowed`` needs ``window``).
        epochs: epochs per simulation.
        window: records per window for ``windowed`` (default: dataset_records // 10).
        seed: seed of the random orders (the same orders for every policy and size).

    Returns:
        DataFrame, one row per (pattern, policy, cache size, epoch): ``pattern``, ``policy``,
        ``cache_bytes``, ``capacity_records``, ``cache_fraction`` (capacity / records),
        ``epoch``, ``accesses``, ``hits``, ``hit_rate``, ``bytes_from_slow_tier``,
        ``closed_form_hit_rate``, ``dataset_records``, ``record_bytes``, ``window``, ``seed``.
    """
    if not list(cache_bytes):
        raise ConfigError("cache_bytes=[]: give at least one cache size")
    if not list(policies):
        raise ConfigError("policies=[]: give at least one policy")
    if not list(patterns):
        raise ConfigError("patterns=[]: give at least one pattern")
    if "windowed" in patterns and not window:
        window = max(1, int(dataset_records) // 10)
    cfgs = [CacheConfig(dataset_records=dataset_records, record_bytes=record_bytes, cache_bytes=cb,
                        policy=pol, pattern=pat, window=window if pat == "windowed" else 0,
                        epochs=epochs, seed=seed)
            for pat in patterns for pol in policies for cb in cache_bytes]
    caps = [c.capacity_records for c in cfgs[:len(list(cache_bytes))]]
    rows = []
    for pat in patterns:
        order = access_order(dataset_records, pat, epochs, window if pat == "windowed" else 0, seed)
        for pol in policies:
            hits = trace_hits(order, caps, pol)
            for ci, (cb, cap) in enumerate(zip(cache_bytes, caps)):
                for e in range(epochs):
                    h = int(hits[ci, e])
                    rows.append({
                        "pattern": pat, "policy": pol, "cache_bytes": float(cb), "capacity_records": cap,
                        "cache_fraction": cap / dataset_records, "epoch": e + 1,
                        "accesses": int(dataset_records), "hits": h,
                        "hit_rate": h / dataset_records,
                        "bytes_from_slow_tier": (dataset_records - h) * float(record_bytes),
                        "closed_form_hit_rate": closed_form_hit_rate(
                            dataset_records, cap, pol, pat, e + 1, window if pat == "windowed" else 0),
                        "dataset_records": int(dataset_records), "record_bytes": float(record_bytes),
                        "window": window if pat == "windowed" else 0, "seed": seed,
                    })
    return pd.DataFrame(rows)


def steady_hit_rate(dataset_records: int, record_bytes: float, cache_bytes: float, policy: str = "lru",
                    pattern: str = "random", window: int = 0, seed: int = 0) -> float:
    """Hit rate after the first epoch, for ``PipelineConfig.cache_hit_rate``.

    The closed form where one exists, else the trace-driven mean over epochs 2 and 3.

    Example:
        >>> steady_hit_rate(1000, 4096, 4096 * 250, policy="static")
        0.25
    """
    cfg = CacheConfig(dataset_records=dataset_records, record_bytes=record_bytes, cache_bytes=cache_bytes,
                      policy=policy, pattern=pattern, window=window, epochs=3, seed=seed)
    cf = closed_form_hit_rate(dataset_records, cfg.capacity_records, policy, pattern, 2, window)
    if not math.isnan(cf):
        return cf
    df = simulate_cache(cfg)
    return float(df.loc[df.epoch >= 2, "hit_rate"].mean())
