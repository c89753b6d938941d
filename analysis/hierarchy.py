"""The report's "## Hierarchy" topic: probe table, fitted links, the memory pyramid, placement.

``section(study)`` reads the probes' raw rows from a study folder (``study.probe_raw``, i.e.
``<study>/probe/rows.csv``), fits the links with ``analysis.links.fit_links``, draws the pyramid
into the study's folder (``hierarchy_pyramid.png``, linked by file name) and returns the Markdown.
``section_from_tables(probe_raw, probe_fits, out_dir)`` does the same from explicit tables.

The memory pyramid: tiers by capacity (bar width) and bandwidth (height), log scales. Each
hierarchy gets one panel: a tier is a bar centred on zero whose half-width is
log10(capacity / 1 kB) and whose vertical place is its bandwidth on a log axis, so small fast
tiers sit narrow at the top and large slow ones wide at the bottom. A last panel overlays every
hierarchy as capacity-vs-bandwidth points, for comparing machines directly. Drawn with
matplotlib's object API on an Agg canvas (no pyplot state, no display needed).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis import links
from analysis.tables import md_table
from memsim.hierarchy import Hierarchy, HierarchyError
from memsim.machines import h100_sxm, workstation_2020
from memsim.units import format_bytes, format_rate
from memsim.placement import PlacementError, plan_placement

PYRAMID_FILE = "hierarchy_pyramid.png"
# The columns the section reads from the raw rows and from the fits (analysis.links.FIT_COLUMNS has all).
NEEDED_RAW_COLUMNS = ("probe", "link", "phase", "status", "size_bytes", "seconds", "note")
NEEDED_FIT_COLUMNS = ("probe", "link", "status", "alpha_s", "beta_Bps", "r2", "n_points")


# ---- the pyramid figure -------------------------------------------------------------------------

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
        >>> p.name, p.stat().st_size > 10_000
        ('p.png', True)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = pyramid_figure(hierarchies)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=dpi)
    return path


# ---- the section ---------------------------------------------------------------------------------


def _num(v, fmt) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "–"
    return "–" if math.isnan(f) else fmt(f)


def _seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


def _check(df: pd.DataFrame | None, name: str, cols: tuple[str, ...]) -> None:
    if df is None:
        return
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"{name} is a {type(df).__name__}; pass a pandas DataFrame or None")
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{name} lacks column(s) {missing}; columns present: {list(df.columns)}. "
                         f"Pass {'the rows.csv that experiments.probes wrote' if name == 'probe_raw' else 'the table of analysis.links.fit_links'}")


def probe_table(raw: pd.DataFrame) -> pd.DataFrame:
    """Per probe: sizes measured and the median rate at the smallest and the largest size.

    Example:
        >>> raw = pd.DataFrame({"probe": ["ram_copy"] * 4, "link": "ram->ram",
        ...     "phase": "measure", "status": "ok", "size_bytes": [4096, 4096, 1e6, 1e6],
        ...     "seconds": [1e-6, 3e-6, 1e-4, 1e-4], "note": ""})
        >>> probe_table(raw).iloc[0].to_dict()["median rate, smallest"]
        '2.05 GB/s'
    """
    _check(raw, "probe_raw", NEEDED_RAW_COLUMNS)
    rows = []
    for probe, g in raw.groupby("probe", sort=False):
        ok = g[(g["phase"] == "measure") & (g["status"] == "ok")]
        first = g[g["phase"] == "first_read"]
        skipped = g[g["status"] != "ok"]
        note = str(skipped["note"].iloc[0]) if len(skipped) else (str(ok["note"].iloc[0]) if len(ok) else "")
        if len(note) > 160:
            note = note[:157] + "..."
        if ok.empty:
            rows.append({"probe": probe, "link": g["link"].iloc[0], "sizes": "–",
                         "median rate, smallest": "–", "median rate, largest": "–",
                         "status": "not measured", "note": note})
            continue
        med = ok.groupby("size_bytes")["seconds"].median()
        is_flop = "flops" in ok.columns and ok["flops"].notna().all()
        if is_flop:
            fl = ok.groupby("size_bytes")["flops"].first()
            rate = lambda s: f"{fl[s] / med[s] / 1e9:.3g} GFLOP/s"  # noqa: E731
        else:
            rate = lambda s: format_rate(s / med[s])  # noqa: E731
        lo, hi = med.index.min(), med.index.max()
        extra = ""
        if len(first):
            extra = f"; first read of the whole file: {format_rate(first['size_bytes'].iloc[0] / first['seconds'].iloc[0])}"
        rows.append({"probe": probe, "link": g["link"].iloc[0],
                     "sizes": f"{format_bytes(lo)} … {format_bytes(hi)} ({len(med)})",
                     "median rate, smallest": rate(lo), "median rate, largest": rate(hi),
                     "status": "ok" if skipped.empty else "ok, some sizes skipped",
                     "note": note + extra})
    return pd.DataFrame(rows)


def fits_table(fits: pd.DataFrame) -> pd.DataFrame:
    """The fitted α, bandwidth (or FLOP/s) with 95 % intervals, R² and points, formatted.

    Example:
        >>> fits = pd.DataFrame({"probe": ["ram_copy"], "link": ["ram->ram"], "status": ["ok"],
        ...     "alpha_s": [1e-6], "beta_Bps": [1.5e10], "r2": [0.99], "n_points": [27]})
        >>> fits_table(fits).iloc[0]["bandwidth B"]
        '15 GB/s'
    """
    _check(fits, "probe_fits", NEEDED_FIT_COLUMNS)
    out = []
    for _, r in fits.iterrows():
        flop = "flop_rate" in fits.columns and not pd.isna(r.get("flop_rate"))
        if flop:
            b = _num(r["flop_rate"], lambda v: f"{v / 1e9:.3g} GFLOP/s")
            ci = (_num(r.get("flop_rate_ci_low"), lambda v: f"{v / 1e9:.3g}") + " … "
                  + _num(r.get("flop_rate_ci_high"), lambda v: f"{v / 1e9:.3g} GFLOP/s"))
        else:
            b = _num(r["beta_Bps"], format_rate)
            ci = (_num(r.get("beta_ci_low_Bps"), format_rate) + " … "
                  + _num(r.get("beta_ci_high_Bps"), format_rate))
        out.append({"probe": r["probe"], "link": r["link"], "status": r["status"],
                    "α (latency)": _num(r["alpha_s"], _seconds),
                    "bandwidth B": b, "B 95% CI": ci if "–" not in ci else "–",
                    "R²": _num(r["r2"], lambda v: f"{v:.3f}"),
                    "R² (log t)": _num(r.get("r2_log"), lambda v: f"{v:.3f}"),
                    "points": int(r["n_points"]) if not pd.isna(r["n_points"]) else 0})
    return pd.DataFrame(out)


def placement_examples(h: Hierarchy, sample_bytes: float = 100e3) -> list[str]:
    """Readable placement lines for datasets of 0.5 × and 1.5 × RAM on this machine's disk.

    Example:
        >>> from memsim.machines import workstation_2020
        >>> lines = placement_examples(workstation_2020())
        >>> len(lines), "shuffled each epoch" in lines[0]
        (4, True)
    """
    ram = h.tier("ram").capacity_bytes
    lines = []
    for factor in (0.5, 1.5):
        for access in ("shuffle", "sequential"):
            try:
                p = plan_placement(h, factor * ram, sample_bytes, access)
                lines.append(p.summary())
            except PlacementError as e:
                lines.append(f"{factor} × RAM, {access}: not planned ({e})")
    return lines


def section_from_tables(probe_raw: pd.DataFrame | None, probe_fits: pd.DataFrame | None,
                        out_dir: Path) -> str:
    """Markdown for the report's "## Hierarchy" section; writes the pyramid figure to out_dir.

    Args:
        probe_raw: rows.csv of a probe run (or None when no probes ran).
        probe_fits: ``analysis.links.fit_links`` of those rows (or None).
        out_dir: the report's folder; the figure ``hierarchy_pyramid.png`` is written there and
            linked by file name.

    Returns:
        The section's Markdown, starting with ``## Hierarchy``.

    Example:
        >>> import tempfile
        >>> md = section_from_tables(None, None, Path(tempfile.mkdtemp()))
        >>> md.splitlines()[0], "hierarchy_pyramid.png" in md
        ('## Hierarchy', True)
    """
    _check(probe_raw, "probe_raw", NEEDED_RAW_COLUMNS)
    _check(probe_fits, "probe_fits", NEEDED_FIT_COLUMNS)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md = ["## Hierarchy", ""]
    src = probe_raw if probe_raw is not None and len(probe_raw) else probe_fits
    if src is not None and len(src) and "platform" in src.columns:
        r = src.iloc[0]
        bits = [f"platform {r['platform']}"]
        for col, label in (("device_kind", "device"), ("cpu_count", "CPUs"), ("jax_version", "jax"),
                           ("started_at", "measured")):
            if col in src.columns and not pd.isna(r[col]):
                bits.append(f"{label} {r[col]}")
        if "ram_total_bytes" in src.columns and not pd.isna(r["ram_total_bytes"]):
            bits.append(f"RAM {format_bytes(r['ram_total_bytes'])}")
        md += ["This machine: " + ", ".join(bits) + ".", ""]

    if probe_raw is None:
        md += ["No probe rows: run `python -m experiments probe --preset quick` to measure this "
               "machine. The pyramid below shows the presets only.", ""]
    else:
        md += ["### Probes", "",
               "Medians over the repeats of each size (warm-up runs and compilation excluded). "
               "Timings come from a machine that may be shared, so expect noise.", "",
               md_table(probe_table(probe_raw)), ""]

    measured = None
    if probe_fits is None:
        if probe_raw is not None:
            md += ["No fits were given: fit the rows with `analysis.links.fit_links`.", ""]
    else:
        md += ["### Fitted links", "",
               "Each link is fitted with t = α + n / B (Hockney's α-β model); B is the bandwidth in "
               "bytes/s (the inverse of the per-byte cost β). For matmuls n counts flops. "
               "R² is on seconds (dominated by the large sizes), R² (log t) on log-seconds "
               "(every size counts). "
               + (f"Method: {probe_fits['method'].dropna().iloc[0]}."
                  if "method" in probe_fits.columns and probe_fits["method"].notna().any() else ""),
               "", md_table(fits_table(probe_fits), floatfmt=".3f"), ""]
        try:
            measured = Hierarchy.from_probes(probe_fits)
            md += [f"Hierarchy of this machine from the fits: {measured.source}.", ""]
        except HierarchyError as e:
            md += [f"No hierarchy could be built from the fits: {e}", ""]

    save_pyramid(comparison_hierarchies(measured), out_dir / PYRAMID_FILE)
    names = ", ".join(h.name for h in comparison_hierarchies(measured))
    md += ["### Memory pyramid", "",
           f"![memory pyramid: {names}]({PYRAMID_FILE})", "",
           "Bar width: capacity (log); height: bandwidth (log). Preset numbers come from spec "
           "sheets and stated assumptions (see `memsim.machines`); the measured machine's from "
           "the fits above. On a CPU-only machine the \"device\" is host RAM seen through XLA.", ""]

    md += ["### Where should the data live?", ""]
    if measured is None or not measured.has_tier("ram"):
        md += ["Placement needs a measured hierarchy with a RAM tier; here is the same question "
               "for `workstation_2020`:", ""]
        from memsim.machines import workstation_2020
        lines = placement_examples(workstation_2020())
    else:
        lines = placement_examples(measured)
    md += [f"- {line}" for line in lines]
    md += ["", "Hit rates are closed forms for an LRU page cache (sequential scans larger than the "
           "cache: 0; a fresh shuffle each epoch: (C − (D − C)(H_D − H_{D−C})) / D), labelled as "
           "such; C / D bounds any policy. The page cache is taken to be all of RAM, an upper "
           "estimate. One reader, one request in flight.", ""]
    return "\n".join(md)


def section(study) -> str:
    """The report's "## Hierarchy" section of a study folder (``analysis.report.StudyResults``).

    Reads ``study.probe_raw`` (the probes' raw rows, None when the study ran none), fits them with
    ``analysis.links.fit_links``, writes ``hierarchy_pyramid.png`` into ``study.path`` and returns
    the Markdown. A probes stage that failed (``study.errors["probes"]``) fails the section with
    its error, so the report says so in place.

    Example:
        >>> import tempfile, types
        >>> study = types.SimpleNamespace(path=Path(tempfile.mkdtemp()), probe_raw=None, errors={})
        >>> section(study).splitlines()[0]
        '## Hierarchy'
    """
    if study.errors.get("probes"):
        raise RuntimeError(f"the probes failed: {study.errors['probes']}")
    raw = study.probe_raw
    fits = links.fit_links(raw) if raw is not None and len(raw) else None
    return section_from_tables(raw if raw is not None and len(raw) else None, fits, study.path)
