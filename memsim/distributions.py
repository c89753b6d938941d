"""Service-time distributions for the pipeline simulator, and the random numbers behind them.

A :class:`Dist` is a *shape*: a distribution of unit mean. The stage that uses it supplies the
mean (for example ``batch_size * transform_s``), so one shape serves every configuration of a sweep.

Per-sample shapes are turned into per-batch shapes by :func:`batch_shape_params`, which sums
``n`` independent per-sample times:

* deterministic: exact (``n`` times the mean, no spread);
* exponential and gamma: exact (a sum of ``n`` iid Gamma(α, θ) is Gamma(nα, θ));
* lognormal: Fenton–Wilkinson moment matching (the sum is approximated by the lognormal with the
  same mean and variance; coefficient of variation ``cv / sqrt(n)``) — an approximation;
* empirical: samples are taken to be *per item already* (per batch; ``experiments.loader`` stamps
  per-batch sums), so they are resampled as given and not summed.

Random numbers come from a counter-based integer hash (``lowbias32``, C. Wellons, 2018) of
``(stream, item, stage, seed)``. Every row of a sweep has its own stream (:func:`stream_ids` of
the seed and the row number), and the number for item ``j`` of a stage is a pure function of
(stream, j, stage, seed): a row's numbers do not depend on the tiles, the vmap lanes or the chunks
the simulator packs it into, nor on the other rows beside it, and a seed reproduces them exactly.
Uniforms have 23 bits and lie in ``[2**-24, 1 - 2**-24]``; normal quantiles are
``jax.scipy.special.ndtri`` (absolute error below 1e-6 in float32 on that grid).

Why not ``jax.random`` (threefry) keys with ``fold_in`` per row, item and stage, and
``jax.random.gamma``: measured, they make the simulation several times slower. On this project's
2-core CPU machine, shared with other jobs at the time (load average 3–4, so ±30 %), best of 3
runs of ``memsim.pipeline.sweep`` over 1,728 configurations × 1,000 items (lognormal transform,
gamma:0.2 compute; the drawing replaced, the rest unchanged):

* this hash: 0.14–0.20 s;
* one threefry block per number (the cheapest use of threefry: key (stream, 0), counter the
  item/stage key): 0.98 s;
* ``jax.random.bits(fold_in(fold_in(key(seed), stream), item_stage))``: 1.11 s.

Per draw (256 items × 4,096 lanes, best of 5): uniforms 1.5 ms (hash) vs 193 ms (``fold_in`` +
``jax.random.uniform``); gamma(4) 57 ms (:func:`_gamma_unit`, Marsaglia–Tsang on hash uniforms,
fixed tries) vs 1,101 ms (``jax.random.gamma``, a rejection ``while_loop`` per lane). The hash and
the fixed-try gamma sampler are kept for that reason; the statistical tests
(``tests/memsim/test_distributions.py``) check their uniformity, independence and moments.
Normal quantiles need no home-made approximation: ``ndtri`` was not measurably slower than a
one-logarithm float32 erfinv (M. Giles, 2011) in the same sweep at 2,000 items (0.58–0.81 s vs
0.67–0.80 s, same shared machine); ``jax.scipy.special.erfinv(2u − 1)`` is as fast but loses 3e-4
to cancellation near ``u = 1`` in float32.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtri

KINDS = ("deterministic", "exponential", "gamma", "lognormal", "empirical")

# Sampler kinds after per-batch aggregation; static for one compiled simulation.
SAMPLERS = ("det", "exp", "gamma", "lognormal", "empirical")


from memsim.knobs import ConfigError  # noqa: F401 — re-exported: the one error for bad input


@dataclasses.dataclass(frozen=True)
class Dist:
    """A unit-mean service-time shape.

    Args:
        kind: one of ``deterministic``, ``exponential``, ``gamma``, ``lognormal``, ``empirical``.
        cv: coefficient of variation (std / mean) for ``gamma`` and ``lognormal``; ignored (and
            implied) for the others (0 for deterministic, 1 for exponential).
        samples: measured times for ``empirical``; rescaled to unit mean, resampled uniformly.

    Example:
        >>> Dist.parse("lognormal:0.5")
        Dist(kind='lognormal', cv=0.5, samples=())
        >>> str(Dist("gamma", cv=0.25))
        'gamma:0.25'
    """

    kind: str = "deterministic"
    cv: float = 0.0
    samples: tuple = ()

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"dist kind={self.kind!r}: unknown distribution; use one of {KINDS}")
        if not isinstance(self.cv, (int, float)) or not math.isfinite(self.cv) or self.cv < 0:
            raise ConfigError(f"dist cv={self.cv!r}: must be a finite number >= 0")
        if self.kind in ("gamma", "lognormal") and self.cv <= 0:
            raise ConfigError(f"dist cv={self.cv!r}: {self.kind} needs cv > 0 "
                              f"(use kind='deterministic' for no spread)")
        if self.kind == "empirical":
            s = tuple(float(x) for x in self.samples)
            if len(s) == 0:
                raise ConfigError("dist samples=(): empirical needs at least one measured time")
            bad = [x for x in s if not math.isfinite(x) or x < 0]
            if bad:
                raise ConfigError(f"dist samples contain {bad[0]!r}: times must be finite and >= 0")
            if sum(s) <= 0:
                raise ConfigError("dist samples are all zero: an empirical shape needs a positive mean")
            object.__setattr__(self, "samples", s)
        elif self.samples:
            raise ConfigError(f"dist samples given for kind={self.kind!r}: only empirical takes samples")

    def __str__(self) -> str:
        if self.kind in ("gamma", "lognormal"):
            return f"{self.kind}:{self.cv:g}"
        if self.kind == "empirical":
            return f"empirical:n={len(self.samples)}"
        return self.kind

    @property
    def item_cv(self) -> float:
        """Coefficient of variation of one draw (before any per-batch summing)."""
        if self.kind == "deterministic":
            return 0.0
        if self.kind == "exponential":
            return 1.0
        if self.kind == "empirical":
            s = np.asarray(self.samples)
            return float(s.std() / s.mean())
        return float(self.cv)

    @classmethod
    def parse(cls, spec) -> "Dist":
        """A Dist from a Dist or a string ``kind`` or ``kind:cv`` (as ``str(dist)`` writes it)."""
        if isinstance(spec, Dist):
            return spec
        if not isinstance(spec, str):
            raise ConfigError(f"dist={spec!r}: expected a Dist or a string like 'lognormal:0.3'")
        kind, _, rest = spec.partition(":")
        kind = kind.strip()
        if kind == "empirical":
            raise ConfigError(f"dist={spec!r}: build empirical shapes with Dist.empirical(times)")
        if rest:
            try:
                cv = float(rest)
            except ValueError:
                raise ConfigError(f"dist={spec!r}: the part after ':' must be the cv, a number") from None
            return cls(kind, cv=cv)
        return cls(kind)

    @classmethod
    def empirical(cls, times: Sequence[float]) -> "Dist":
        """An empirical shape resampled from measured per-item times (rescaled to unit mean)."""
        return cls("empirical", samples=tuple(float(t) for t in np.asarray(times, float).ravel()))


def as_dist(name: str, value) -> Dist:
    """``Dist.parse`` with the error message naming the config field ``name``."""
    try:
        return Dist.parse(value)
    except ConfigError as e:
        raise ConfigError(f"{name}: {e}") from None


def batch_shape_params(dist: Dist, n: np.ndarray) -> tuple[str, np.ndarray]:
    """The sampler kind and its per-lane parameter for the sum of ``n`` iid unit-mean draws.

    The parameter is the gamma shape α (``gamma``/``exp``), the log-space σ (``lognormal``) or
    unused zeros (``det``/``empirical``). The result is rescaled to unit mean again.

    Args:
        dist: per-sample shape.
        n: number of samples summed per item, one per lane (integers >= 1).

    Returns:
        (sampler kind, parameter array of the shape of ``n``).

    Example:
        >>> kind, a = batch_shape_params(Dist("exponential"), np.array([1, 4]))
        >>> kind, a.tolist()
        ('gamma', [1.0, 4.0])
    """
    n = np.asarray(n, dtype=np.float64)
    if dist.kind == "deterministic":
        return "det", np.zeros_like(n)
    if dist.kind == "exponential":
        return "gamma", n.copy()
    if dist.kind == "gamma":
        return "gamma", n / dist.cv**2
    if dist.kind == "lognormal":
        return "lognormal", np.sqrt(np.log1p(dist.cv**2 / n))
    return "empirical", np.zeros_like(n)


# ----------------------------------------------------------------------------- random numbers

_M1 = 0x7FEB352D
_M2 = 0x846CA68B
_GOLD = 0x9E3779B1


def _mix_np(x):
    """lowbias32 on numpy uint32 arrays (same function as :func:`mix`)."""
    x = np.asarray(x, dtype=np.uint32).copy()
    with np.errstate(over="ignore"):  # uint32 multiplication wraps by design (a hash)
        x ^= x >> np.uint32(16)
        x *= np.uint32(_M1)
        x ^= x >> np.uint32(15)
        x *= np.uint32(_M2)
        x ^= x >> np.uint32(16)
    return x


def mix(x):
    """lowbias32 integer hash of a uint32 array (bijective, good avalanche)."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(_M1)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(_M2)
    return x ^ (x >> 16)


def stream_ids(rows: np.ndarray, seed: int) -> np.ndarray:
    """Per-lane stream ids (uint32) for row numbers ``rows`` under ``seed``."""
    rows = np.asarray(rows, dtype=np.uint64) & np.uint64(0xFFFFFFFF)
    s = _mix_np(np.uint32(seed & 0xFFFFFFFF) ^ np.uint32(0x5BD1E995))
    with np.errstate(over="ignore"):
        return _mix_np(_mix_np(rows.astype(np.uint32) * np.uint32(_GOLD)) ^ s)


def item_key(j, stage: int, seed_key):
    """Scalar uint32 key of item ``j`` (traced) and stage number ``stage`` (static)."""
    j = j.astype(jnp.uint32)
    return mix(j * jnp.uint32(0x85EBCA77) + jnp.uint32((stage * 0xC2B2AE3D) & 0xFFFFFFFF) + seed_key)


def uniform(streams, key, dtype):
    """Uniforms in (0, 1) for each lane: 23-bit grid, never 0 or 1."""
    bits = mix(streams ^ key)
    return ((bits >> 9).astype(dtype) + 0.5) * (1.0 / 8388608.0)


def _gamma_unit(streams, key, alpha, dtype, tries: int = 4):
    """Gamma(alpha)/alpha (unit mean) by Marsaglia & Tsang (2000), a fixed number of tries.

    alpha < 1 uses the boost Gamma(α) = Gamma(α+1)·U^(1/α). If all ``tries`` are rejected
    (probability below 1e-5 for every α), the Wilson–Hilferty approximation is used instead.
    """
    boost = alpha < 1
    a = jnp.where(boost, alpha + 1.0, alpha)
    d = a - 1.0 / 3.0
    c = 1.0 / jnp.sqrt(9.0 * d)
    z_wh = ndtri(uniform(streams, mix(key ^ jnp.uint32(0x1B873593)), dtype))
    wh = jnp.maximum(1.0 - 1.0 / (9.0 * a) + z_wh / jnp.sqrt(9.0 * a), 0.0) ** 3 * a
    out = wh
    done = jnp.zeros(streams.shape, bool)
    for t in range(tries):
        kz = mix(key + jnp.uint32(((2 * t + 1) * 0x27D4EB2F) & 0xFFFFFFFF))
        ku = mix(key + jnp.uint32(((2 * t + 2) * 0x27D4EB2F) & 0xFFFFFFFF))
        z = ndtri(uniform(streams, kz, dtype))
        u = uniform(streams, ku, dtype)
        v = (1.0 + c * z) ** 3
        ok = (v > 0) & (jnp.log(u) < 0.5 * z * z + d - d * v + d * jnp.log(jnp.where(v > 0, v, 1.0)))
        take = ok & ~done
        out = jnp.where(take, d * v, out)
        done = done | ok
    ub = uniform(streams, mix(key ^ jnp.uint32(0xE6546B64)), dtype)
    out = jnp.where(boost, out * ub ** (1.0 / alpha), out)
    return out / alpha


def draw(sampler: str, streams, key, param, table, dtype):
    """One unit-mean draw per lane for a static ``sampler`` kind.

    Args:
        sampler: one of ``SAMPLERS`` (static).
        streams: uint32 lane stream ids.
        key: scalar uint32 item/stage key (from :func:`item_key`).
        param: per-lane gamma shape α or lognormal σ (see :func:`batch_shape_params`).
        table: unit-mean empirical samples (1-D), used by ``empirical`` only.
        dtype: float dtype of the result.
    """
    if sampler == "det":
        return jnp.ones(streams.shape, dtype)
    if sampler == "exp":
        return -jnp.log(uniform(streams, key, dtype))
    if sampler == "gamma":
        return _gamma_unit(streams, key, param, dtype)
    if sampler == "lognormal":
        z = ndtri(uniform(streams, key, dtype))
        return jnp.exp(param * z - 0.5 * param * param)
    if sampler == "empirical":
        n = table.shape[0]
        idx = jnp.minimum((uniform(streams, key, dtype) * n).astype(jnp.int32), n - 1)
        return table[idx]
    raise ConfigError(f"sampler={sampler!r}: unknown; use one of {SAMPLERS}")


def unit_table(dist: Dist) -> np.ndarray:
    """The empirical samples rescaled to unit mean (a one-element table for other kinds)."""
    if dist.kind != "empirical":
        return np.ones(1)
    s = np.asarray(dist.samples, dtype=np.float64)
    return s / s.mean()
