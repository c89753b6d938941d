"""The study report's "## Memory" section: the footprint of each configuration the study ran.

Reads the long footprint frame ``experiments.memory.study_footprints`` wrote (``memory.csv``:
config_id, variant, component, place, bytes, source, xla_step_bytes) and the sweep's rows (for
the configuration labels, the platform and any measured device peak); ``section(study)`` is the
report's entry, ``footprint_figure`` the stacked bars by component.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from analysis.figures import save  # noqa: E402
from analysis.measured import varying_knobs  # noqa: E402
from analysis.tables import md_table  # noqa: E402
from memsim.footprint import COLUMNS, DEVICE_COMPONENTS, HOST_COMPONENTS, PLACES, totals  # noqa: E402
from memsim.units import format_bytes  # noqa: E402

FIGURE_FILE = "memory_footprint.png"
MAX_ROWS = 60
MAX_BARS = 40
NEEDED = ("config_id", "variant", *COLUMNS, "xla_step_bytes")


def config_labels(rows: pd.DataFrame) -> dict:
    """config_id → a short label from the knobs that vary across the rows (``config_id`` if none do).

    Example:
        >>> rows = pd.DataFrame({"config_id": ["a", "b"], "num_workers": [0, 2], "feed": ["none", "none"]})
        >>> config_labels(rows)
        {'a': 'num_workers=0', 'b': 'num_workers=2'}
    """
    if rows is None or not len(rows) or "config_id" not in rows:
        return {}
    vary = varying_knobs(rows)
    return {r["config_id"]: (" ".join(f"{k}={r[k]}" for k in vary) or str(r["config_id"]))
            for _, r in rows.iterrows()}


def footprint_table(fp_long: pd.DataFrame, labels: dict | None = None) -> pd.DataFrame:
    """One row per configuration: bytes by component (device, then host), totals, XLA's step
    total and the footprint's step total over it, and the analytic variant where there is one.

    Example:
        >>> from memsim.footprint import FootprintConfig, XlaMemory, footprint
        >>> cfg = FootprintConfig(param_bytes=4000, host_sample_bytes=100, device_sample_bytes=84, batch_size=8)
        >>> xla = XlaMemory(argument_bytes=12676, output_bytes=12004, temp_bytes=5000, alias_bytes=12000)
        >>> df = footprint(cfg, xla).assign(config_id="a", variant="xla", xla_step_bytes=xla.step_bytes)
        >>> t = footprint_table(df).iloc[0]
        >>> int(t["device total"]), int(t["XLA step"]), round(float(t["footprint step / XLA"]), 4)
        (19020, 17680, 0.9998)
    """
    missing = [c for c in NEEDED if c not in fp_long.columns]
    if missing:
        raise KeyError(f"footprint_table: column(s) {missing} missing; pass what experiments.memory.study_footprints "
                       f"wrote (memory.csv); have {list(fp_long.columns)}")
    out = []
    for cid, g in fp_long.groupby("config_id", sort=False):
        x = g[g.variant == "xla"]
        if not len(x):
            raise ValueError(f"footprint_table: configuration {cid!r} has no 'xla' variant")
        b = x.set_index(["place", "component"])["bytes"]
        t = totals(x)
        row = {"config_id": cid, "config": (labels or {}).get(cid, cid)}
        row.update({c: b.get(("device", c), 0) for c in DEVICE_COMPONENTS})
        row["device total"] = t["device"]
        row.update({c: b.get(("host", c), 0) for c in HOST_COMPONENTS})
        row["host total"] = t["host"]
        xla_step = float(x.xla_step_bytes.iloc[0])
        row["XLA step"] = xla_step
        row["footprint step / XLA"] = t["step"] / xla_step
        a = g[g.variant == "analytic"]
        if len(a):
            row["analytic activations"] = a.set_index("component").loc["activations", "bytes"]
            row["analytic step / XLA"] = totals(a)["step"] / xla_step
        out.append(row)
    return pd.DataFrame(out)


def _mb_table(df: pd.DataFrame) -> str:
    shown = df.copy()
    for c in shown.columns:
        if c not in ("#", "config"):
            fmt = (lambda v: f"{v:.4f}") if "/" in c else format_bytes
            shown[c] = [("" if pd.isna(v) else fmt(v)) for v in shown[c]]
    return md_table(shown)


def memory_section(fp_long: pd.DataFrame | None, rows: pd.DataFrame | None, out_dir: Path) -> str:
    """The markdown of the section; the stacked-bar figure goes to ``out_dir``.

    Args:
        fp_long: the study's footprints (memory.csv), None when the study did not compute them, or
            a frame with an ``error`` column when computing them failed.
        rows: the sweep's rows (labels, platform, measured device peak); may be None.
        out_dir: the report's folder.
    """
    lines = ["## Memory", ""]
    if fp_long is None:
        return "\n".join(lines + ["The footprints were not computed for this study (no `memory.csv`): it ran "
                                  "before the memory stage existed. Rerun the study to get them."]) + "\n"
    if "error" in fp_long.columns:
        return "\n".join(lines + [f"Computing the footprints failed: `{fp_long['error'].iloc[0]}`"]) + "\n"
    ok = rows[rows.status == "ok"] if rows is not None and len(rows) and "status" in rows else rows
    labels = config_labels(ok)
    table = footprint_table(fp_long, labels)
    if not len(table):
        return "\n".join(lines + ["No configuration finished, so there is no footprint to show."]) + "\n"
    lines += [
        "Bytes each configuration needs, by component (`memsim.footprint`, equations and sources in its "
        "docstring). Parameters, gradients and the AdamW state are exact from the model's shapes (float32 master "
        "weights in both precisions); activations are what XLA's memory analysis of the compiled step allocates "
        "beyond the gradients (temp − gradients − accumulator); batches count the buffers of the loader, the host "
        "prefetch and the device feed when all are full. `XLA step` is XLA's own argument + output + temp − alias "
        "for the step; `footprint step / XLA` compares the footprint's step components with it.",
        "",
    ]
    platform = str(ok["platform"].iloc[0]) if ok is not None and len(ok) and "platform" in ok else ""
    if platform == "cpu":
        lines += ["On this CPU-only machine the \"device\" is host RAM too: the process holds host + device.", ""]
    device_cols = ["config"] + [c for c in DEVICE_COMPONENTS if c in table and (table[c] > 0).any()] + [
        "device total", "XLA step", "footprint step / XLA"]
    if "analytic activations" in table:
        device_cols += ["analytic activations", "analytic step / XLA"]
    host_cols = ["config"] + [c for c in HOST_COMPONENTS if (table[c] > 0).any()] + ["host total"]
    order = table.sort_values(["device total", "host total"], ascending=False, kind="stable")
    order.insert(0, "#", range(1, len(order) + 1))
    device_cols, host_cols = ["#"] + device_cols, ["#"] + host_cols
    note = (f" The {MAX_ROWS} largest of {len(order)} configurations are listed." if len(order) > MAX_ROWS else "")
    big = order.iloc[0]
    lines += [f"Largest: **{format_bytes(big['device total'])} on the device, {format_bytes(big['host total'])} on the "
              f"host** (`{big['config']}`).{note}", "", "### Device", "",
              _mb_table(order[device_cols].head(MAX_ROWS)), ""]
    if "analytic activations" in table:
        lines += ["`analytic activations`: the Transformer estimate after Korthikanti et al. 2022 adapted to this "
                  "model (fp32 or bf16 activations, 4x GELU MLP, no dropout, fp32 log-softmax); it counts what the "
                  "backward pass must keep, so XLA's allocation is at least as large where XLA keeps extra copies.",
                  ""]
    lines += ["### Host", "", _mb_table(order[host_cols].head(MAX_ROWS)), ""]
    if ok is not None and len(ok) and "device_peak_bytes" in ok and np.isfinite(ok["device_peak_bytes"]).any():
        peak = ok.set_index("config_id")["device_peak_bytes"]
        meas = pd.DataFrame({"config": [labels.get(c, c) for c in peak.index],
                             "measured device peak": [format_bytes(v) if np.isfinite(v) else "" for v in peak]})
        lines += ["### Measured", "", "`Device.memory_stats()` peak of each run (it includes the feed's batches "
                  "and anything else the process placed on the device):", "", md_table(meas), ""]
    ids = list(order["config_id"])
    fig = save(footprint_figure(fp_long[fp_long.variant == "xla"], labels={cid: str(i) for cid, i in zip(ids, order["#"])},
                                order=ids), Path(out_dir) / FIGURE_FILE)
    lines += ["Bars numbered as the rows of the tables (activations from XLA):", "", f"![memory footprint]({fig.name})"]
    return "\n".join(lines) + "\n"


def section(study) -> str:
    """The report's "## Memory" section of a study (``analysis.report.StudyResults``).

    A memory stage that failed (``study.errors["memory"]``) is stated in the section.
    """
    if study.errors.get("memory"):
        return f"## Memory\n\nComputing the footprints failed: `{study.errors['memory']}`\n"
    return memory_section(study.memory, study.rows, study.path)


def footprint_figure(fp_long: pd.DataFrame, labels: dict | None = None, key: str = "config_id",
                     order: list | None = None) -> Figure:
    """Stacked bars of footprints: one panel per place (device, host), one bar per configuration,
    one colour per component.

    Args:
        fp_long: footprint rows (``memsim.footprint.footprint`` columns) of one or more
            configurations, told apart by the ``key`` column.
        labels: ``key`` value → bar label (default: the key value itself).
        key: column naming the configuration.
        order: ``key`` values in the order to draw (default: largest device footprint first).

    Returns:
        The figure (``analysis.figures.save`` writes it): a device and a host panel. At most ``MAX_BARS`` configurations are drawn; the title says so when some are
        left out.

    Example:
        >>> from memsim.footprint import FootprintConfig, footprint
        >>> cfg = FootprintConfig(param_bytes=4_000_000, host_sample_bytes=3_100, device_sample_bytes=3_076)
        >>> df = footprint(cfg, activations=2_000_000).assign(config_id="a")
        >>> [ax.get_title() for ax in footprint_figure(df).axes]
        ['device memory', 'host memory']
    """
    missing = [c for c in (*COLUMNS, key) if c not in fp_long.columns]
    if missing:
        raise KeyError(f"footprint_figure: column(s) {missing} missing; have {list(fp_long.columns)}")
    if not len(fp_long):
        raise ValueError("footprint_figure: no footprint rows to draw")
    wide = fp_long.pivot_table(index=key, columns=["place", "component"], values="bytes", aggfunc="sum",
                               sort=False).fillna(0)
    if order is None:
        device_total = fp_long[fp_long.place == "device"].groupby(key, sort=False)["bytes"].sum()
        order = list(device_total.reindex(wide.index).fillna(0).sort_values(ascending=False, kind="stable").index)
    unknown = [k for k in order if k not in wide.index]
    if unknown:
        raise KeyError(f"footprint_figure: order names {unknown[:3]} not found in the {key!r} column")
    shown = list(order[:MAX_BARS])
    names = [str((labels or {}).get(k, k)) for k in shown]
    comps = {"device": DEVICE_COMPONENTS, "host": HOST_COMPONENTS}
    cmap = plt.get_cmap("tab20")
    colour = {c: cmap(i % 20) for i, c in enumerate(DEVICE_COMPONENTS + HOST_COMPONENTS)}
    fig, axes = plt.subplots(1, 2, figsize=(max(9.0, 0.35 * len(shown) + 7), 4.2), squeeze=False)
    for ax, place in zip(axes[0], PLACES[::-1]):  # device first
        bottom = pd.Series(0.0, index=shown)
        for comp in comps[place]:
            if (place, comp) not in wide.columns:
                continue
            mb = wide.loc[shown, (place, comp)] / 1e6
            if not (mb > 0).any():
                continue
            ax.bar(range(len(shown)), mb, bottom=bottom, color=colour[comp], label=comp.replace("_", " "))
            bottom += mb
        ax.set_title(f"{place} memory")
        ax.set_ylabel("MB (10⁶ bytes)")
        tilt = len(shown) > 3 and max(len(n) for n in names) > 3
        ax.set_xticks(range(len(shown)), names, rotation=60 if tilt else 0, ha="right" if tilt else "center", fontsize=7)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if len(order) > len(shown):
        fig.suptitle(f"the first {len(shown)} of {len(order)} configurations", fontsize=9)
    fig.tight_layout()
    return fig
