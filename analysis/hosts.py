"""Straggler predictions: single-process measurements → host configurations → N synchronous hosts.

:func:`host_config` calibrates a :class:`memsim.pipeline.PipelineConfig` from measured
single-process training rows (``experiments.train``) and, where given, their per-step times;
:func:`predict_stragglers` simulates N processes of which some are slowed
(:func:`memsim.multihost.straggler_hosts`) from a normal and a slowed host's calibration;
:func:`compare` joins predictions with the multi-process measurements (``rel_error``, and whether
the prediction lies inside the measured interval). The prediction never sees the multi-process
run it is compared with.

What comes from the measurement, and what is assumed:

* transform seconds per sample = ``decode_s_per_sample + augment_s_per_sample`` (the loader's own
  stage stamps, wall time inside the worker or loader thread); its spread from the per-batch
  stamps of ``steps`` (coefficient of variation of the batch sums × √batch_size per sample, the
  inverse of the Fenton–Wilkinson sum), as a lognormal;
* step seconds = median compute time of the fed loop (``compute_time_median_s``: the step while
  the loader competes for the cores, as it does in the run predicted), else the device-resident
  step; its spread = the measured per-step compute times themselves (an empirical shape), else a
  lognormal whose cv matches the row's p90 / median of the step time;
* bytes per record and per device sample from ``image_size`` × ``channels`` (uint8 in, float32
  out); the host→device link and the read link are not measured by a single process: the link
  defaults stand;
* the cross-process gradient reduction, which no single process pays, comes from its own
  measurement: ``allreduce_s``, the median time of a jitted all-reduce of the step's operands (one
  float32 array per parameter leaf, and the loss: gloo on CPU reduces them one by one, so a model of
  7 leaves pays about 7× the latency of one array of the same bytes) among N processes started and
  pinned as the run's are
  (``experiments.distributed.allreduce_probe``, gloo on CPU, with no training around it). It is
  added to every host's ``update_s`` (once per step, after the micro-batches, as the step's own
  cost: :func:`predict_stragglers`), deterministic; its wait for a late process is not in it (the
  coupled hosts' simulation holds that). It assumes the reduction neither overlaps the backward
  pass nor slows under the loader's competition for the cores;
* :func:`match_rate` then scales the CPU times by one factor so that the simulated single process runs
  at the reference's own measured samples/s: the pipeline model runs the loader and the step as
  separate servers, while on a small CPU share they contend for the same cores (the factor
  absorbs that contention; it is fitted on the single-process reference only);
* ``cpu_dilation`` multiplies the CPU service times (transform and step) when the reference had
  more CPU than each of the N processes will (see ``experiments.hosts``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

import numpy as np
import pandas as pd

from memsim.knobs import ConfigError
from memsim.multihost import straggler_hosts
from memsim.pipeline import PipelineConfig, sweep

LOADER_FIELDS = ("num_workers", "per_worker_buffer_size", "prefetch_buffer_size", "feed", "cpu_buffer_size",
                 "device_buffer_size", "batch_size", "grad_accum_steps", "precision")
REQUIRED = LOADER_FIELDS + ("decode_s_per_sample", "augment_s_per_sample", "image_size")
MIN_CV = 1e-3  # lognormal needs cv > 0; both kinds of host must use the same kind
P90_Z = 1.2815515655446004  # standard normal 90th percentile


def _rows(rows) -> pd.DataFrame:
    if isinstance(rows, pd.Series):
        rows = rows.to_frame().T
    elif isinstance(rows, Mapping):
        rows = pd.DataFrame([dict(rows)])
    if not isinstance(rows, pd.DataFrame) or not len(rows):
        raise ConfigError(f"rows={type(rows).__name__}: expected measured train rows (a non-empty DataFrame, "
                          f"Series or dict)")
    if "status" in rows:
        bad = rows[rows["status"] != "ok"]
        if len(bad):
            raise ConfigError(f"rows hold {len(bad)} failed run(s) (status {bad['status'].iloc[0]!r}); "
                              f"calibrate from ok rows only")
    missing = [c for c in REQUIRED if c not in rows]
    if missing:
        raise ConfigError(f"rows lack column {missing[0]!r}: calibrate from experiments.train rows")
    for c in LOADER_FIELDS + ("image_size",):
        if rows[c].nunique(dropna=False) > 1:
            raise ConfigError(f"rows differ in {c} ({sorted(rows[c].unique().tolist(), key=str)}): calibrate "
                              f"one configuration at a time")
    return rows.reset_index(drop=True)


def _median(rows: pd.DataFrame, col: str) -> float:
    v = pd.to_numeric(rows[col], errors="coerce").to_numpy(float)
    if not np.all(np.isfinite(v)):
        raise ConfigError(f"{col}={v[~np.isfinite(v)][0]}: not a finite measurement; rerun the reference")
    return float(np.median(v))


def _cv(x) -> float:
    x = np.asarray(x, float)
    x = x[np.isfinite(x)]
    if len(x) < 2 or x.mean() <= 0:
        return math.nan
    return float(x.std(ddof=1) / x.mean())


def host_config(rows, steps: pd.DataFrame | None = None, *, cpu_dilation: float = 1.0) -> PipelineConfig:
    """A host's pipeline and step calibrated from measured single-process rows of one configuration.

    Args:
        rows: ``experiments.train`` rows (a DataFrame of repeats, a Series or a dict), all ``ok``,
            all of one loader configuration; medians over them are used.
        steps: their per-step table (``steps.csv``: ``phase``, ``warmup``, ``compute_s``, and the
            loader's ``t_decode``/``t_augment`` per batch), or None.
        cpu_dilation: factor (>= 1 for a smaller CPU share) on the transform and step times.

    Returns:
        The :class:`PipelineConfig` (transform lognormal, step empirical or lognormal).

    Example:
        >>> row = {"num_workers": 0, "per_worker_buffer_size": 2, "prefetch_buffer_size": 2,
        ...        "feed": "double_buffer", "cpu_buffer_size": 4, "device_buffer_size": 2,
        ...        "batch_size": 16, "grad_accum_steps": 1, "precision": "fp32", "image_size": 8,
        ...        "channels": 3, "decode_s_per_sample": 1e-5, "augment_s_per_sample": 3e-5,
        ...        "compute_time_median_s": 2e-3, "step_time_median_s": 2.5e-3, "step_time_p90_s": 3e-3}
        >>> cfg = host_config(row, cpu_dilation=2.0)
        >>> round(cfg.transform_s * 1e6, 3), round(cfg.compute_s * 1e3, 3), cfg.compute_dist.kind
        (80.0, 4.0, 'lognormal')
    """
    rows = _rows(rows)
    if not (isinstance(cpu_dilation, (int, float)) and math.isfinite(cpu_dilation) and cpu_dilation > 0):
        raise ConfigError(f"cpu_dilation={cpu_dilation!r}: must be a finite number > 0")
    r0 = rows.iloc[0]
    kw = {k: (str(r0[k]) if k in ("feed", "precision") else int(r0[k])) for k in LOADER_FIELDS}
    b = kw["batch_size"]
    kw["transform_s"] = cpu_dilation * (_median(rows, "decode_s_per_sample") + _median(rows, "augment_s_per_sample"))
    step_col = next((c for c in ("compute_time_median_s", "device_resident_step_median_s") if c in rows), None)
    if step_col is None:
        raise ConfigError("rows lack column 'compute_time_median_s' (and 'device_resident_step_median_s'): "
                          "calibrate from experiments.train rows")
    kw["compute_s"] = cpu_dilation * _median(rows, step_col) / kw["grad_accum_steps"]
    ch = int(r0["channels"]) if "channels" in rows else 3
    side = int(r0["image_size"])
    kw["record_bytes"] = float(side * side * ch)
    kw["device_sample_bytes"] = float(side * side * ch * 4)
    x_cv, c_times = math.nan, None
    if steps is not None and len(steps):
        if "phase" not in steps or "compute_s" not in steps:
            raise ConfigError("steps lack column 'phase' or 'compute_s': pass the run's steps.csv")
        fed = steps[(steps["phase"] == "fed") & ~steps.get("warmup", pd.Series(False, index=steps.index)).astype(bool)]
        stamps = [c for c in ("t_decode", "t_augment") if c in fed]
        if stamps:
            x_cv = _cv(fed[stamps].sum(axis=1)) * math.sqrt(b)  # per batch → per sample
        c = pd.to_numeric(fed["compute_s"], errors="coerce").to_numpy(float)
        c = c[np.isfinite(c) & (c > 0)]
        if len(c) >= 2:
            c_times = c
    kw["transform_dist"] = f"lognormal:{max(x_cv, MIN_CV) if x_cv == x_cv else 0.3:g}"
    if c_times is not None:
        from memsim.distributions import Dist
        kw["compute_dist"] = Dist.empirical(c_times)
    else:
        ratio = _median(rows, "step_time_p90_s") / _median(rows, "step_time_median_s") \
            if {"step_time_p90_s", "step_time_median_s"} <= set(rows) else math.nan
        sigma = math.log(ratio) / P90_Z if ratio == ratio and ratio > 1 else 0.0
        kw["compute_dist"] = f"lognormal:{max(math.sqrt(math.expm1(sigma * sigma)), MIN_CV):g}"
    return PipelineConfig(**kw)


def match_rate(cfg: PipelineConfig, samples_per_s: float, *, n_items: int = 400, seed: int = 0,
               factors=tuple(np.geomspace(0.25, 8.0, 41))) -> float:
    """The factor on the CPU times (transform and step) at which one simulated host runs at ``samples_per_s``.

    One vmapped sweep over ``factors``; log-linear interpolation between them.

    Args:
        cfg: the host calibrated from its stage times (:func:`host_config`).
        samples_per_s: the same host's measured single-process rate.
        n_items, seed: simulation length and seed.
        factors: candidate factors, increasing.

    Returns:
        The factor (use it as ``host_config(..., cpu_dilation=factor × dilation)``).

    Example:
        >>> cfg = PipelineConfig(batch_size=10, num_workers=1, transform_s=1e-3, compute_s=1e-3,
        ...                      transform_dist="deterministic", compute_dist="deterministic",
        ...                      record_bytes=0, device_sample_bytes=0, transfer_latency_s=0)
        >>> round(match_rate(cfg, 500.0, n_items=200), 3)  # 10 ms of transform a batch: 1000/s; at 2×, 500/s
        2.0
    """
    if not (isinstance(samples_per_s, (int, float, np.floating)) and math.isfinite(samples_per_s) and samples_per_s > 0):
        raise ConfigError(f"samples_per_s={samples_per_s!r}: must be a measured rate > 0")
    ks = np.asarray(factors, float)
    grid = [dataclasses.replace(cfg, transform_s=cfg.transform_s * k, compute_s=cfg.compute_s * k) for k in ks]
    rate = sweep(grid, n_items=n_items, seed=seed)["samples_per_s"].to_numpy()
    rate = np.minimum.accumulate(rate)  # non-increasing in the factor (Monte-Carlo noise aside)
    if not rate[-1] <= samples_per_s <= rate[0]:
        raise ConfigError(f"samples_per_s={samples_per_s:.4g}: outside what factors {ks[0]:g}..{ks[-1]:g} on the "
                          f"CPU times give ({rate[-1]:.4g}..{rate[0]:.4g}); the calibration does not describe "
                          f"this host")
    return float(np.exp(np.interp(np.log(samples_per_s), np.log(rate[::-1]), np.log(ks[::-1]))))


def predict_stragglers(normal: PipelineConfig | None, slow: PipelineConfig | None, n: int, *,
                       slow_count: int = 1, allreduce_s: float = 0.0, n_items: int = 1000, seed: int = 0) -> dict:
    """Predicted global throughput of ``n`` synchronous processes, ``slow_count`` of them slowed.

    Args:
        normal: a normal process's calibrated configuration (None when every process is slowed).
        slow: a slowed process's (None when none is).
        n: number of processes.
        slow_count: slowed processes among them.
        allreduce_s: seconds of the cross-process gradient reduction, measured apart (>= 0; 0 for
            one process); added to every host's ``update_s``, i.e. once to every step.
        n_items, seed: simulation length and seed.

    Returns:
        dict: ``predicted_samples_per_s`` (global), its batch-means ``predicted_samples_per_s_stderr``,
        ``predicted_steps_per_s``, ``predicted_data_wait_frac``, ``predicted_bound_samples_per_s``
        and ``predicted_bottleneck``.

    Example:
        >>> det = dict(transform_dist="lognormal:0.001", compute_dist="deterministic", batch_size=8,
        ...            num_workers=1, compute_s=0.004, record_bytes=0, device_sample_bytes=0)
        >>> p = predict_stragglers(PipelineConfig(transform_s=1e-4, **det),
        ...                        PipelineConfig(transform_s=1e-3, **det), 2, n_items=200)
        >>> round(p["predicted_samples_per_s"] / p["predicted_bound_samples_per_s"], 2)
        1.0
        >>> fast = dict(det, compute_s=0.001)  # compute-bound: 8 / (1 ms + 3 ms of all-reduce) per host
        >>> p = predict_stragglers(PipelineConfig(transform_s=1e-5, **fast), None, 2, slow_count=0,
        ...                        allreduce_s=0.003, n_items=200)
        >>> round(p["predicted_samples_per_s"])
        4000
    """
    if not (isinstance(allreduce_s, (int, float, np.floating)) and math.isfinite(allreduce_s) and allreduce_s >= 0):
        raise ConfigError(f"allreduce_s={allreduce_s!r}: must be a measured time >= 0 seconds")
    if slow_count and slow is None:
        raise ConfigError(f"slow_count={slow_count}: needs a slowed host's calibration (slow=None)")
    if slow_count < n and normal is None:
        raise ConfigError(f"slow_count={slow_count} < n={n}: needs a normal host's calibration (normal=None)")
    if allreduce_s:
        normal, slow = (None if c is None else dataclasses.replace(c, update_s=c.update_s + float(allreduce_s))
                        for c in (normal, slow))
    base = normal if normal is not None else slow
    df = straggler_hosts(base, slow if slow is not None else base, hosts=(int(n),), slow_count=int(slow_count),
                         n_items=n_items, seed=seed)
    r = df.iloc[0]
    return {"predicted_samples_per_s": float(r.samples_per_s),
            "predicted_samples_per_s_stderr": float(r.samples_per_s_stderr),
            "predicted_steps_per_s": float(r.steps_per_s),
            "predicted_data_wait_frac": float(r.data_wait_frac),
            "predicted_bound_samples_per_s": float(r.bound_samples_per_s),
            "predicted_bottleneck": str(r.bottleneck)}


def compare(measured: pd.DataFrame, predicted: pd.DataFrame, on: str = "num_processes") -> pd.DataFrame:
    """Per ``on``: measured median samples/s with its interval over repeats beside the prediction.

    Args:
        measured: one row per multi-process run: ``on``, ``samples_per_s`` (global), ``status``.
        predicted: one row per ``on`` with ``predicted_samples_per_s`` (and anything else to keep).

    Returns:
        One row per ``on``: ``measured_samples_per_s`` (median), ``measured_lo``/``measured_hi``
        (``experiments.results.median_interval``; with 2 repeats the min–max), ``repeats``,
        the prediction's columns, ``rel_error`` (predicted / measured − 1) and
        ``within_interval``.

    Example:
        >>> m = pd.DataFrame({"num_processes": [1, 1, 2, 2], "samples_per_s": [100., 110., 150., 170.],
        ...                   "status": "ok"})
        >>> p = pd.DataFrame({"num_processes": [1, 2], "predicted_samples_per_s": [105., 200.]})
        >>> compare(m, p)[["num_processes", "measured_samples_per_s", "rel_error", "within_interval"]]
           num_processes  measured_samples_per_s  rel_error  within_interval
        0              1                   105.0       0.00             True
        1              2                   160.0       0.25            False
    """
    from experiments.results import median_interval
    for name, df, cols in (("measured", measured, (on, "samples_per_s")),
                           ("predicted", predicted, (on, "predicted_samples_per_s"))):
        missing = [c for c in cols if c not in df]
        if missing:
            raise ConfigError(f"{name} lacks column {missing[0]!r}")
    ok = measured[measured["status"] == "ok"] if "status" in measured else measured
    out = []
    for _, p in predicted.iterrows():
        v = pd.to_numeric(ok.loc[ok[on] == p[on], "samples_per_s"], errors="coerce").dropna().to_numpy()
        lo, hi, cov = median_interval(v)
        med = float(np.median(v)) if len(v) else math.nan
        pred = float(p["predicted_samples_per_s"])
        out.append({on: p[on], "measured_samples_per_s": med, "measured_lo": lo, "measured_hi": hi,
                    "interval_coverage": cov, "repeats": len(v),
                    **{k: p[k] for k in predicted.columns if k != on},
                    "rel_error": pred / med - 1 if med == med and med > 0 else math.nan,
                    "within_interval": bool(lo <= pred <= hi) if len(v) else False})
    out = pd.DataFrame(out)
    for c in predicted.columns:  # iterrows made every value of a mixed row an object or a float
        out[c] = predicted[c].to_numpy()
    return out
