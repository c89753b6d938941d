"""Figure of training memory footprints (matplotlib, Agg backend): stacked bars by component."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from memsim.footprint import COLUMNS, DEVICE_COMPONENTS, HOST_COMPONENTS, PLACES  # noqa: E402

MAX_BARS = 40


def footprint_bars(fp_long: pd.DataFrame, path: Path, labels: dict | None = None, key: str = "config_id",
                   order: list | None = None) -> Path:
    """Stacked bars of footprints: one panel per place (device, host), one bar per configuration,
    one colour per component.

    Args:
        fp_long: footprint rows (``memsim.footprint.footprint`` columns) of one or more
            configurations, told apart by the ``key`` column.
        path: PNG file to write.
        labels: ``key`` value → bar label (default: the key value itself).
        key: column naming the configuration.
        order: ``key`` values in the order to draw (default: largest device footprint first).

    Returns:
        ``path``. At most ``MAX_BARS`` configurations are drawn; the title says so when some are
        left out.

    Example:
        >>> import tempfile
        >>> from memsim.footprint import FootprintConfig, footprint
        >>> cfg = FootprintConfig(param_bytes=4_000_000, host_sample_bytes=3_100, device_sample_bytes=3_076)
        >>> df = footprint(cfg, activations=2_000_000).assign(config_id="a")
        >>> footprint_bars(df, Path(tempfile.mkdtemp()) / "f.png").stat().st_size > 0
        True
    """
    missing = [c for c in (*COLUMNS, key) if c not in fp_long.columns]
    if missing:
        raise KeyError(f"footprint_bars: column(s) {missing} missing; have {list(fp_long.columns)}")
    if not len(fp_long):
        raise ValueError("footprint_bars: no footprint rows to draw")
    wide = fp_long.pivot_table(index=key, columns=["place", "component"], values="bytes", aggfunc="sum",
                               sort=False).fillna(0)
    if order is None:
        device_total = fp_long[fp_long.place == "device"].groupby(key, sort=False)["bytes"].sum()
        order = list(device_total.reindex(wide.index).fillna(0).sort_values(ascending=False, kind="stable").index)
    unknown = [k for k in order if k not in wide.index]
    if unknown:
        raise KeyError(f"footprint_bars: order names {unknown[:3]} not found in the {key!r} column")
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
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
