"""Advice from a calibrated cost model: the cheapest loader configuration near the best one.

``recommend(model, base)`` predicts every combination of the loader knobs around one configuration
(worker processes, host prefetch depth, device feed) and picks the cheapest configuration whose
predicted samples/s is within ``tolerance`` (5%) of the best. Cheapest means fewest worker
processes first (each one is a core and a copy of the pipeline), then the least host memory, then
the least device memory. Memory comes from ``memsim.footprint``: the batches each buffer holds.
Budgets leave out what does not fit: ``cpu_budget`` cores for workers, and ``ram_budget_bytes`` of
host memory for the buffers. ``grain.experimental.pick_performance_config`` sizes workers and
buffers from the element size and a RAM budget alone. ``python -m experiments recommend`` measures
its choice beside this one.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from analysis.costmodel.features import CostModelError, knob_frame
from analysis.costmodel.model import CostModel, predict

TOLERANCE = 0.05
PREFETCH = (1, 2, 4, 8)
FEEDS = ("none", "double_buffer", "grain_device_put")


def footprint_bytes(configs: pd.DataFrame) -> pd.DataFrame:
    """Host and device bytes of each configuration's buffers and model (``memsim.footprint``), with
    activations left out: they do not change with the loader knobs this module varies.

    Host batches are float32 images after the transform (4 bytes per pixel value) and int32 labels;
    the parameters are float32 and AdamW keeps two more copies."""
    from memsim import footprint as fp
    kf = knob_frame(configs)
    host, dev = [], []
    for r in kf.itertuples(index=False):
        sample = int(r.pixels) * 4 + 4
        c = fp.FootprintConfig(param_bytes=int(r.params) * 4, host_sample_bytes=sample, device_sample_bytes=sample,
                               batch_size=int(r.batch_size), grad_accum_steps=int(r.grad_accum_steps),
                               num_workers=int(r.num_workers), per_worker_buffer_size=int(r.per_worker_buffer_size),
                               prefetch_buffer_size=int(r.prefetch_buffer_size), feed=str(r.feed),
                               cpu_buffer_size=max(int(r.cpu_buffer_size), 1 if r.feed == "grain_device_put" else 0),
                               device_buffer_size=max(int(r.device_buffer_size), 0 if r.feed == "none" else 1))
        t = fp.totals(fp.footprint(c, 0))
        host.append(t["host"])
        dev.append(t["device"])
    return pd.DataFrame({"host_bytes": host, "device_bytes": dev}, index=configs.index)


def candidates(base: pd.DataFrame, cpu_count: int, num_workers=None, prefetch=PREFETCH, feeds=FEEDS) -> pd.DataFrame:
    """``base`` (one configuration) with every combination of worker count (0 to twice the cores by
    default), host prefetch depth and device feed."""
    if len(base) != 1:
        raise CostModelError(f"base: {len(base)} rows; give exactly one configuration to recommend around")
    nws = tuple(num_workers) if num_workers is not None else tuple(range(0, 2 * int(cpu_count) + 1))
    rows = [{**base.iloc[0].to_dict(), "num_workers": w, "prefetch_buffer_size": p, "feed": f}
            for w, p, f in itertools.product(nws, prefetch, feeds)]
    return pd.DataFrame(rows)


def recommend(model: CostModel, base: pd.DataFrame, *, cpu_budget: int | None = None,
              ram_budget_bytes: float | None = None, tolerance: float = TOLERANCE, num_workers=None,
              prefetch=PREFETCH, feeds=FEEDS) -> pd.DataFrame:
    """Every candidate around ``base`` predicted, with the recommended one marked.

    Args:
        model: a calibrated cost model.
        base: one configuration (knob columns); its model, data and step knobs are kept.
        cpu_budget: cores the loader may use as worker processes (default: the model's host cores);
            candidates with more workers are left out.
        ram_budget_bytes: host bytes the buffers may hold; candidates over it are left out.
        tolerance: how far below the best predicted samples/s the recommendation may be.
        num_workers, prefetch, feeds: the levels tried (workers default to 0..2 × cores).

    Returns:
        One row per candidate: the knobs, ``samples_per_s`` (predicted), ``host_bytes``,
        ``device_bytes``, ``within_budget``, ``near_best`` (within ``tolerance`` of the best that
        fits the budgets), ``recommended`` (one row), ``bottleneck``, ``extrapolated``.
    """
    if not 0 <= tolerance < 1:
        raise CostModelError(f"tolerance={tolerance!r}: a fraction in [0, 1), e.g. 0.05 for 5%")
    cores = int(cpu_budget if cpu_budget is not None else model.cpu_count)
    if cores < 0:
        raise CostModelError(f"cpu_budget={cpu_budget!r}: a number of cores >= 0")
    if ram_budget_bytes is not None and not ram_budget_bytes > 0:
        raise CostModelError(f"ram_budget_bytes={ram_budget_bytes!r}: a positive number of bytes")
    cand = candidates(base, model.cpu_count, num_workers, prefetch, feeds)
    pred = predict(model, cand)
    out = pred[["num_workers", "prefetch_buffer_size", "feed", "samples_per_s", "stall_frac", "bottleneck",
                "extrapolated"]].copy()
    out = pd.concat([out, footprint_bytes(cand).reset_index(drop=True)], axis=1)
    ok = out.num_workers <= cores
    if ram_budget_bytes is not None:
        ok &= out.host_bytes <= ram_budget_bytes
    out["within_budget"] = ok
    if not ok.any():
        raise CostModelError(f"no candidate fits cpu_budget={cores} and ram_budget_bytes={ram_budget_bytes}; "
                             f"raise a budget")
    best = float(out.samples_per_s[ok].max())
    out["near_best"] = ok & (out.samples_per_s >= (1 - tolerance) * best)
    pick = out[out.near_best].sort_values(["num_workers", "host_bytes", "device_bytes", "samples_per_s"],
                                          ascending=[True, True, True, False]).index[0]
    out["recommended"] = out.index == pick
    out["speed_vs_best"] = out.samples_per_s / best
    return out.reset_index(drop=True)


def choice(table: pd.DataFrame) -> pd.Series:
    """The recommended row of :func:`recommend`'s table."""
    return table[table.recommended].iloc[0]


def describe(table: pd.DataFrame) -> str:
    """One line: the recommendation, its predicted speed against the best, and why it is cheaper."""
    r = choice(table)
    ok = table[table.within_budget]
    b = ok.loc[ok.samples_per_s.idxmax()]
    return (f"recommended: num_workers={int(r.num_workers)} prefetch_buffer_size={int(r.prefetch_buffer_size)} "
            f"feed={r.feed}: predicted {r.samples_per_s:.0f} samples/s ({r.speed_vs_best:.0%} of the best, "
            f"num_workers={int(b.num_workers)} prefetch_buffer_size={int(b.prefetch_buffer_size)} feed={b.feed}), "
            f"host buffers {r.host_bytes / 2**20:.1f} MiB vs {b.host_bytes / 2**20:.1f} MiB; bottleneck {r.bottleneck}"
            + (f"; extrapolated: {r.extrapolated}" if isinstance(r.extrapolated, str) and r.extrapolated else ""))
