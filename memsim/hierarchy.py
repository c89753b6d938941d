"""Memory tiers, the links between them, and how long moving n bytes takes.

The cost of a transfer is the Hockney α-β model (R. W. Hockney, "The communication challenge for
MPP: Intel Paragon and Meiko CS-2", Parallel Computing 20(3), 1994):

    t(n) = α + n / B

with α the latency in seconds (``latency_s``) and B the bandwidth in bytes per second
(``bandwidth_Bps``). Much of the literature writes the per-byte cost β = 1 / B (seconds per byte);
this module, and the probe fits, store the bandwidth B itself (``beta_Bps`` in fit tables is B).

A ``Hierarchy`` is a set of ``Tier`` objects (where bytes can live) and ``Link`` objects (how they
move). Chains of links (disk → page cache → pinned buffer → device) are costed either
store-and-forward or pipelined, see :meth:`Hierarchy.chain_time`.

memsim is pure: nothing here reads files or clocks. Measured numbers come in as a DataFrame of
probe fits (:meth:`Hierarchy.from_probes`), written by ``experiments.probes``. Machines described
from spec sheets (``workstation_2020``, ``h100_sxm``, ``h200``) are in :mod:`memsim.machines`; byte
units and their formatting in :mod:`memsim.units`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal, Mapping, Sequence

import jax
import numpy as np
import pandas as pd

ChainMode = Literal["store_and_forward", "pipelined"]
MemoryKind = Literal["pinned_host", "unpinned_host"]


class HierarchyError(ValueError):
    """A tier, link or hierarchy that cannot be right; the message names the value and the fix."""


def _positive(owner: str, key: str, value: Any, unit: str, hint: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise HierarchyError(f"{owner}: {key}={value!r} is not a number; {hint}") from None
    if not math.isfinite(v) or v <= 0:
        raise HierarchyError(
            f"{owner}: {key}={value!r} must be a positive finite number of {unit}; {hint}")
    return v


def _non_negative(owner: str, key: str, value: Any, unit: str, hint: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise HierarchyError(f"{owner}: {key}={value!r} is not a number; {hint}") from None
    if not math.isfinite(v) or v < 0:
        raise HierarchyError(f"{owner}: {key}={value!r} must be a finite number of {unit} >= 0; {hint}")
    return v


def _is_traced(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def _xp(n: Any):
    """jax.numpy for jax arrays (including tracers under jit/vmap), numpy for everything else."""
    if isinstance(n, jax.Array):
        import jax.numpy as jnp
        return jnp
    return np


def _check_bytes(n: Any) -> Any:
    """Rejects negative or NaN byte counts when they are concrete; returns n unchanged."""
    if _is_traced(n):
        return n
    arr = np.asarray(n, dtype=float)
    if np.any(np.isnan(arr)) or np.any(arr < 0):
        raise HierarchyError(
            f"n_bytes={n!r}: byte counts must be >= 0 and not NaN; pass sizes in bytes, e.g. 4096")
    return n


def hockney_time(n_bytes: Any, latency_s: Any, bandwidth_Bps: Any) -> Any:
    """Time to move ``n_bytes`` over one link: t = α + n / B (Hockney 1994).

    Works elementwise on Python floats, numpy arrays and jax arrays (and under ``jax.jit`` /
    ``jax.vmap``, where no value checks are made).

    Args:
        n_bytes: bytes to move, scalar or array, >= 0.
        latency_s: α, the fixed cost per transfer in seconds.
        bandwidth_Bps: B, bytes per second (B = 1/β when β is the per-byte cost).

    Returns:
        Seconds, the shape of ``n_bytes`` broadcast with the parameters.

    Example:
        >>> hockney_time(1e9, 1e-5, 1e9)   # 1 GB over 1 GB/s with 10 µs latency
        1.00001
        >>> hockney_time(np.array([0.0, 2e9]), 0.5, 1e9).tolist()
        [0.5, 2.5]
    """
    return latency_s + _check_bytes(n_bytes) / bandwidth_Bps


@dataclasses.dataclass(frozen=True)
class Tier:
    """A place bytes can live.

    Attributes:
        name: unique within a hierarchy, e.g. ``"ram"``, ``"ssd"``, ``"hbm"``.
        capacity_bytes: how many bytes it holds (> 0).
        bandwidth_Bps: the rate it streams at, bytes/s (> 0); what the pyramid figure plots.
        latency_s: access latency in seconds (>= 0).
        cost_per_GB: purchase cost in US dollars per 10^9 bytes, or None where unknown.
        part_of: the name of the tier whose capacity this one is carved from (the page cache and
            pinned buffers live in RAM), or None for a physical tier.
        source: where the numbers come from (spec sheet, measurement, assumption).

    Example:
        >>> Tier("ram", 32e9, 50e9, 100e-9).capacity_bytes
        32000000000.0
        >>> Tier("ram", 0, 50e9, 100e-9)
        Traceback (most recent call last):
        ...
        memsim.hierarchy.HierarchyError: tier 'ram': capacity_bytes=0 must be a positive finite number of bytes; pass the tier's size in bytes, e.g. 32e9 for 32 GB
    """

    name: str
    capacity_bytes: float
    bandwidth_Bps: float
    latency_s: float
    cost_per_GB: float | None = None
    part_of: str | None = None
    source: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip() or "->" in self.name:
            raise HierarchyError(f"tier name={self.name!r}: give a non-empty name without '->'")
        who = f"tier {self.name!r}"
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)
        set_("capacity_bytes", _positive(who, "capacity_bytes", self.capacity_bytes, "bytes",
                                         "pass the tier's size in bytes, e.g. 32e9 for 32 GB"))
        set_("bandwidth_Bps", _positive(who, "bandwidth_Bps", self.bandwidth_Bps, "bytes/s",
                                        "pass bytes per second, e.g. 3e9 for 3 GB/s"))
        set_("latency_s", _non_negative(who, "latency_s", self.latency_s, "seconds",
                                        "pass seconds, e.g. 100e-9 for 100 ns"))
        if self.cost_per_GB is not None:
            set_("cost_per_GB", _non_negative(who, "cost_per_GB", self.cost_per_GB, "dollars",
                                              "pass dollars per GB, or None if unknown"))

    def time(self, n_bytes: Any) -> Any:
        """Seconds to stream ``n_bytes`` within this tier: latency_s + n / bandwidth_Bps."""
        return hockney_time(n_bytes, self.latency_s, self.bandwidth_Bps)


@dataclasses.dataclass(frozen=True)
class Link:
    """A one-way path between two tiers, costed with the α-β model.

    Attributes:
        src: the tier the bytes leave.
        dst: the tier they arrive in (may equal ``src`` for a copy within a tier).
        bandwidth_Bps: B in t = α + n/B, bytes/s (> 0).
        latency_s: α in seconds (>= 0).
        memory_kind: for host→device links, the JAX memory kind of the host buffer:
            ``"pinned_host"`` (page-locked, DMA straight from it) or ``"unpinned_host"``
            (pageable: the driver first copies into a pinned bounce buffer). None elsewhere.
        source: where the numbers come from.

    Example:
        >>> pcie = Link("pinned_host", "hbm", 50e9, 10e-6, memory_kind="pinned_host")
        >>> pcie.name
        'pinned_host->hbm'
        >>> round(float(pcie.time(1e9)), 6)
        0.02001
    """

    src: str
    dst: str
    bandwidth_Bps: float
    latency_s: float
    memory_kind: MemoryKind | None = None
    source: str = ""

    def __post_init__(self):
        for key in ("src", "dst"):
            v = getattr(self, key)
            if not isinstance(v, str) or not v.strip():
                raise HierarchyError(f"link {key}={v!r}: name a tier, e.g. 'ram'")
        who = f"link {self.src}->{self.dst}"
        object.__setattr__(self, "bandwidth_Bps", _positive(
            who, "bandwidth_Bps", self.bandwidth_Bps, "bytes/s", "pass bytes per second, e.g. 25e9"))
        object.__setattr__(self, "latency_s", _non_negative(
            who, "latency_s", self.latency_s, "seconds", "pass seconds, e.g. 10e-6"))
        if self.memory_kind not in (None, "pinned_host", "unpinned_host"):
            raise HierarchyError(f"{who}: memory_kind={self.memory_kind!r}: expected "
                                 "'pinned_host', 'unpinned_host' or None")

    @property
    def name(self) -> str:
        return f"{self.src}->{self.dst}"

    def time(self, n_bytes: Any) -> Any:
        """Seconds to move ``n_bytes``: latency_s + n / bandwidth_Bps (Hockney 1994)."""
        return hockney_time(n_bytes, self.latency_s, self.bandwidth_Bps)


@dataclasses.dataclass(frozen=True)
class Hierarchy:
    """Tiers and links, validated together.

    Attributes:
        tiers: the tiers, names unique.
        links: the links, each naming known tiers, at most one per (src, dst).
        name: what the hierarchy describes, e.g. ``"h100_sxm"`` or ``"this machine"``.
        source: where its numbers come from.

    Example:
        >>> h = Hierarchy(
        ...     tiers=(Tier("ssd", 1e12, 3e9, 100e-6), Tier("ram", 32e9, 50e9, 100e-9)),
        ...     links=(Link("ssd", "ram", 3e9, 100e-6),))
        >>> round(float(h.transfer_time(3e9, "ssd", "ram")), 4)
        1.0001
        >>> Hierarchy(tiers=h.tiers, links=(Link("ssd", "gpu", 3e9, 0.0),))
        Traceback (most recent call last):
        ...
        memsim.hierarchy.HierarchyError: link ssd->gpu: dst='gpu' is not a tier of this hierarchy; known tiers: 'ssd', 'ram'. Add the tier or fix the name.
    """

    tiers: tuple[Tier, ...]
    links: tuple[Link, ...] = ()
    name: str = "hierarchy"
    source: str = ""

    def __post_init__(self):
        object.__setattr__(self, "tiers", tuple(self.tiers))
        object.__setattr__(self, "links", tuple(self.links))
        if not self.tiers:
            raise HierarchyError(f"hierarchy {self.name!r}: tiers=() is empty; give at least one Tier")
        names: dict[str, Tier] = {}
        for t in self.tiers:
            if not isinstance(t, Tier):
                raise HierarchyError(f"hierarchy {self.name!r}: tiers contains {t!r}, not a Tier")
            if t.name in names:
                raise HierarchyError(f"hierarchy {self.name!r}: tier name {t.name!r} appears twice; "
                                     "tier names must be unique")
            names[t.name] = t
        known = ", ".join(repr(n) for n in names)
        for t in self.tiers:
            if t.part_of is None:
                continue
            if t.part_of not in names or t.part_of == t.name:
                raise HierarchyError(f"tier {t.name!r}: part_of={t.part_of!r} is not another tier of "
                                     f"this hierarchy; known tiers: {known}")
            parent = names[t.part_of]
            if t.capacity_bytes > parent.capacity_bytes:
                raise HierarchyError(
                    f"tier {t.name!r}: capacity_bytes={t.capacity_bytes:.4g} exceeds that of the tier "
                    f"it is part of ({parent.name!r}, {parent.capacity_bytes:.4g}); lower it")
        seen = set()
        for link in self.links:
            if not isinstance(link, Link):
                raise HierarchyError(f"hierarchy {self.name!r}: links contains {link!r}, not a Link")
            for key in ("src", "dst"):
                v = getattr(link, key)
                if v not in names:
                    raise HierarchyError(f"link {link.name}: {key}={v!r} is not a tier of this "
                                         f"hierarchy; known tiers: {known}. Add the tier or fix the name.")
            if (link.src, link.dst) in seen:
                raise HierarchyError(f"link {link.name} appears twice; keep one link per (src, dst)")
            seen.add((link.src, link.dst))

    # ---- look-ups -------------------------------------------------------------------------------

    def tier(self, name: str) -> Tier:
        """The tier called ``name``; HierarchyError listing the known names otherwise."""
        for t in self.tiers:
            if t.name == name:
                return t
        raise HierarchyError(f"hierarchy {self.name!r} has no tier {name!r}; known tiers: "
                             + ", ".join(repr(t.name) for t in self.tiers))

    def has_tier(self, name: str) -> bool:
        return any(t.name == name for t in self.tiers)

    def has_link(self, src: str, dst: str) -> bool:
        return any(link.src == src and link.dst == dst for link in self.links)

    def link(self, src: str, dst: str) -> Link:
        """The link src→dst; HierarchyError listing the known links otherwise."""
        self.tier(src), self.tier(dst)
        for link in self.links:
            if link.src == src and link.dst == dst:
                return link
        raise HierarchyError(f"hierarchy {self.name!r} has no link {src}->{dst}; known links: "
                             + (", ".join(link.name for link in self.links) or "none"))

    def physical_tiers(self) -> tuple[Tier, ...]:
        """Tiers that are not carved out of another tier (what the pyramid draws)."""
        return tuple(t for t in self.tiers if t.part_of is None)

    def chain(self, path: Sequence[str]) -> tuple[Link, ...]:
        """The links along ``path`` (tier names, at least two), in order."""
        path = list(path)
        if len(path) < 2:
            raise HierarchyError(f"path={path!r}: a chain needs at least two tier names, "
                                 "e.g. ['ssd', 'page_cache', 'ram']")
        return tuple(self.link(a, b) for a, b in zip(path[:-1], path[1:]))

    # ---- costs ----------------------------------------------------------------------------------

    def transfer_time(self, n_bytes: Any, src: str, dst: str) -> Any:
        """Seconds to move ``n_bytes`` over the link src→dst: α + n/B (Hockney 1994).

        Example:
            >>> from memsim.machines import workstation_2020
            >>> h = workstation_2020()
            >>> round(float(h.transfer_time(3e9, "ssd", "page_cache")), 3)
            1.0
        """
        return self.link(src, dst).time(n_bytes)

    def chain_time(self, n_bytes: Any, path: Sequence[str], mode: ChainMode = "store_and_forward",
                   chunk_bytes: float | None = None) -> Any:
        """Seconds to move ``n_bytes`` along ``path``, hop by hop.

        Two models (the classic store-and-forward vs cut-through distinction of network
        routing, e.g. Hennessy & Patterson, *Computer Architecture*, appendix on interconnects):

        - ``"store_and_forward"``: each hop finishes before the next starts (a ``read()`` into a
          buffer followed by ``device_put`` of that buffer; a pageable host→device copy staged
          through a pinned bounce buffer). t = Σ_i (α_i + n / B_i).
        - ``"pipelined"``, ``chunk_bytes=None``: ideal cut-through, every hop busy at once and
          latency paid once per hop. t = Σ_i α_i + n / min_i B_i.
        - ``"pipelined"`` with ``chunk_bytes=c``: the n bytes move as k = ceil(n / c) chunks of
          c bytes (a prefetching loader, a double-buffered staging copy). A chunk takes
          τ_i = α_i + c / B_i on hop i; the pipeline fills once, then the slowest hop sets the pace:
          t = Σ_i τ_i + (k − 1) · max_i τ_i. Exact when c divides n; for n < c one chunk of n
          bytes is sent.

        Args:
            n_bytes: bytes, scalar or array (numpy or jax), >= 0.
            path: tier names, e.g. ``["ssd", "page_cache", "pinned_host", "hbm"]``.
            mode: ``"store_and_forward"`` or ``"pipelined"``.
            chunk_bytes: chunk size for the chunked pipeline; only with ``mode="pipelined"``.

        Returns:
            Seconds, shaped like ``n_bytes``.

        Example:
            >>> h = Hierarchy(tiers=(Tier("a", 1e9, 1e9, 0), Tier("b", 1e9, 1e9, 0),
            ...                      Tier("c", 1e9, 1e9, 0)),
            ...               links=(Link("a", "b", 1e9, 1e-3), Link("b", "c", 2e9, 1e-3)))
            >>> round(float(h.chain_time(1e9, ["a", "b", "c"])), 4)        # 1.001 + 0.501
            1.502
            >>> round(float(h.chain_time(1e9, ["a", "b", "c"], "pipelined")), 4)  # 0.002 + 1.0
            1.002
        """
        links = self.chain(path)
        if mode not in ("store_and_forward", "pipelined"):
            raise HierarchyError(f"mode={mode!r}: expected 'store_and_forward' or 'pipelined'")
        n = _check_bytes(n_bytes)
        if mode == "store_and_forward":
            if chunk_bytes is not None:
                raise HierarchyError(f"chunk_bytes={chunk_bytes!r} is only used with mode='pipelined'")
            total = 0.0
            for link in links:
                total = total + link.time(n)
            return total
        if chunk_bytes is None:
            return sum(link.latency_s for link in links) + n / min(link.bandwidth_Bps for link in links)
        c = _positive("chain_time", "chunk_bytes", chunk_bytes, "bytes", "pass e.g. 4 * 2**20")
        xp = _xp(n)
        chunk = xp.minimum(n, c)
        k = xp.maximum(xp.ceil(n / c), 1.0)
        taus = [link.latency_s + chunk / link.bandwidth_Bps for link in links]
        slowest = taus[0]
        for tau in taus[1:]:
            slowest = xp.maximum(slowest, tau)
        return sum(taus) + (k - 1.0) * slowest

    def chain_bandwidth(self, path: Sequence[str], mode: ChainMode = "store_and_forward") -> float:
        """Asymptotic bytes/s along ``path`` (n → ∞ in :meth:`chain_time`).

        store-and-forward: 1 / Σ_i (1/B_i); pipelined: min_i B_i.

        Example:
            >>> from memsim.machines import workstation_2020
            >>> h = workstation_2020()
            >>> round(h.chain_bandwidth(["ram", "pinned_host", "gpu"]) / 1e9, 2)
            12.55
        """
        links = self.chain(path)
        if mode == "pipelined":
            return min(link.bandwidth_Bps for link in links)
        if mode != "store_and_forward":
            raise HierarchyError(f"mode={mode!r}: expected 'store_and_forward' or 'pipelined'")
        return 1.0 / sum(1.0 / link.bandwidth_Bps for link in links)

    # ---- tables ---------------------------------------------------------------------------------

    def tiers_frame(self) -> pd.DataFrame:
        """One row per tier: name, capacity_bytes, bandwidth_Bps, latency_s, cost_per_GB, ..."""
        return pd.DataFrame([dataclasses.asdict(t) for t in self.tiers])

    def links_frame(self) -> pd.DataFrame:
        """One row per link: link, src, dst, bandwidth_Bps, latency_s, memory_kind, source."""
        rows = [{"link": link.name, **dataclasses.asdict(link)} for link in self.links]
        return pd.DataFrame(rows, columns=["link", "src", "dst", "bandwidth_Bps", "latency_s",
                                           "memory_kind", "source"])

    # ---- this machine ---------------------------------------------------------------------------

    @classmethod
    def from_probes(cls, fits: pd.DataFrame, capacities: Mapping[str, float] | None = None,
                    name: str = "this machine") -> "Hierarchy":
        """Builds the measured machine's hierarchy from probe fits.

        ``fits`` is the table ``analysis.links.fit_links`` returns: one row per probe with
        ``probe``, ``status``, ``alpha_s`` and ``beta_Bps`` (bandwidth in bytes/s), plus the
        environment columns ``platform``, ``ram_total_bytes``, ``disk_total_bytes`` and
        ``device_memory_bytes``. Each fitted probe becomes a link (and sets the bandwidth and
        latency of the tier it streams within):

        ====================  ===========================  ===============================
        probe                 link                         also sets tier
        ====================  ===========================  ===============================
        file_read_cold        disk -> page_cache           disk
        file_read_warm        page_cache -> ram            page_cache (part of ram)
        ram_copy              ram -> ram                   ram
        h2d_pageable          ram -> device                (memory_kind unpinned_host)
        h2d_pinned            pinned_host -> device        pinned_host (part of ram)
        d2h                   device -> ram
        device_copy           device -> device             device
        ====================  ===========================  ===============================

        A tier whose probe was not measured or not fitted is left out, together with its links,
        and the omission is written into ``source``: no number is invented. On a CPU platform the
        "device" is host RAM seen through XLA; its capacity defaults to ``ram_total_bytes``.

        Args:
            fits: the fit table.
            capacities: tier name → bytes, overriding the capacities from the environment
                columns (e.g. ``{"disk": 500e9}``).
            name: the hierarchy's name.

        Returns:
            A validated Hierarchy.

        Example:
            >>> fits = pd.DataFrame({
            ...     "probe": ["file_read_cold", "file_read_warm", "ram_copy"],
            ...     "status": ["ok", "ok", "ok"],
            ...     "alpha_s": [1e-4, 2e-6, 1e-6], "beta_Bps": [5e8, 3e9, 6e9],
            ...     "platform": "cpu", "ram_total_bytes": 16e9, "disk_total_bytes": 250e9,
            ...     "device_memory_bytes": float("nan")})
            >>> h = Hierarchy.from_probes(fits)
            >>> [t.name for t in h.tiers], [link.name for link in h.links]
            (['disk', 'page_cache', 'ram'], ['disk->page_cache', 'page_cache->ram', 'ram->ram'])
        """
        if not isinstance(fits, pd.DataFrame):
            raise HierarchyError(f"fits is a {type(fits).__name__}; pass the DataFrame from "
                                 "analysis.links.fit_links (or fits.csv read with pandas)")
        missing = [c for c in ("probe", "alpha_s", "beta_Bps") if c not in fits.columns]
        if missing:
            raise HierarchyError(f"fits lacks column(s) {missing}; columns present: {list(fits.columns)}. "
                                 "Pass the table from analysis.links.fit_links")
        caps = dict(capacities or {})

        def env(col: str) -> float:
            if col not in fits.columns:
                return float("nan")
            vals = pd.to_numeric(fits[col], errors="coerce").dropna()
            return float(vals.iloc[0]) if len(vals) else float("nan")

        platform = str(fits["platform"].iloc[0]) if "platform" in fits.columns and len(fits) else "unknown"
        ram = caps.get("ram", env("ram_total_bytes"))
        disk = caps.get("disk", env("disk_total_bytes"))
        dev = caps.get("device", env("device_memory_bytes"))
        if not math.isfinite(dev) and platform == "cpu":
            dev = ram

        def fit(probe: str) -> tuple[float, float] | None:
            rows = fits[fits["probe"] == probe]
            if "status" in fits.columns:
                rows = rows[rows["status"] == "ok"]
            if rows.empty:
                return None
            a, b = float(rows["alpha_s"].iloc[0]), float(rows["beta_Bps"].iloc[0])
            if not (math.isfinite(a) and math.isfinite(b) and b > 0 and a >= 0):
                return None
            return a, b

        omitted: list[str] = []
        tiers: list[Tier] = []
        links: list[Link] = []
        src_note = "measured by experiments.probes ({probe}); α-β fit"

        def add_tier(tname, capacity, probe, part_of=None):
            f = fit(probe)
            if f is None:
                omitted.append(f"{tname} ({probe} not measured or not fitted)")
                return False
            if not (isinstance(capacity, (int, float)) and math.isfinite(capacity) and capacity > 0):
                omitted.append(f"{tname} (capacity unknown: pass capacities={{{tname!r}: bytes}})")
                return False
            tiers.append(Tier(tname, capacity, f[1], f[0], None, part_of, src_note.format(probe=probe)))
            return True

        has_ram = add_tier("ram", ram, "ram_copy")
        add_tier("disk", disk, "file_read_cold")
        if has_ram:
            add_tier("page_cache", ram, "file_read_warm", part_of="ram")
            add_tier("pinned_host", ram, "h2d_pinned", part_of="ram")
        elif fit("file_read_warm") or fit("h2d_pinned"):
            omitted.append("page_cache, pinned_host (they are part of ram, which is missing)")
        add_tier("device", dev, "device_copy")
        order = {"disk": 0, "page_cache": 1, "ram": 2, "pinned_host": 3, "device": 4}
        tiers.sort(key=lambda t: order[t.name])
        have = {t.name for t in tiers}

        for probe, src, dst, kind in [
            ("file_read_cold", "disk", "page_cache", None),
            ("file_read_warm", "page_cache", "ram", None),
            ("ram_copy", "ram", "ram", None),
            ("h2d_pageable", "ram", "device", "unpinned_host"),
            ("h2d_pinned", "pinned_host", "device", "pinned_host"),
            ("d2h", "device", "ram", None),
            ("device_copy", "device", "device", None),
        ]:
            f = fit(probe)
            if f is None:
                continue
            if src not in have or dst not in have:
                omitted.append(f"link {src}->{dst} ({probe} fitted, but a tier is missing)")
                continue
            links.append(Link(src, dst, f[1], f[0], kind, src_note.format(probe=probe)))
        if not tiers:
            raise HierarchyError(
                "fits gave no usable tier: none of ram_copy, file_read_cold, device_copy has "
                "status 'ok' with finite alpha_s >= 0 and beta_Bps > 0 (probes present: "
                f"{sorted(set(fits['probe']))}). Run the probes again, or check fits.csv")
        note = f"measured on platform {platform}"
        if omitted:
            note += "; omitted: " + "; ".join(omitted)
        return cls(tiers=tuple(tiers), links=tuple(links), name=name, source=note)
