"""The measured sweep in a study report: its environment and measured-sweep sections, and figures.

``environment_section(study)`` and ``section(study)`` read an ``analysis.report.StudyResults``
(the rows ``experiments.results.summarize`` makes of ``rows.csv``: one row per configuration, with
medians and intervals over repeats). ``knob_effects`` and ``within_noise_of_best`` are the
comparisons the section states, usable on any such rows; ``throughput_figure`` draws samples/s
against one knob.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from analysis.figures import save  # noqa: E402
from analysis.tables import md_table  # noqa: E402
from memsim.knobs import KNOBS  # noqa: E402

__all__ = ["environment_section", "section", "knob_effects", "within_noise_of_best", "varying_knobs",
           "repeatability_text", "throughput_figure"]

TABLE_COLS = list(KNOBS)


def varying_knobs(rows: pd.DataFrame) -> list[str]:
    return [k for k in TABLE_COLS if k in rows and rows[k].nunique(dropna=True) > 1]


def knob_effects(rows: pd.DataFrame) -> pd.DataFrame:
    """For each varying knob: median samples/s at each level (over all other knobs), best/worst ratio.

    With per-configuration intervals (``samples_per_s_lo``/``_hi`` from ``experiments.results.summarize``)
    the effect is ``within_noise`` when the median lower end at the best level does not reach above
    the median upper end at the worst level: the levels' typical intervals overlap.

    Args:
        rows: ok rows of a sweep, one per configuration.

    Returns:
        One row per knob: knob, best level, worst level, their median samples/s and ``ratio``,
        ``within_noise`` (NA without intervals), sorted by ratio (largest effect first).

    >>> df = pd.DataFrame({"num_workers": [0, 0, 2, 2], "feed": ["a", "b", "a", "b"],
    ...                    "samples_per_s": [100.0, 110.0, 200.0, 210.0],
    ...                    "samples_per_s_lo": [95.0, 100.0, 190.0, 200.0],
    ...                    "samples_per_s_hi": [105.0, 120.0, 210.0, 220.0]})
    >>> eff = knob_effects(df)
    >>> [(r.knob, str(r.best), str(r.worst), round(float(r.ratio), 3), bool(r.within_noise)) for r in eff.itertuples()]
    [('num_workers', '2', '0', 1.952, False), ('feed', 'b', 'a', 1.067, True)]
    """
    out = []
    has_ci = {"samples_per_s_lo", "samples_per_s_hi"} <= set(rows.columns)
    for k in [c for c in TABLE_COLS if c in rows and rows[c].nunique(dropna=True) > 1]:
        g = rows.groupby(k)
        med = g["samples_per_s"].median()
        best, worst = med.idxmax(), med.idxmin()
        noise = pd.NA
        if has_ci:
            noise = bool(g["samples_per_s_lo"].median()[best] <= g["samples_per_s_hi"].median()[worst])
        out.append({"knob": k, "best": best, "worst": worst, "best_samples_per_s": med.max(),
                    "worst_samples_per_s": med.min(), "ratio": med.max() / med.min(), "levels": len(med),
                    "within_noise": noise})
    return pd.DataFrame(out).sort_values("ratio", ascending=False, ignore_index=True) if out else pd.DataFrame()


def within_noise_of_best(rows: pd.DataFrame) -> pd.DataFrame:
    """The configurations whose samples/s interval overlaps the best configuration's.

    >>> df = pd.DataFrame({"c": ["a", "b", "c"], "samples_per_s": [100.0, 97.0, 80.0],
    ...                    "samples_per_s_lo": [98.0, 95.0, 78.0], "samples_per_s_hi": [103.0, 99.0, 82.0]})
    >>> list(within_noise_of_best(df).c)
    ['b']
    """
    if not len(rows) or not {"samples_per_s_lo", "samples_per_s_hi"} <= set(rows.columns):
        return rows.iloc[:0]
    best = rows.loc[rows.samples_per_s.idxmax()]
    others = rows.drop(index=best.name)
    return others[others.samples_per_s_hi >= best.samples_per_s_lo]


def _ci(v, lo, hi, fmt="{:.0f}") -> str:
    if lo != lo or hi != hi:
        return fmt.format(v)
    return f"{fmt.format(v)} [{fmt.format(lo)}, {fmt.format(hi)}]"


ENV_KEYS = ["platform", "device_kind", "device_count", "cpu_count", "cpu_model", "cpu_simd", "python", "jax_version",
            "jaxlib_version", "flax_version", "optax_version", "grain_version", "numpy_version", "pandas_version",
            "git_commit", "malloc"]
#: fields rows carry only since a later version: listed where the study recorded them, left out of
#: the table (not shown blank) for a folder written before
RECENT_ENV_KEYS = ("cpu_model", "cpu_simd", "malloc")


def environment(study) -> tuple[dict, str]:
    """The environment the study ran in, and where it was read from.

    ``study.json`` (written by the study) first, then ``config.json`` (written by the sweep), then
    the environment columns of the first row.
    """
    for source, env in (("study.json", study.meta.get("environment")), ("config.json", study.config.get("environment"))):
        if env:
            return dict(env), source
    if len(study.runs):
        first = study.runs.iloc[0]
        return {k: first[k] for k in ENV_KEYS if k in study.runs}, "the environment columns of rows.csv"
    return {}, "nowhere (no study.json, no environment in config.json, no rows)"


def environment_section(study) -> str:
    """The report's "## Machine and environment" section: preset, sweep size and wall time, the
    measuring protocol, the repeatability paragraph and the software environment.

    What the folder does not hold (a folder written before the study wrote ``study.json``: preset,
    sweep wall time) is said to be not recorded rather than guessed.
    """
    e, source = environment(study)
    keys = [k for k in ENV_KEYS if k not in RECENT_ENV_KEYS or (k in e and pd.notna(e[k]))]
    df = pd.DataFrame({"field": keys, "value": [e.get(k, "") for k in keys]})
    cfg = study.config.get("sweep", {})
    meta = study.meta
    preset = f"Preset `{meta['preset']}`" if meta.get("preset") else "Preset not recorded"
    wall = meta.get("stage_s", {}).get("sweep")
    wall_text = f"measured sweep wall time {wall:.0f} s" if wall is not None else "measured sweep wall time not recorded"
    text = (f"## Machine and environment\n\n{preset}; {len(study.rows)} configurations"
            f" × {cfg.get('repeats', 1)} repeats; {wall_text}.\n\n")
    if not meta:
        text += ("This folder has no `study.json` (it was written before the study recorded one): the preset, "
                 "the sweep wall time and the time of each stage are not known; the environment below is read "
                 f"from {source}.\n\n")
    elif meta.get("stage_s"):
        text += "Time of each stage: " + ", ".join(f"{k} {v:.0f} s" for k, v in meta["stage_s"].items()) + ".\n\n"
    if "min_measure_s" in cfg:
        text += (f"Each run warms up (at least {cfg['warmup_steps']} step(s), until the step time is steady or "
                 f"{cfg['max_warmup_s']:g} s) and then measures for at least {cfg['min_steps']} steps and "
                 f"{cfg['min_measure_s']:g} s, for the fed loop and again for the device-resident bound (the same "
                 "compiled step on a batch already on the device, with the loader's workers and threads "
                 "stopped). Repeats run round-robin over the configurations in a seeded shuffled order, so "
                 "a drifting machine spreads over all of them.\n\n")
    text += repeatability_text(study.rows) + "\n\n" + md_table(df) + "\n"
    return text


def repeatability_text(rows: pd.DataFrame) -> str:
    """One paragraph on the sweep's noise: median CV of samples/s and of the bound over configurations."""
    if "samples_per_s_cv" not in rows or not rows["samples_per_s_cv"].notna().any():
        return "**Repeatability:** one run per configuration, so no interval: differences below ~15% may be noise."
    cv = float(rows["samples_per_s_cv"].median())
    cvb = float(rows["device_resident_samples_per_s_cv"].median()) if "device_resident_samples_per_s_cv" in rows \
        else float("nan")
    worst = rows.loc[rows["samples_per_s_cv"].idxmax()]
    cov = float(rows["interval_coverage"].median()) if "interval_coverage" in rows else float("nan")
    n = int(rows["repeats"].median()) if "repeats" in rows else 0
    return (f"**Repeatability:** median CV over configurations of samples/s **{cv:.1%}**, of the "
            f"device-resident bound {cvb:.1%} (largest samples/s CV {float(worst.samples_per_s_cv):.1%}). "
            f"Intervals below are the distribution-free interval of the median over {n} repeats "
            f"([min, max] of the repeats; it covers the median with probability {cov:.0%}). "
            "A difference is called within noise where two intervals overlap.")


def section(study) -> str:
    """The report's "## Measured sweep" section: the grid, the best configuration and what is within
    noise of it, the knob that moved throughput most, the designed sample, the bound check, figures
    (written into ``study.path``) and failed configurations."""
    rows = study.rows
    failed = rows[rows.status != "ok"] if len(rows) else rows
    ok = rows[rows.status == "ok"].copy() if len(rows) else rows
    lines = ["## Measured sweep", ""]
    if not len(ok):
        return "\n".join(lines + ["No configuration finished successfully."])
    grid = ok[ok["design"] == "grid"] if "design" in ok else ok
    sample = ok[ok["design"] == "sample"] if "design" in ok else ok.iloc[:0]
    vary = varying_knobs(grid)
    fixed = {k: grid[k].iloc[0] for k in TABLE_COLS if k in grid and k not in vary}
    lines.append("Fixed across the grid: " + ", ".join(f"`{k}={v}`" for k, v in fixed.items()) + ".")
    lines.append(f"Model: {grid.model.iloc[0]} width {grid.width.iloc[0]} depth {grid.depth.iloc[0]} "
                 f"({int(grid.params.iloc[0]):,} parameters); compile time excluded and recorded apart.")
    lines.append("")
    lines.append("`samples_per_s`: median over repeats [interval]. `data_wait_frac`: share of the step loop "
                 "spent waiting for the next device batch. `feed_efficiency`: samples/s divided by the same "
                 "step's rate on a batch already on the device, measured in the same run with the loader stopped.")
    lines.append("")
    lines += _config_table(grid, vary)
    best = grid.loc[grid.samples_per_s.idxmax()]
    lines += ["", "### Best configuration", ""]
    close = within_noise_of_best(grid)
    lines.append(", ".join(f"`{k}={best[k]}`" for k in vary) +
                 f": **{_ci(best.samples_per_s, best.get('samples_per_s_lo', np.nan), best.get('samples_per_s_hi', np.nan))}"
                 f" samples/s**, data_wait_frac {best.data_wait_frac:.3f}, feed_efficiency {best.feed_efficiency:.3f} "
                 f"(device-resident bound {best.device_resident_samples_per_s:.0f} samples/s).")
    if len(close):
        lines.append("")
        lines.append(f"Within noise of it ({len(close)}; their intervals overlap): " + "; ".join(
            ", ".join(f"`{k}={r[k]}`" for k in vary) + f" ({r.samples_per_s:.0f})" for _, r in close.iterrows())
            + ". The data cannot rank these against the best.")
    elif "samples_per_s_lo" in grid:
        lines.append("")
        lines.append("No other configuration's interval reaches it: it is best beyond noise.")
    eff = knob_effects(grid)
    if len(eff):
        top = eff.iloc[0]
        verdict = "" if pd.isna(top.within_noise) else (
            " — **within noise**: the levels' intervals overlap" if bool(top.within_noise) else " — beyond noise")
        lines += ["", "### Which knob moved throughput most", "",
                  f"**{top.knob}**: median samples/s {top.worst_samples_per_s:.0f} at `{top.knob}={top.worst}` → "
                  f"{top.best_samples_per_s:.0f} at `{top.knob}={top.best}` (×{top.ratio:.2f}, medians over the "
                  f"other knobs){verdict}.", "", md_table(eff)]
    if len(sample):
        svary = [k for k in TABLE_COLS if k in sample and sample[k].nunique() > 1]
        lines += ["", "### Designed sample", "",
                  f"{len(sample)} configurations drawn over the other knobs (each level used about equally "
                  "often, combined at random, seeded), so that a model calibrated on this study sees every "
                  "knob move. Each is one point, not a controlled comparison: read effects from the grid.", ""]
        lines += _config_table(sample, svary)
    flagged = ok[ok["bound_exceeded"].fillna(False).astype(bool)] if "bound_exceeded" in ok else ok.iloc[:0]
    lines += ["", "### Device-resident bound check", ""]
    if len(flagged):
        lines.append(f"**{len(flagged)} configuration(s) beat their own bound beyond the interval** "
                     "(`bound_exceeded`): the bound was measured while something else competed for the host, so "
                     "their feed_efficiency is not trustworthy: " + "; ".join(
                         ", ".join(f"`{k}={r[k]}`" for k in vary) for _, r in flagged.iterrows()) + ".")
    else:
        hi = float(ok["feed_efficiency_hi"].max()) if "feed_efficiency_hi" in ok else float("nan")
        lines.append(f"No configuration beat its device-resident bound beyond its interval (largest "
                     f"feed_efficiency upper end {hi:.3f}).")
    figs = []
    if {"num_workers", "prefetch_buffer_size", "feed"} <= set(grid.columns):
        p1 = save(throughput_figure(grid, "num_workers", "prefetch_buffer_size"), study.path / "samples_vs_num_workers.png")
        p2 = save(throughput_figure(grid, "prefetch_buffer_size", "num_workers"), study.path / "samples_vs_prefetch.png")
        figs = [p1, p2]
    if figs:
        lines += ["", "### Figures", ""] + [f"![{p.stem}]({p.name})" for p in figs]
    if len(failed):
        lines += ["", "### Failed configurations", "",
                  md_table(failed[[c for c in vary + ["error"] if c in failed]])]
    return "\n".join(lines) + "\n"


def _config_table(df: pd.DataFrame, knobs: list[str]) -> list[str]:
    t = df.sort_values("samples_per_s", ascending=False)
    out = t[knobs].copy()
    has_ci = "samples_per_s_lo" in t
    out["samples_per_s"] = [_ci(r.samples_per_s, r.get("samples_per_s_lo", np.nan), r.get("samples_per_s_hi", np.nan))
                            for _, r in t.iterrows()]
    if has_ci:
        out["cv"] = t["samples_per_s_cv"].map(lambda v: "" if v != v else f"{v:.1%}")
    out["data_wait_frac"] = t["data_wait_frac"]
    out["feed_efficiency"] = [_ci(r.feed_efficiency, r.get("feed_efficiency_lo", np.nan),
                                  r.get("feed_efficiency_hi", np.nan), "{:.3f}") for _, r in t.iterrows()]
    out["bound samples/s"] = t["device_resident_samples_per_s"]
    out["step_time_median_s"] = t["step_time_median_s"]
    if "bound_exceeded" in t and t["bound_exceeded"].fillna(False).any():
        out["flag"] = t["bound_exceeded"].map(lambda b: "bound exceeded" if b else "")
    return [md_table(out)]


def throughput_figure(rows: pd.DataFrame, x: str, series: str, panel: str = "feed") -> Figure:
    """samples/s against ``x``, one panel per ``panel`` value, one line per ``series`` value.

    Args:
        rows: measured rows with ``samples_per_s``, ``x``, ``series`` and ``panel`` columns (ok rows only).
        x: knob on the horizontal axis, e.g. ``num_workers``.
        series: knob drawn as separate lines, e.g. ``prefetch_buffer_size``.
        panel: knob splitting the figure into panels.

    Returns:
        The figure (``analysis.figures.save`` writes it); the device-resident bound, where the rows
        hold it, is a dashed grey line in each panel.

    >>> rows = pd.DataFrame({"num_workers": [0, 2, 0, 2], "prefetch_buffer_size": [1, 1, 4, 4],
    ...                      "feed": ["none"] * 4, "samples_per_s": [100.0, 180.0, 110.0, 200.0]})
    >>> ax = throughput_figure(rows, "num_workers", "prefetch_buffer_size").axes[0]
    >>> ax.get_title(), ax.get_xlabel(), [l.get_label() for l in ax.get_lines()]
    ('feed=none', 'num_workers', ['prefetch_buffer_size=1', 'prefetch_buffer_size=4'])
    """
    for c in ("samples_per_s", x, series, panel):
        if c not in rows:
            raise KeyError(f"column {c!r} missing from the rows; have {list(rows.columns)}")
    panels = sorted(rows[panel].dropna().unique())
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), sharey=True, squeeze=False)
    for ax, pv in zip(axes[0], panels):
        sub = rows[rows[panel] == pv]
        g = sub.groupby([series, x])["samples_per_s"].median().reset_index()
        for sv, line in g.groupby(series):
            ax.plot(line[x], line["samples_per_s"], marker="o", label=f"{series}={sv}")
        if "device_resident_samples_per_s" in sub:
            ax.axhline(sub["device_resident_samples_per_s"].median(), color="grey", ls="--", lw=1,
                       label="device-resident bound")
        ax.set_title(f"{panel}={pv}")
        ax.set_xlabel(x)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("samples/s")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    return fig
