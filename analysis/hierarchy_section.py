"""The study report's "## Hierarchy" section: probe table, fitted links, pyramid, placement.

Reads what ``experiments.probes`` wrote (rows.csv and fits.csv, as DataFrames); the pyramid
figure goes into the report's folder and is linked by file name.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis.hierarchy_plots import comparison_hierarchies, save_pyramid
from memsim.hierarchy import Hierarchy, HierarchyError
from memsim.placement import PlacementError, plan_placement
from memsim.units import format_bytes, format_rate

PYRAMID_FILE = "hierarchy_pyramid.png"
RAW_COLUMNS = ("probe", "link", "phase", "status", "size_bytes", "seconds", "note")
FIT_COLUMNS = ("probe", "link", "status", "alpha_s", "beta_Bps", "r2", "n_points")


def markdown_table(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of ``df`` (cells as given, ``|`` escaped).

    Example:
        >>> print(markdown_table(pd.DataFrame({"a": [1], "b": ["x|y"]})))
        | a | b |
        | --- | --- |
        | 1 | x\\|y |
    """
    def cell(v) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(cell(c) for c in df.columns) + " |",
             "| " + " | ".join("---" for _ in df.columns) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


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
                         f"Pass the {'rows.csv' if name == 'probe_raw' else 'fits.csv'} that "
                         "experiments.probes wrote")


def probe_table(raw: pd.DataFrame) -> pd.DataFrame:
    """Per probe: sizes measured and the median rate at the smallest and the largest size.

    Example:
        >>> raw = pd.DataFrame({"probe": ["ram_copy"] * 4, "link": "ram->ram",
        ...     "phase": "measure", "status": "ok", "size_bytes": [4096, 4096, 1e6, 1e6],
        ...     "seconds": [1e-6, 3e-6, 1e-4, 1e-4], "note": ""})
        >>> probe_table(raw).iloc[0].to_dict()["median rate, smallest"]
        '2.05 GB/s'
    """
    _check(raw, "probe_raw", RAW_COLUMNS)
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
    _check(fits, "probe_fits", FIT_COLUMNS)
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


def hierarchy_section(probe_raw: pd.DataFrame | None, probe_fits: pd.DataFrame | None,
                      out_dir: Path) -> str:
    """Markdown for the report's "## Hierarchy" section; writes the pyramid figure to out_dir.

    Args:
        probe_raw: rows.csv of a probe run (or None when no probes ran).
        probe_fits: fits.csv of that run (or None).
        out_dir: the report's folder; the figure ``hierarchy_pyramid.png`` is written there and
            linked by file name.

    Returns:
        The section's Markdown, starting with ``## Hierarchy``.

    Example:
        >>> import tempfile
        >>> md = hierarchy_section(None, None, Path(tempfile.mkdtemp()))
        >>> md.splitlines()[0], "hierarchy_pyramid.png" in md
        ('## Hierarchy', True)
    """
    _check(probe_raw, "probe_raw", RAW_COLUMNS)
    _check(probe_fits, "probe_fits", FIT_COLUMNS)
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
        md += ["No probe rows: run `python -m experiments.probes --preset quick` to measure this "
               "machine. The pyramid below shows the presets only.", ""]
    else:
        md += ["### Probes", "",
               "Medians over the repeats of each size (warm-up runs and compilation excluded). "
               "Timings come from a machine that may be shared, so expect noise.", "",
               markdown_table(probe_table(probe_raw)), ""]

    measured = None
    if probe_fits is None:
        if probe_raw is not None:
            md += ["No fits were given: fit the rows with `experiments.probes.fit_links`.", ""]
    else:
        md += ["### Fitted links", "",
               "Each link is fitted with t = α + n / B (Hockney's α-β model); B is the bandwidth in "
               "bytes/s (the inverse of the per-byte cost β). For matmuls n counts flops. "
               "R² is on seconds (dominated by the large sizes), R² (log t) on log-seconds "
               "(every size counts). "
               + (f"Method: {probe_fits['method'].dropna().iloc[0]}."
                  if "method" in probe_fits.columns and probe_fits["method"].notna().any() else ""),
               "", markdown_table(fits_table(probe_fits)), ""]
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
           "sheets and stated assumptions (see `memsim.hierarchy`); the measured machine's from "
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
