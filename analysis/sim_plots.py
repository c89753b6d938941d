"""Figures of simulated pipelines and caches (matplotlib, Agg backend).

Each function takes a DataFrame produced by ``memsim`` (``pipeline.sweep``,
``pipeline.simulate_trace``, ``cache.cache_sweep``, ``multihost.many_hosts``), writes one PNG and
returns its path. A missing column raises ``KeyError`` naming it.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def _need(df: pd.DataFrame, cols, what: str) -> None:
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"{what}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise KeyError(f"{what}: column(s) {missing} missing; have {list(df.columns)}")
    if len(df) == 0:
        raise ValueError(f"{what}: the DataFrame has no rows")


def throughput_heatmap(sweep: pd.DataFrame, path: Path, x: str = "num_workers",
                       y: str = "prefetch_buffer_size", value: str = "samples_per_s",
                       panel: str | None = "feed") -> Path:
    """Heat map of ``value`` over ``x`` × ``y`` (median over the other knobs), one panel per ``panel``.

    Args:
        sweep: rows of ``memsim.pipeline.sweep``.
        path: PNG file to write.
        x, y: knobs on the axes.
        value: the column shown (cell labels give its median).
        panel: knob splitting the figure into panels (None: one panel).

    Returns:
        ``path``.

    Example:
        >>> import tempfile, pandas as pd
        >>> df = pd.DataFrame({"num_workers": [0, 0, 1, 1], "prefetch_buffer_size": [0, 1, 0, 1],
        ...                    "samples_per_s": [1.0, 2.0, 3.0, 4.0]})
        >>> throughput_heatmap(df, Path(tempfile.mkdtemp()) / "h.png", panel=None).stat().st_size > 0
        True
    """
    _need(sweep, [x, y, value] + ([panel] if panel else []), "throughput_heatmap")
    panels = sorted(sweep[panel].dropna().unique()) if panel else [None]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.8), squeeze=False)
    vmax = float(np.nanmax(sweep[value]))
    im = None
    for ax, pv in zip(axes[0], panels):
        sub = sweep if pv is None else sweep[sweep[panel] == pv]
        grid = sub.pivot_table(index=y, columns=x, values=value, aggfunc="median")
        im = ax.imshow(grid.to_numpy(), origin="lower", aspect="auto", cmap="viridis", vmin=0, vmax=vmax)
        ax.set_xticks(range(grid.shape[1]), [str(c) for c in grid.columns])
        ax.set_yticks(range(grid.shape[0]), [str(r) for r in grid.index])
        for (i, j), v in np.ndenumerate(grid.to_numpy()):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=6,
                        color="white" if v < 0.6 * vmax else "black")
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.set_title(f"{panel}={pv}" if pv is not None else value, fontsize=9)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.9, label=value)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return Path(path)


_TRACE_COLS = ("item", "worker", "worker_start", "read_start", "read_end", "transform_end",
               "transfer_start", "transfer_end", "compute_start", "compute_end")


def timeline(trace: pd.DataFrame, path: Path, max_items: int = 40, title: str = "") -> Path:
    """Gantt chart of one configuration: each worker's read and transform, the transfer, and the
    compute stage with the time it waits for data marked.

    Args:
        trace: ``memsim.pipeline.simulate_trace`` output.
        path: PNG file to write.
        max_items: items drawn (the first ones).
        title: figure title.

    Returns:
        ``path``.
    """
    _need(trace, _TRACE_COLS, "timeline")
    tr = trace.sort_values("item").head(max_items)
    workers = sorted(tr["worker"].unique())
    rows = [f"worker {w}" for w in workers] + ["transfer", "compute"]
    ypos = {r: i for i, r in enumerate(reversed(rows))}
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.6))
    h = 0.7
    for r in tr.itertuples(index=False):
        y = ypos[f"worker {r.worker}"]
        ax.broken_barh([(r.read_start, r.read_end - r.read_start)], (y - h / 2, h), color="tab:orange")
        ax.broken_barh([(r.read_end, r.transform_end - r.read_end)], (y - h / 2, h), color="tab:blue")
        y = ypos["transfer"]
        ax.broken_barh([(r.transfer_start, r.transfer_end - r.transfer_start)], (y - h / 2, h),
                       color="tab:purple")
        y = ypos["compute"]
        ax.broken_barh([(r.compute_start, r.compute_end - r.compute_start)], (y - h / 2, h), color="tab:green")
    cs, ce = tr["compute_start"].to_numpy(), tr["compute_end"].to_numpy()
    waits = [(0.0, cs[0])] + [(ce[i - 1], cs[i] - ce[i - 1]) for i in range(1, len(cs)) if cs[i] > ce[i - 1]]
    ax.broken_barh(waits, (ypos["compute"] - h / 2, h), facecolor="none", edgecolor="tab:red", hatch="////")
    ax.set_yticks(list(ypos.values()), list(ypos.keys()))
    ax.set_xlabel("time (s)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in ("tab:orange", "tab:blue", "tab:purple", "tab:green")]
    handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="none", edgecolor="tab:red", hatch="////"))
    ax.legend(handles, ["read", "transform", "transfer", "compute", "waiting for data"], fontsize=7,
              loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=5)
    wait = sum(w for _, w in waits)
    span = ce[-1]
    ax.set_title(title or f"first {len(tr)} batches: compute waits {wait / span:.0%} of {span:.3g} s",
                 fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return Path(path)


def hit_rate_plot(cache: pd.DataFrame, path: Path, min_epoch: int = 2) -> Path:
    """Hit rate against cache size / dataset size, one line per policy, one panel per pattern.

    Simulated rates (mean over epochs ≥ ``min_epoch``) are markers; closed forms, where they
    exist, are dashed lines.

    Args:
        cache: ``memsim.cache.cache_sweep`` output.
        path: PNG file to write.
        min_epoch: first epoch averaged (epoch 1 is all compulsory misses).

    Returns:
        ``path``.
    """
    _need(cache, ["pattern", "policy", "cache_fraction", "epoch", "hit_rate", "closed_form_hit_rate"],
          "hit_rate_plot")
    steady = cache[cache["epoch"] >= min_epoch]
    if len(steady) == 0:
        raise ValueError(f"hit_rate_plot: no rows with epoch >= {min_epoch}; simulate at least "
                         f"{min_epoch} epochs")
    patterns = list(dict.fromkeys(steady["pattern"]))
    fig, axes = plt.subplots(1, len(patterns), figsize=(3.6 * len(patterns), 3.3), sharey=True,
                             squeeze=False)
    colors = dict(zip(["lru", "fifo", "static", "none"], ["tab:blue", "tab:orange", "tab:green", "tab:gray"]))
    markers = {"lru": ("o", 6), "fifo": ("s", 4.5), "static": ("^", 4), "none": ("x", 4)}
    for ax, pat in zip(axes[0], patterns):
        g = steady[steady["pattern"] == pat].groupby(["policy", "cache_fraction"])[
            ["hit_rate", "closed_form_hit_rate"]].mean().reset_index()
        for pol, line in g.groupby("policy", sort=False):
            col = colors.get(pol)
            mk, ms = markers.get(pol, ("o", 4))
            ax.plot(line["cache_fraction"], line["hit_rate"], mk, ms=ms, color=col, label=f"{pol} (trace)",
                    mfc="none" if pol == "lru" else col)
            cf = line.dropna(subset=["closed_form_hit_rate"])
            if len(cf):
                ax.plot(cf["cache_fraction"], cf["closed_form_hit_rate"], "--", lw=1, color=col)
        ax.set_title(pat, fontsize=9)
        ax.set_xlabel("cache size / dataset size")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"hit rate (epochs ≥ {min_epoch})")
    axes[0][-1].legend(fontsize=7, title="dashed: closed form", title_fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def many_hosts_plot(hosts, path: Path) -> Path:
    """Efficiency (throughput per host relative to one host) against the number of hosts.

    Args:
        hosts: ``memsim.multihost.many_hosts`` output, or a dict label -> such output (one line
            each). Error bars are 2 standard errors.
        path: PNG file to write.

    Returns:
        ``path``.
    """
    series = hosts if isinstance(hosts, dict) else {"": hosts}
    if not series:
        raise ValueError("many_hosts_plot: no series given")
    for label, df in series.items():
        _need(df, ["hosts", "efficiency", "efficiency_stderr"], f"many_hosts_plot[{label!r}]")
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    for label, df in series.items():
        ax.errorbar(df["hosts"], df["efficiency"], yerr=2 * df["efficiency_stderr"], marker="o",
                    capsize=2, label=label or None)
    if any(series):
        ax.legend(fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("hosts (synchronous data parallel)")
    ax.set_ylabel("steps/s relative to 1 host")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
