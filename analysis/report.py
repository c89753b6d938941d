"""Report sections of the study. Each is ``(ctx) -> markdown``; ``study_sections`` lists them in order."""

from __future__ import annotations

import importlib

import numpy as np
import pandas as pd

from analysis import plots

TABLE_COLS = ["num_workers", "prefetch_buffer_size", "device_buffer_size", "feed", "batch_size", "source",
              "precision", "grad_accum_steps", "augment_cost", "image_size", "model"]


def md_table(df: pd.DataFrame, floatfmt: str = ".3g") -> str:
    """A DataFrame as a GitHub Markdown table (no extra dependency)."""
    def fmt(v):
        if isinstance(v, (float, np.floating)):
            return "" if np.isnan(v) else format(float(v), floatfmt)
        return str(v)
    head = "| " + " | ".join(map(str, df.columns)) + " |"
    sep = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body])


def varying_knobs(rows: pd.DataFrame) -> list[str]:
    return [k for k in TABLE_COLS if k in rows and rows[k].nunique(dropna=True) > 1]


def knob_effects(rows: pd.DataFrame) -> pd.DataFrame:
    """For each varying knob: median samples/s at each level (over all other knobs), best/worst ratio.

    Args:
        rows: ok rows of a sweep.

    Returns:
        One row per knob: knob, best level, worst level, their median samples/s and ``ratio``, sorted
        by ratio (largest effect first).

    >>> df = pd.DataFrame({"num_workers": [0, 0, 2, 2], "feed": ["a", "b", "a", "b"],
    ...                    "samples_per_s": [100.0, 110.0, 200.0, 210.0]})
    >>> top = knob_effects(df).iloc[0]
    >>> (top.knob, int(top.best), int(top.worst), round(float(top.ratio), 3))
    ('num_workers', 2, 0, 1.952)
    """
    out = []
    for k in [c for c in TABLE_COLS if c in rows and rows[c].nunique(dropna=True) > 1]:
        med = rows.groupby(k)["samples_per_s"].median()
        out.append({"knob": k, "best": med.idxmax(), "worst": med.idxmin(), "best_samples_per_s": med.max(),
                    "worst_samples_per_s": med.min(), "ratio": med.max() / med.min(), "levels": len(med)})
    return pd.DataFrame(out).sort_values("ratio", ascending=False, ignore_index=True) if out else pd.DataFrame()


def environment_section(ctx) -> str:
    e = ctx.environment
    keys = ["platform", "device_kind", "device_count", "cpu_count", "python", "jax_version", "jaxlib_version",
            "flax_version", "optax_version", "grain_version", "numpy_version", "pandas_version", "git_commit"]
    df = pd.DataFrame({"field": keys, "value": [e.get(k, "") for k in keys]})
    return (f"## Machine and environment\n\nPreset `{ctx.preset}`; {len(ctx.rows)} configurations; "
            f"measured sweep wall time {ctx.wall_s:.0f} s.\n\n{md_table(df)}\n")


def measured_section(ctx) -> str:
    rows = ctx.rows
    failed = rows[rows.status != "ok"] if len(rows) else rows
    ok = rows[rows.status == "ok"].copy() if len(rows) else rows
    lines = ["## Measured sweep", ""]
    if not len(ok):
        return "\n".join(lines + ["No configuration finished successfully."])
    vary = varying_knobs(ok)
    fixed = {k: ok[k].iloc[0] for k in TABLE_COLS if k in ok and k not in vary}
    lines.append("Fixed for every configuration: " + ", ".join(f"`{k}={v}`" for k, v in fixed.items()) + ".")
    lines.append(f"Model: {ok.model.iloc[0]} width {ok.width.iloc[0]} depth {ok.depth.iloc[0]} "
                 f"({int(ok.params.iloc[0]):,} parameters); {int(ok.steps_measured.iloc[0])} measured steps per "
                 "configuration after warm-up; compile time excluded and recorded apart.")
    lines.append("")
    lines.append("`data_wait_frac`: share of the step loop spent waiting for the next device batch. "
                 "`feed_efficiency`: samples/s divided by the same step's rate on a batch already on the device, "
                 "measured in the same run.")
    lines.append("")
    cols = vary + ["samples_per_s", "data_wait_frac", "feed_efficiency", "step_time_median_s", "host_cpu_util"]
    table = ok.sort_values("samples_per_s", ascending=False)[cols]
    lines.append(md_table(table))
    lines.append("")
    best = ok.loc[ok.samples_per_s.idxmax()]
    lines.append("### Best configuration")
    lines.append("")
    lines.append(", ".join(f"`{k}={best[k]}`" for k in vary) +
                 f": **{best.samples_per_s:.0f} samples/s**, data_wait_frac {best.data_wait_frac:.3f}, "
                 f"feed_efficiency {best.feed_efficiency:.3f} (device-resident bound "
                 f"{best.device_resident_samples_per_s:.0f} samples/s).")
    eff = knob_effects(ok)
    if len(eff):
        top = eff.iloc[0]
        lines += ["", "### Which knob moved throughput most", "",
                  f"**{top.knob}**: median samples/s {top.worst_samples_per_s:.0f} at `{top.knob}={top.worst}` → "
                  f"{top.best_samples_per_s:.0f} at `{top.knob}={top.best}` (×{top.ratio:.2f}, medians over the "
                  "other knobs).", "", md_table(eff)]
    figs = []
    if {"num_workers", "prefetch_buffer_size", "feed"} <= set(ok.columns):
        p1 = plots.throughput_by_knob(ok, "num_workers", "prefetch_buffer_size", ctx.out_dir / "samples_vs_num_workers.png")
        p2 = plots.throughput_by_knob(ok, "prefetch_buffer_size", "num_workers", ctx.out_dir / "samples_vs_prefetch.png")
        figs = [p1, p2]
    if figs:
        lines += ["", "### Figures", ""] + [f"![{p.stem}]({p.name})" for p in figs]
    if len(failed):
        lines += ["", "### Failed configurations", "",
                  md_table(failed[[c for c in vary + ["error"] if c in failed]])]
    return "\n".join(lines) + "\n"


def _plugin(module: str, fn: str, title: str):
    """A section from a later stage's module; absent modules are skipped, not faked."""
    def section(ctx) -> str:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name == module:
                return ""
            raise
        return getattr(mod, fn)(ctx)
    section.__name__ = title
    return section


def study_sections():
    return [
        ("Machine and environment", environment_section),
        ("Measured sweep", measured_section),
        ("Hierarchy", _plugin("analysis.study_hierarchy", "section", "Hierarchy")),
        ("Memory", _plugin("analysis.study_memory", "section", "Memory")),
        ("Simulation", _plugin("analysis.study_simulation", "section", "Simulation")),
        ("Scaling", _plugin("analysis.study_scaling", "section", "Scaling")),
    ]
