"""Where should a dataset live, and how fast can the read stage go from there?

Given a :class:`~memsim.hierarchy.Hierarchy`, a dataset size, a sample size and an access pattern
(``"sequential"`` scans, or ``"shuffle"``: a fresh random permutation every epoch), the planner
says which tiers can hold the dataset, the page-cache hit rate, the samples/s the read stage
sustains and the time per epoch of the read stage.

Page-cache hit rate (per epoch, in steady state, i.e. from the second epoch on), with C samples
fitting in the cache and D samples in the dataset:

- C >= D: every sample is cached after the first epoch, h = 1 (the first epoch is cold, h = 0).
- Upper bound for any demand-paging policy, either pattern: h <= C / D. Within one epoch every
  sample is read once, so a hit needs the sample to have been cached before the epoch began, and
  at most C were. (A policy that pins a fixed C-sample subset reaches it.)
- LRU, sequential scans: h = 0 when C < D, the classic sequential-flooding case: each sample is
  evicted before the scan returns to it.
- LRU, fresh shuffle each epoch: at the start of an epoch the cache holds the last C samples of
  the previous one. At position p of the new epoch (0-based) the p samples already read this epoch
  fill the most recent slots, the C − p left over from the previous epoch are all still unread,
  and the sample at p is uniform over the D − p unread ones, so P(hit at p) = (C − p)/(D − p) for
  p < C. Summing, with H_n the harmonic numbers,

      h_LRU = (1/D) Σ_{p<C} (C − p)/(D − p) = (C − (D − C)(H_D − H_{D−C})) / D  ≈ (C/D)² / 2.

  (Derived here; tests check it against a simulated LRU.)

These are closed forms labelled as such (``hit_rate_source``); Linux's page cache is not a pure
LRU (its active/inactive lists protect pages read twice), so measured hit rates can exceed the
LRU figure but not the C / D bound. A trace-driven simulator can replace the closed form: pass
``hit_rate=`` and ``hit_rate_source=`` to :func:`plan_placement`.

Read time of one sample of s bytes (Hockney α-β terms from the hierarchy's links):

- cache hit: t_hit = α_c + s / B_c over the link cache → reader (a ``read()`` copying out of the
  page cache).
- cache miss: storage → cache → reader, pipelined (the kernel copies pages out as they arrive).
  Shuffled: every sample is its own storage request, t_miss = α_s + α_c + s / min(B_s, B_c).
  Sequential: the dataset is taken to be one contiguous file; the kernel's read-ahead keeps the
  device streaming ahead of the reader, so the storage latency α_s is paid once per scan, not per
  sample: t_miss = α_c + s / min(B_s, B_c), plus α_s per epoch. (Many small files would each
  cost a seek: plan those as ``"shuffle"``.)
- mean: t = h · t_hit + (1 − h) · t_miss; with k requests in flight (``concurrency``), latency
  overlaps but bandwidth is shared (Little's law): samples/s = min(k / t, 1 / t_bw), where t_bw
  is t with every α set to 0.
- a dataset resident in a memory tier (an array in RAM or in device memory) is read with that
  tier's self-link (ram → ram, device → device): t = α + s / B, no cache involved.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import pandas as pd
from scipy.special import digamma

from memsim.hierarchy import Hierarchy, HierarchyError
from memsim.units import format_bytes, format_rate

AccessPattern = Literal["sequential", "shuffle"]


class PlacementError(ValueError):
    """An impossible placement question; the message names the value and what to change."""


def _harmonic(n: float) -> float:
    # H_n = ψ(n + 1) + γ; only differences are used, so γ cancels.
    return float(digamma(n + 1.0))


def hit_rate_upper_bound(cache_items: float, dataset_items: float) -> float:
    """min(1, C / D): no demand-paging policy hits more often in one pass over all D items.

    Example:
        >>> hit_rate_upper_bound(50, 100), hit_rate_upper_bound(200, 100)
        (0.5, 1.0)
    """
    _check_items(cache_items, dataset_items)
    return min(1.0, cache_items / dataset_items)


def lru_sequential_hit_rate(cache_items: float, dataset_items: float) -> float:
    """Steady-state LRU hit rate of repeated sequential scans: 1 if C >= D, else 0.

    Example:
        >>> lru_sequential_hit_rate(99, 100), lru_sequential_hit_rate(100, 100)
        (0.0, 1.0)
    """
    _check_items(cache_items, dataset_items)
    return 1.0 if cache_items >= dataset_items else 0.0


def lru_shuffle_hit_rate(cache_items: float, dataset_items: float) -> float:
    """Steady-state LRU hit rate when every epoch reads all D items in a fresh random order.

    h = (C − (D − C)(H_D − H_{D−C})) / D for C < D (derivation in the module docstring), 1 for
    C >= D. For C << D it is about (C/D)² / 2, far below the C/D often quoted.

    Args:
        cache_items: C, items the cache holds (>= 0).
        dataset_items: D, items in the dataset (> 0).

    Returns:
        The expected fraction of reads served from the cache, per epoch, from epoch 2 on.

    Example:
        >>> round(lru_shuffle_hit_rate(1, 2), 6)     # p=0: (1-0)/(2-0)
        0.25
        >>> round(lru_shuffle_hit_rate(500, 1000), 4), round(lru_shuffle_hit_rate(500, 1000) / 0.5, 2)
        (0.1537, 0.31)
    """
    _check_items(cache_items, dataset_items)
    c, d = math.floor(cache_items), float(dataset_items)
    if c >= d:
        return 1.0
    if c <= 0:
        return 0.0
    hits = c - (d - c) * (_harmonic(d) - _harmonic(d - c))
    return max(0.0, min(1.0, hits / d))


def _check_items(c: float, d: float) -> None:
    if not (isinstance(c, (int, float)) and math.isfinite(c) and c >= 0):
        raise PlacementError(f"cache_items={c!r}: expected a finite count >= 0")
    if not (isinstance(d, (int, float)) and math.isfinite(d) and d > 0):
        raise PlacementError(f"dataset_items={d!r}: expected a finite count > 0")


@dataclasses.dataclass(frozen=True)
class Placement:
    """The planner's answer for one storage tier. Times in seconds, rates per second."""

    hierarchy: str
    storage: str
    holders: tuple[str, ...]
    access: str
    dataset_bytes: float
    sample_bytes: float
    n_samples: float
    reader_tier: str
    reader_capacity_bytes: float
    cache_tier: str | None
    cache_bytes: float
    hit_rate: float
    hit_rate_first_epoch: float
    hit_rate_source: str
    hit_rate_upper_bound: float
    seconds_per_sample: float
    samples_per_s: float
    read_Bps: float
    epoch_s: float
    first_epoch_s: float
    concurrency: int
    limit: str

    def summary(self) -> str:
        """One line a person can read, e.g. for a report.

        Example:
            >>> from memsim.machines import workstation_2020
            >>> p = plan_placement(workstation_2020(), 48e9, 100e3, "shuffle", storage="ssd")
            >>> print(p.summary())  # doctest: +NORMALIZE_WHITESPACE
            dataset = 1.5 × RAM (48 GB) on ssd, shuffled each epoch → page-cache hit rate 0.3
            (closed form, LRU; any policy ≤ 0.67) → read stage sustains 1.05e+04 samples/s
            (1.05 GB/s, latency-bound), 45.8 s per epoch (first epoch 64.5 s)
        """
        ratio = self.dataset_bytes / self.reader_capacity_bytes
        where = f"dataset = {ratio:.3g} × {self.reader_tier.upper()} ({format_bytes(self.dataset_bytes)}) on {self.storage}"
        pattern = "shuffled each epoch" if self.access == "shuffle" else "read sequentially each epoch"
        parts = [where + ", " + pattern]
        if self.cache_tier is not None:
            parts.append(f"page-cache hit rate {self.hit_rate:.2g} ({self.hit_rate_source}; "
                         f"any policy ≤ {self.hit_rate_upper_bound:.2g})")
        else:
            parts.append(f"resident in {self.storage}, no cache")
        tail = (f"read stage sustains {self.samples_per_s:.3g} samples/s ({format_rate(self.read_Bps)}, "
                f"{self.limit}-bound), {self.epoch_s:.3g} s per epoch")
        if self.first_epoch_s != self.epoch_s:
            tail += f" (first epoch {self.first_epoch_s:.3g} s)"
        parts.append(tail)
        return " → ".join(parts)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["holders"] = ",".join(self.holders)
        return d


def _rate(t: float, t_bw: float, k: int) -> tuple[float, str]:
    # samples/s = min(k / t, 1 / t_bw) (Little's law with a bandwidth cap). The label says which
    # term sets it: "bandwidth" when the cap binds or the per-request latency is the smaller part.
    lat_rate, bw_rate = k / t, 1.0 / t_bw
    if lat_rate >= bw_rate or (t - t_bw) <= t_bw:
        return min(lat_rate, bw_rate), "bandwidth"
    return lat_rate, "latency"


def _file_backed(h: Hierarchy, tier: str, cache_tier: str, reader_tier: str) -> bool:
    return (tier != cache_tier and h.has_tier(cache_tier) and h.has_link(tier, cache_tier)
            and h.has_link(cache_tier, reader_tier))


def _resident(h: Hierarchy, tier: str) -> bool:
    return h.has_link(tier, tier)


def readable_tiers(h: Hierarchy, cache_tier: str = "page_cache", reader_tier: str = "ram") -> tuple[str, ...]:
    """Physical tiers the read stage can read a dataset from (file-backed or resident).

    Example:
        >>> from memsim.machines import workstation_2020
        >>> readable_tiers(workstation_2020())
        ('gpu', 'ram', 'ssd', 'hdd')
    """
    return tuple(t.name for t in h.physical_tiers()
                 if _file_backed(h, t.name, cache_tier, reader_tier) or _resident(h, t.name))


def plan_placement(hierarchy: Hierarchy, dataset_bytes: float, sample_bytes: float,
                   access: AccessPattern, storage: str | None = None, *,
                   cache_tier: str = "page_cache", reader_tier: str = "ram",
                   cache_bytes: float | None = None, concurrency: int = 1,
                   hit_rate: float | None = None, hit_rate_source: str = "given") -> Placement:
    """Plans the read stage for a dataset stored in ``storage``.

    Args:
        hierarchy: tiers and links (a preset or ``Hierarchy.from_probes``).
        dataset_bytes: total bytes of the dataset (> 0).
        sample_bytes: bytes read per sample (> 0, <= dataset_bytes).
        access: ``"sequential"`` or ``"shuffle"`` (fresh permutation every epoch).
        storage: tier holding the dataset. None picks the file-backed tier with the highest
            bandwidth among those that can hold it.
        cache_tier: the page-cache tier (file-backed storage is read through it).
        reader_tier: where the loader's samples land (host RAM).
        cache_bytes: bytes of page cache available to the dataset; None means the cache tier's
            whole capacity (an upper estimate: the process and the OS use some of it).
        concurrency: reads in flight (loader workers × per-worker queue depth), >= 1. An HDD
            serves one request at a time: keep 1 there.
        hit_rate: a steady-state hit rate from elsewhere (e.g. a trace-driven cache simulator);
            None uses the closed forms of the module docstring.
        hit_rate_source: label stored with a given ``hit_rate``.

    Returns:
        A :class:`Placement`; ``summary()`` gives one readable line.

    Example:
        >>> from memsim.machines import workstation_2020
        >>> p = plan_placement(workstation_2020(), 8e9, 1e6, "sequential")
        >>> p.storage, p.holders, p.hit_rate, p.hit_rate_source
        ('ssd', ('gpu', 'ram', 'ssd', 'hdd'), 1.0, 'closed form, LRU')
        >>> plan_placement(workstation_2020(), 8e9, 1e6, "random")
        Traceback (most recent call last):
        ...
        memsim.placement.PlacementError: access='random': expected 'sequential' or 'shuffle' (a fresh shuffle every epoch)
    """
    h = hierarchy
    if not isinstance(h, Hierarchy):
        raise PlacementError(f"hierarchy is a {type(h).__name__}; pass a memsim.hierarchy.Hierarchy")
    if access not in ("sequential", "shuffle"):
        raise PlacementError(f"access={access!r}: expected 'sequential' or 'shuffle' (a fresh shuffle every epoch)")
    for key, v in (("dataset_bytes", dataset_bytes), ("sample_bytes", sample_bytes)):
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0):
            raise PlacementError(f"{key}={v!r}: expected a positive number of bytes")
    if sample_bytes > dataset_bytes:
        raise PlacementError(f"sample_bytes={sample_bytes!r} exceeds dataset_bytes={dataset_bytes!r}; "
                             "a sample is part of the dataset")
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise PlacementError(f"concurrency={concurrency!r}: expected an integer >= 1")
    if hit_rate is not None and not (isinstance(hit_rate, (int, float)) and 0.0 <= hit_rate <= 1.0):
        raise PlacementError(f"hit_rate={hit_rate!r}: expected a fraction in [0, 1] or None")
    try:
        reader = h.tier(reader_tier)
    except HierarchyError as e:
        raise PlacementError(f"reader_tier={reader_tier!r}: {e}") from None

    readable = readable_tiers(h, cache_tier, reader_tier)
    holders = tuple(t for t in readable if h.tier(t).capacity_bytes >= dataset_bytes)
    if storage is None:
        files = [t for t in holders if _file_backed(h, t, cache_tier, reader_tier)]
        if not files:
            raise PlacementError(
                f"no file-backed tier of {h.name!r} holds dataset_bytes={dataset_bytes:.4g} "
                f"(tiers that can hold it: {list(holders) or 'none'}; readable tiers: {list(readable)}). "
                "Pass storage= one of the holders, or a smaller dataset")
        storage = max(files, key=lambda t: h.link(t, cache_tier).bandwidth_Bps)
    if storage not in readable:
        raise PlacementError(
            f"storage={storage!r}: the read stage has no path from it to {reader_tier!r} in {h.name!r} "
            f"(it needs links {storage}->{cache_tier} and {cache_tier}->{reader_tier}, or a self-link "
            f"{storage}->{storage}); readable tiers: {list(readable)}")
    cap = h.tier(storage).capacity_bytes
    if dataset_bytes > cap:
        raise PlacementError(
            f"dataset_bytes={dataset_bytes:.4g} does not fit in {storage!r} (capacity {cap:.4g} bytes); "
            f"tiers that can hold it: {list(holders) or 'none'}")

    s = float(sample_bytes)
    n_samples = float(dataset_bytes) / s

    if not _file_backed(h, storage, cache_tier, reader_tier):
        link = h.link(storage, storage)
        t = link.latency_s + s / link.bandwidth_Bps
        t_bw = s / link.bandwidth_Bps
        rate, limit = _rate(t, t_bw, concurrency)
        epoch = n_samples / rate
        return Placement(h.name, storage, holders, access, float(dataset_bytes), s, n_samples,
                         reader_tier, reader.capacity_bytes, None, 0.0, 1.0, 1.0, "resident", 1.0,
                         t, rate, rate * s, epoch, epoch, concurrency, limit)

    cache = h.tier(cache_tier)
    c_bytes = cache.capacity_bytes if cache_bytes is None else cache_bytes
    if not (isinstance(c_bytes, (int, float)) and math.isfinite(c_bytes) and c_bytes >= 0):
        raise PlacementError(f"cache_bytes={cache_bytes!r}: expected bytes >= 0 or None")
    c_items = math.floor(c_bytes / s)
    d_items = max(1.0, n_samples)
    bound = hit_rate_upper_bound(c_items, d_items)
    if hit_rate is None:
        source = "closed form, LRU"
        if access == "sequential":
            hit = lru_sequential_hit_rate(c_items, d_items)
        else:
            hit = lru_shuffle_hit_rate(c_items, d_items)
    else:
        hit, source = float(hit_rate), hit_rate_source

    st, hc = h.link(storage, cache_tier), h.link(cache_tier, reader_tier)
    per_sample_seek = st.latency_s if access == "shuffle" else 0.0
    per_epoch_seek = st.latency_s if access == "sequential" else 0.0
    t_hit = hc.latency_s + s / hc.bandwidth_Bps
    t_miss = per_sample_seek + hc.latency_s + s / min(st.bandwidth_Bps, hc.bandwidth_Bps)
    bw_hit = s / hc.bandwidth_Bps
    bw_miss = s / min(st.bandwidth_Bps, hc.bandwidth_Bps)

    def rate_for(hr: float) -> tuple[float, float, str]:
        t = hr * t_hit + (1 - hr) * t_miss
        t_bw = hr * bw_hit + (1 - hr) * bw_miss
        return (t, *_rate(t, t_bw, concurrency))

    t, rate, limit = rate_for(hit)
    _, first_rate, _ = rate_for(0.0)
    epoch = n_samples / rate + (per_epoch_seek if hit < 1.0 else 0.0)
    first = n_samples / first_rate + per_epoch_seek
    return Placement(h.name, storage, holders, access, float(dataset_bytes), s, n_samples,
                     reader_tier, reader.capacity_bytes, cache_tier, float(c_bytes), hit, 0.0,
                     source, bound, t, rate, rate * s, epoch, first, concurrency, limit)


def compare_placements(hierarchy: Hierarchy, dataset_bytes: float, sample_bytes: float,
                       access: AccessPattern, **kwargs) -> pd.DataFrame:
    """:func:`plan_placement` for every readable tier that can hold the dataset, one row each.

    Rows are sorted fastest first; ``summary`` holds each one's readable line.

    Example:
        >>> from memsim.machines import workstation_2020
        >>> df = compare_placements(workstation_2020(), 48e9, 100e3, "shuffle")
        >>> df["storage"].tolist()
        ['ssd', 'hdd']
        >>> bool(df["samples_per_s"].iloc[0] > 50 * df["samples_per_s"].iloc[1])
        True
    """
    if "storage" in kwargs:
        raise PlacementError("compare_placements plans every tier that can hold the dataset; "
                             "call plan_placement(storage=...) for one tier")
    h = hierarchy
    readable = readable_tiers(h, kwargs.get("cache_tier", "page_cache"), kwargs.get("reader_tier", "ram"))
    holders = [t for t in readable if h.tier(t).capacity_bytes >= dataset_bytes]
    if not holders:
        plan_placement(h, dataset_bytes, sample_bytes, access, storage=readable[0] if readable else None,
                       **kwargs)  # raises the specific error for bad arguments or capacity
    rows = []
    for t in holders:
        p = plan_placement(h, dataset_bytes, sample_bytes, access, storage=t, **kwargs)
        rows.append({**p.to_dict(), "summary": p.summary()})
    return pd.DataFrame(rows).sort_values("samples_per_s", ascending=False, ignore_index=True)
