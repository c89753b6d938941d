"""The memory pyramid: tiers by capacity (bar width) and bandwidth (height), log scales.

Each hierarchy gets one panel: a tier is a bar centred on zero whose half-width is
log10(capacity / 1 kB) and whose vertical place is its bandwidth on a log axis, so small fast
tiers sit narrow at the top and large slow ones wide at the bottom. A last panel overlays every
hierarchy as capacity-vs-bandwidth points, for comparing machines directly.

Drawn with matplotlib's object API on an Agg canvas (no pyplot state, no display needed).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from memsim.hierarchy import Hierarchy
from memsim.machines import h100_sxm, workstation_2020
from memsim.units import format_bytes, format_rate

_WIDTH_ORIGIN = 1e3  # half-width 0 at 1 kB
_BAR = 1.25          # a bar spans bandwidth / _BAR .. bandwidth * _BAR
_CLOSE = 2.5         # bandwidths closer than this ratio get staggered labels


def _half_width(capacity_bytes: float) -> float:
    return max(0.3, math.log10(capacity_bytes / _WIDTH_ORIGIN))


def draw_pyramid(ax, hierarchy: Hierarchy, color: str = "C0", ylim: tuple[float, float] | None = None,
                 xmax: float | None = None) -> int:
    """Draws one hierarchy's physical tiers as a pyramid on ``ax``; returns how many bars.

    Args:
        ax: a matplotlib Axes.
        hierarchy: the tiers to draw (tiers with ``part_of`` set live inside another and are
            not drawn).
        color: bar colour.
        ylim: bandwidth axis limits in bytes/s; None fits the tiers.
        xmax: half-width of the capacity axis (log10 of capacity / 1 kB); None fits the tiers.

    Returns:
        The number of bars drawn.

    Example:
        >>> fig = Figure()
        >>> draw_pyramid(fig.add_subplot(), workstation_2020())
        5
    """
    if not isinstance(hierarchy, Hierarchy):
        raise TypeError(f"hierarchy is a {type(hierarchy).__name__}; pass a memsim.hierarchy.Hierarchy")
    tiers = sorted(hierarchy.physical_tiers(), key=lambda t: t.bandwidth_Bps, reverse=True)
    ax.set_yscale("log")
    # Labels of tiers with close bandwidths would overlap: put the upper one's label above its
    # bar and the lower one's below. The bars themselves stay at their true bandwidths.
    where = ["center"] * len(tiers)
    for i in range(1, len(tiers)):
        if tiers[i - 1].bandwidth_Bps / tiers[i].bandwidth_Bps < _CLOSE:
            if where[i - 1] == "center":
                where[i - 1] = "above"
            where[i] = "below"
    for k, (t, pos) in enumerate(zip(tiers, where)):
        w = _half_width(t.capacity_bytes)
        lo, hi = t.bandwidth_Bps / _BAR, t.bandwidth_Bps * _BAR
        ax.fill_between([-w, w], [lo, lo], [hi, hi], color=color, alpha=0.35 + 0.1 * (k % 2),
                        linewidth=0.8, edgecolor="black", zorder=2 + k)
        label = f"{t.name}: {format_bytes(t.capacity_bytes)}, {format_rate(t.bandwidth_Bps)}"
        y, va = {"center": (t.bandwidth_Bps, "center"), "above": (hi * 1.03, "bottom"),
                 "below": (lo / 1.03, "top")}[pos]
        ax.text(0, y, label, ha="center", va=va, fontsize=6.5, zorder=20)
    if xmax is None:
        xmax = max(_half_width(t.capacity_bytes) for t in tiers) + 0.5
    ax.set_xlim(-xmax, xmax)
    ticks = [k for k in range(0, int(xmax) + 1, 3)]
    signed = [-k for k in ticks[::-1] if k] + ticks
    ax.set_xticks(signed)
    ax.set_xticklabels([format_bytes(_WIDTH_ORIGIN * 10**abs(k)) for k in signed], fontsize=6,
                       rotation=45)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_title(hierarchy.name, fontsize=9)
    ax.set_xlabel("capacity (bar half-width, log)", fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(axis="y", which="major", alpha=0.3)
    return len(tiers)


def pyramid_figure(hierarchies: Sequence[Hierarchy]) -> Figure:
    """One pyramid panel per hierarchy (shared bandwidth axis) and a comparison panel.

    Example:
        >>> fig = pyramid_figure([workstation_2020(), h100_sxm()])
        >>> len(fig.axes)
        3
    """
    hs = list(hierarchies)
    if not hs:
        raise ValueError("hierarchies is empty; pass at least one Hierarchy")
    for h in hs:
        if not isinstance(h, Hierarchy):
            raise TypeError(f"hierarchies contains a {type(h).__name__}; pass memsim Hierarchy objects")
    bws = [t.bandwidth_Bps for h in hs for t in h.physical_tiers()]
    ylim = (min(bws) / 3, max(bws) * 3)
    xmax = max(_half_width(t.capacity_bytes) for h in hs for t in h.physical_tiers()) + 0.5
    fig = Figure(figsize=(3.2 * (len(hs) + 1), 4.2), layout="constrained")
    axes = fig.subplots(1, len(hs) + 1, sharey=True)
    for i, h in enumerate(hs):
        draw_pyramid(axes[i], h, color=f"C{i}", ylim=ylim, xmax=xmax)
    axes[0].set_ylabel("bandwidth (bytes/s, log)", fontsize=8)
    cmp = axes[-1]
    cmp.set_xscale("log")
    for i, h in enumerate(hs):
        pts = sorted((t.capacity_bytes, t.bandwidth_Bps, t.name) for t in h.physical_tiers())
        cmp.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=f"C{i}", label=h.name,
                 markersize=4, linewidth=1)
        for c, b, name in pts:
            cmp.annotate(name, (c, b), fontsize=6, xytext=(3, 3), textcoords="offset points")
    cmp.set_xlabel("capacity (bytes, log)", fontsize=7)
    cmp.set_title("all, capacity vs bandwidth", fontsize=9)
    cmp.legend(fontsize=7)
    cmp.grid(alpha=0.3)
    cmp.tick_params(labelsize=7)
    return fig


def comparison_hierarchies(measured: Hierarchy | None) -> list[Hierarchy]:
    """The measured machine (if any) beside ``workstation_2020`` and ``h100_sxm``.

    Example:
        >>> [h.name for h in comparison_hierarchies(None)]
        ['workstation_2020', 'h100_sxm']
    """
    return ([measured] if measured is not None else []) + [workstation_2020(), h100_sxm()]


def save_pyramid(hierarchies: Sequence[Hierarchy], path: str | Path, dpi: int = 120) -> Path:
    """Draws :func:`pyramid_figure` and writes it (format from the suffix, e.g. ``.png``).

    Example:
        >>> import tempfile, pathlib
        >>> p = save_pyramid([workstation_2020()], pathlib.Path(tempfile.mkdtemp()) / "p.png")
        >>> p.read_bytes()[:4] == b"\\x89PNG"
        True
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = pyramid_figure(hierarchies)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=dpi)
    return path
