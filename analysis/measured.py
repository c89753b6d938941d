"""Figures of measured sweeps (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def throughput_by_knob(rows: pd.DataFrame, x: str, series: str, path: Path, panel: str = "feed") -> Path:
    """samples/s against ``x``, one panel per ``panel`` value, one line per ``series`` value.

    Args:
        rows: measured rows with ``samples_per_s``, ``x``, ``series`` and ``panel`` columns (ok rows only).
        x: knob on the horizontal axis, e.g. ``num_workers``.
        series: knob drawn as separate lines, e.g. ``prefetch_buffer_size``.
        path: PNG file to write.
        panel: knob splitting the figure into panels.

    Returns:
        ``path``.
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
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
