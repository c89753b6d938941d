"""The staged input pipeline as a model: configuration, simulated sweeps and analytic bounds.

Stages, in order, as in the measured path (Grain loader → host prefetch → device feed → step):

1. **read** — each record of ``record_bytes`` crosses the storage link (``read_bandwidth_Bps``,
   one shared server) after a per-record latency (``read_latency_s``, overlapping between
   workers). A fraction ``cache_hit_rate`` of the records is served by the cache tier instead
   (``cache_bandwidth_Bps``, ``cache_latency_s``), e.g. the page cache; get the hit rate from
   :mod:`memsim.cache`.
2. **transform** — ``transform_s`` CPU seconds per sample in ``num_workers`` worker processes
   (k cyclic servers, as Grain hands batches to workers round-robin). A worker reads and
   transforms a whole batch of ``batch_size`` samples, then puts it in its own output queue of
   ``per_worker_buffer_size`` batches. ``num_workers=0``: the loader runs in one thread of the
   main process; if there is no host buffer either, that thread is the consumer's own thread, so
   loading is in series with the transfer (and, with ``feed='none'``, with the step).
3. **batch** — batching is part of the worker's work (its cost belongs in ``transform_s``).
4. **host buffer** — ``prefetch_buffer_size`` batches (a prefetch thread), plus ``cpu_buffer_size``
   more when ``feed='grain_device_put'`` (its host-side buffer; ignored by the other feeds). The
   sweep reports what was used as ``effective_host_buffer`` and ``effective_device_buffer``.
5. **transfer** — host→device copy, ``transfer_latency_s + batch_size·device_sample_bytes /
   transfer_bandwidth_Bps`` per batch, by a feed thread; with ``feed='none'`` it runs inside the
   step loop (in series with compute) and there is no device buffer.
6. **device buffer** — ``device_buffer_size`` batches already on the device
   (``feed='double_buffer'`` or ``'grain_device_put'``; ignored for ``'none'``).
7. **compute** — one optimizer step per loader batch, as in the measured path: the step splits the
   batch into ``grad_accum_steps`` micro-batches of ``batch_size / grad_accum_steps`` samples,
   each taking ``compute_s`` seconds (divided by ``bf16_speedup`` when ``precision='bf16'``),
   then applies the update (``update_s``).

Every buffer is finite and blocks its producer when full. Service times have a unit-mean shape
(:class:`memsim.distributions.Dist`) per stage: ``read_dist`` (per record, applied to the link
time), ``transform_dist`` (per sample, summed over the batch), ``transfer_dist`` (per batch),
``compute_dist`` (per micro-batch, summed over the step's micro-batches). A service time of 0
switches a stage off (used by the theory tests). The recurrences are in :mod:`memsim.maxplus`;
``memsim.pipeline_reference`` simulates the same model event by event.

``sweep`` returns one row per configuration with the same knob names as the measured rows, so
the two join on them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from jax.sharding import Mesh

from memsim import maxplus
from memsim.distributions import Dist, as_dist, batch_shape_params, stream_ids, unit_table
from memsim.knobs import FEEDS, PRECISIONS, ConfigError

STAGES = ("read", "transform", "transfer", "compute")
DIST_FIELDS = ("read_dist", "transform_dist", "transfer_dist", "compute_dist")

# integer fields: (lower, upper, what to do); float fields: (lower, lower inclusive, what to do)
_INT_RULES = {
    "num_workers": (0, 1024, "use 0 (loader in the main process) or a positive worker count"),
    "per_worker_buffer_size": (1, 256, "each worker's output queue holds at least one batch"),
    "prefetch_buffer_size": (0, 4096, "use 0 for no host prefetch buffer"),
    "cpu_buffer_size": (0, 4096, "use 0 for no extra host buffer"),
    "device_buffer_size": (0, 4096, "use 0 for no device buffer"),
    "batch_size": (1, 1 << 24, "a batch holds at least one sample"),
    "grad_accum_steps": (1, 1 << 16, "use 1 for no gradient accumulation"),
}
_POS = "must be a finite number > 0"
_NONNEG = "must be a finite number >= 0 (0 switches the term off)"
_FLOAT_RULES = {
    "record_bytes": (0.0, True, _NONNEG),
    "read_bandwidth_Bps": (0.0, False, _POS + " (bytes per second)"),
    "read_latency_s": (0.0, True, _NONNEG),
    "cache_hit_rate": (0.0, True, "must be a probability in [0, 1]"),
    "cache_bandwidth_Bps": (0.0, False, _POS + " (bytes per second)"),
    "cache_latency_s": (0.0, True, _NONNEG),
    "transform_s": (0.0, True, _NONNEG + "; CPU seconds per sample"),
    "device_sample_bytes": (0.0, True, _NONNEG),
    "transfer_bandwidth_Bps": (0.0, False, _POS + " (bytes per second)"),
    "transfer_latency_s": (0.0, True, _NONNEG),
    "compute_s": (0.0, True, _NONNEG + "; seconds per micro-batch"),
    "bf16_speedup": (0.0, False, _POS + " (compute time is divided by it for bf16)"),
    "update_s": (0.0, True, _NONNEG),
}
_CHOICES = {"feed": FEEDS, "precision": PRECISIONS}


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """One configuration of the input pipeline and training step.

    Defaults describe the measured CPU path (CIFAR-sized images held in RAM, a light augmentation,
    a small model) and are assumptions until calibrated. Knob names match the measured rows.

    Example:
        >>> cfg = PipelineConfig(num_workers=4, transform_s=2e-4, compute_s=0.005)
        >>> cfg.feed, str(cfg.transform_dist)
        ('double_buffer', 'lognormal:0.3')
        >>> PipelineConfig(num_workers=-1)
        Traceback (most recent call last):
        ...
        memsim.knobs.ConfigError: num_workers=-1: must be >= 0; use 0 (loader in the main process) or a positive worker count
    """

    # knobs shared with the measured rows
    num_workers: int = 2
    per_worker_buffer_size: int = 2
    prefetch_buffer_size: int = 2
    feed: str = "double_buffer"
    cpu_buffer_size: int = 4
    device_buffer_size: int = 2
    batch_size: int = 64
    grad_accum_steps: int = 1
    precision: str = "fp32"
    # read
    record_bytes: float = 3072.0
    read_bandwidth_Bps: float = 2e9
    read_latency_s: float = 0.0
    cache_hit_rate: float = 0.0
    cache_bandwidth_Bps: float = 1e10
    cache_latency_s: float = 0.0
    read_dist: Any = "deterministic"
    # transform (per sample, in a worker)
    transform_s: float = 1e-4
    transform_dist: Any = "lognormal:0.3"
    # host -> device
    device_sample_bytes: float = 12288.0
    transfer_bandwidth_Bps: float = 1.6e9
    transfer_latency_s: float = 5e-5
    transfer_dist: Any = "deterministic"
    # compute (per micro-batch)
    compute_s: float = 0.01        # per micro-batch
    compute_dist: Any = "lognormal:0.05"
    bf16_speedup: float = 1.0
    update_s: float = 0.0

    def __post_init__(self):
        for name in DIST_FIELDS:
            object.__setattr__(self, name, as_dist(name, getattr(self, name)))
        for name in _INT_RULES:
            check_scalar(name, getattr(self, name))
        for name in _FLOAT_RULES:
            check_scalar(name, getattr(self, name))
        for name, choices in _CHOICES.items():
            check_scalar(name, getattr(self, name))
        if self.batch_size % self.grad_accum_steps:
            raise ConfigError(f"grad_accum_steps={self.grad_accum_steps!r}: must divide batch_size "
                              f"({self.batch_size}); the step splits the batch into that many micro-batches")

    def with_links(self, read=None, cache=None, transfer=None) -> "PipelineConfig":
        """A copy with stage links taken from objects with ``bandwidth_Bps`` and ``latency_s``.

        Any object with these attributes works (for example ``memsim.hierarchy.Link``).

        Example:
            >>> class L: bandwidth_Bps, latency_s = 5e8, 1e-4
            >>> PipelineConfig().with_links(read=L()).read_latency_s
            0.0001
        """
        kw = {}
        for name, link in (("read", read), ("cache", cache), ("transfer", transfer)):
            if link is None:
                continue
            for attr in ("bandwidth_Bps", "latency_s"):
                if not hasattr(link, attr):
                    raise ConfigError(f"{name} link {link!r}: has no attribute {attr!r}; pass an "
                                      f"object with bandwidth_Bps (bytes/s) and latency_s (s)")
            kw[f"{name}_bandwidth_Bps"] = float(link.bandwidth_Bps)
            kw[f"{name}_latency_s"] = float(link.latency_s)
        return dataclasses.replace(self, **kw)

    def to_row(self) -> dict:
        """Fields as a flat dict (distributions as strings), as ``sweep`` writes them."""
        return {f.name: (str(v) if isinstance(v, Dist) else v)
                for f in dataclasses.fields(self) for v in [getattr(self, f.name)]}


FIELDS = tuple(f.name for f in dataclasses.fields(PipelineConfig))
KNOBS = ("num_workers", "per_worker_buffer_size", "prefetch_buffer_size", "feed", "cpu_buffer_size",
         "device_buffer_size", "batch_size", "grad_accum_steps", "precision")


def check_scalar(name: str, value) -> None:
    """Check one value of a :class:`PipelineConfig` field; raise a one-line ``ConfigError`` if bad.

    Fields without a rule (the distributions, unknown names) pass. Used by ``PipelineConfig`` and
    by callers that validate a knob value before building configurations.

    >>> check_scalar("num_workers", 4)
    >>> check_scalar("num_workers", -1)
    Traceback (most recent call last):
    ...
    memsim.knobs.ConfigError: num_workers=-1: must be >= 0; use 0 (loader in the main process) or a positive worker count
    """
    if name in _INT_RULES:
        lo, hi, what = _INT_RULES[name]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            if not (isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer()):
                raise ConfigError(f"{name}={value!r}: expected an integer; {what}")
        if value < lo:
            raise ConfigError(f"{name}={value!r}: must be >= {lo}; {what}")
        if value > hi:
            raise ConfigError(f"{name}={value!r}: must be <= {hi}")
    elif name in _FLOAT_RULES:
        lo, inclusive, what = _FLOAT_RULES[name]
        ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
        ok = ok and math.isfinite(value) and (value >= lo if inclusive else value > lo)
        if name == "cache_hit_rate":
            ok = ok and value <= 1.0
        if not ok:
            raise ConfigError(f"{name}={value!r}: {what}")
    elif name in _CHOICES:
        if value not in _CHOICES[name]:
            raise ConfigError(f"{name}={value!r}: expected one of {_CHOICES[name]}")


def _check_columns(frame: pd.DataFrame) -> None:
    """Vectorised version of the per-field checks; the error names field, value and row."""
    for name in frame.columns:
        col = frame[name]
        if name in DIST_FIELDS:
            continue
        if name in _CHOICES:
            bad = ~col.isin(_CHOICES[name])
        else:
            vals = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)
            if name in _INT_RULES:
                lo, hi, _ = _INT_RULES[name]
                bad = ~np.isfinite(vals) | (vals != np.round(vals)) | (vals < lo) | (vals > hi)
            else:
                lo, inclusive, _ = _FLOAT_RULES[name]
                bad = ~np.isfinite(vals) | ((vals < lo) if inclusive else (vals <= lo))
                if name == "cache_hit_rate":
                    bad |= vals > 1
            if col.dtype == bool:
                bad[:] = True
        bad = np.asarray(bad)
        if bad.any():
            i = int(np.argmax(bad))
            v = col.iloc[i]
            v = v.item() if isinstance(v, np.generic) else v
            if name in _INT_RULES and isinstance(v, float) and v.is_integer():
                v = int(v)
            try:
                check_scalar(name, v)
            except ConfigError as e:
                head = f"{name}={v!r}"
                msg = str(e)
                msg = f"{head} (grid row {i}){msg[len(head):]}" if msg.startswith(head) else f"{msg} (grid row {i})"
                raise ConfigError(msg) from None
            raise ConfigError(f"{name}={col.iloc[i]!r} (grid row {i}): invalid")


# ------------------------------------------------------------------------------------ grids

def grid_frame(grid, base: PipelineConfig) -> pd.DataFrame:
    """Every configuration as a row of all :data:`FIELDS`, validated (the input of :func:`simulate_frame`).

    Args:
        grid: a mapping of field -> values (their product), a DataFrame of configurations (one
            per row; missing fields from ``base``) or a list of :class:`PipelineConfig`.
        base: the values of the fields ``grid`` does not give.

    Returns:
        One row per configuration, the distribution fields as categorical columns of
        :class:`~memsim.distributions.Dist`. Bad values raise ``ConfigError`` naming the field,
        value and grid row.

    >>> grid_frame({"num_workers": [1, 2], "batch_size": [32]}, PipelineConfig())["num_workers"].tolist()
    [1.0, 2.0]
    """
    base_row = {f: getattr(base, f) for f in FIELDS}
    if isinstance(grid, PipelineConfig):
        grid = [grid]
    if isinstance(grid, pd.DataFrame):
        if len(grid) == 0:
            raise ConfigError("grid: the DataFrame has no rows; pass at least one configuration")
        use = [c for c in grid.columns if c in FIELDS]
        frame = pd.DataFrame({c: grid[c].to_numpy() for c in use})
        for f in FIELDS:
            if f not in frame:
                frame[f] = [base_row[f]] * len(frame)
        for c in use:
            if c not in DIST_FIELDS and frame[c].isna().any():
                i = int(np.argmax(frame[c].isna().to_numpy()))
                raise ConfigError(f"{c}=nan (grid row {i}): missing value; fill it (e.g. with the "
                                  f"base config's {base_row[c]!r}) or drop the row")
    elif isinstance(grid, Mapping):
        if not grid:
            raise ConfigError("grid: empty mapping; give at least one field with a list of values")
        unknown = [k for k in grid if k not in FIELDS]
        if unknown:
            raise ConfigError(f"grid key {unknown[0]!r}: not a PipelineConfig field; known fields: "
                              f"{', '.join(FIELDS)}")
        values = {}
        for k, v in grid.items():
            v = [v] if isinstance(v, (str, Dist)) or np.isscalar(v) else list(v)
            if len(v) == 0:
                raise ConfigError(f"grid key {k!r}: empty list of values; give at least one")
            values[k] = v
        sizes = [len(v) for v in values.values()]
        n = int(np.prod(sizes))
        idx = dict(zip(values, np.indices(sizes).reshape(len(sizes), n)))
        cols = {}
        for f in FIELDS:
            vals = values.get(f, [base_row[f]])
            pick = idx[f] if f in values else np.zeros(n, np.int64)
            if f in DIST_FIELDS:  # a categorical column: few distinct shapes, many rows
                parsed = [as_dist(f, v) for v in vals]
                codes, cats = pd.factorize(pd.Series(parsed, dtype=object))
                cols[f] = pd.Categorical.from_codes(codes[pick], categories=pd.Index(cats, dtype=object))
                continue
            arr = np.empty(len(vals), dtype=object)
            arr[:] = vals
            col = arr[pick]
            if f not in DIST_FIELDS and f not in _CHOICES and all(
                    isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)
                    for x in vals):
                col = col.astype(np.float64)
            cols[f] = col
        frame = pd.DataFrame(cols)
        frame = frame[list(FIELDS)]
    elif isinstance(grid, Iterable):
        rows = list(grid)
        if not rows:
            raise ConfigError("grid: empty list of configurations; give at least one")
        bad = [r for r in rows if not isinstance(r, PipelineConfig)]
        if bad:
            raise ConfigError(f"grid item {bad[0]!r}: expected PipelineConfig objects")
        frame = pd.DataFrame({f: [getattr(r, f) for r in rows] for f in FIELDS})
    else:
        raise ConfigError(f"grid={grid!r}: expected a mapping of field -> values, a DataFrame or "
                          f"a list of PipelineConfig")
    for name in DIST_FIELDS:
        if isinstance(frame[name].dtype, pd.CategoricalDtype):
            continue
        codes, uniques = pd.factorize(pd.Series(frame[name].to_numpy(), dtype=object).map(
            lambda v: v if isinstance(v, (str, Dist)) else repr(v)))
        parsed = pd.Series([as_dist(name, v) for v in uniques], dtype=object)
        sub, cats = pd.factorize(parsed)  # equal shapes written differently share a category
        frame[name] = pd.Categorical.from_codes(sub[codes], categories=pd.Index(cats, dtype=object))
    _check_columns(frame[[c for c in FIELDS if c not in DIST_FIELDS]])
    bs = frame["batch_size"].to_numpy(np.int64)
    ga = frame["grad_accum_steps"].to_numpy(np.int64)
    if np.any(bs % ga):
        i = int(np.argmax(bs % ga != 0))
        raise ConfigError(f"grad_accum_steps={ga[i]} (grid row {i}): must divide batch_size ({bs[i]}); "
                          f"the step splits the batch into that many micro-batches")
    return frame.reset_index(drop=True)


# ------------------------------------------------------------------------- derived numbers

def derived(frame: pd.DataFrame) -> dict:
    """Per-row effective structure and mean service times per item (numpy arrays).

    Keys: ``b`` (batch size), ``k`` (transform servers), ``no_workers``, ``host_buffer`` and
    ``device_buffer`` (effective slots), ``feed_none``, ``p`` (per-worker queue), ``accum``,
    ``lat`` (read latency per batch), ``mR``, ``mX``, ``mT``, ``mC`` (mean read, transform,
    transfer and compute seconds per batch), ``upd`` (update seconds) and ``merged`` (loader in
    the consumer's thread).

    Args:
        frame: from :func:`grid_frame`.
    """
    g = {c: frame[c].to_numpy() for c in FIELDS if c not in DIST_FIELDS}
    f = lambda c: np.asarray(g[c], dtype=np.float64)  # noqa: E731
    i = lambda c: np.asarray(g[c], dtype=np.int64)  # noqa: E731
    feed = np.asarray(g["feed"], dtype=object)
    b = f("batch_size")
    h = f("cache_hit_rate")
    workers = i("num_workers")
    d = {
        "b": b,
        "k": np.maximum(workers, 1),
        "no_workers": workers == 0,
        "host_buffer": i("prefetch_buffer_size") + np.where(feed == "grain_device_put", i("cpu_buffer_size"), 0),
        "device_buffer": np.where(feed == "none", 0, i("device_buffer_size")),
        "feed_none": feed == "none",
        "p": i("per_worker_buffer_size"),
        "accum": i("grad_accum_steps"),
        "lat": b * (h * f("cache_latency_s") + (1 - h) * f("read_latency_s")),
        "mR": b * f("record_bytes") * (h / f("cache_bandwidth_Bps") + (1 - h) / f("read_bandwidth_Bps")),
        "mX": b * f("transform_s"),
        "mT": f("transfer_latency_s") + b * f("device_sample_bytes") / f("transfer_bandwidth_Bps"),
        "mC": f("grad_accum_steps") * f("compute_s")
              / np.where(np.asarray(g["precision"]) == "bf16", f("bf16_speedup"), 1.0),
        "upd": f("update_s"),
    }
    d["merged"] = d["no_workers"] & (d["host_buffer"] == 0)
    return d


def servers(d: dict) -> tuple[np.ndarray, np.ndarray]:
    """The physical servers of each row and their loads.

    Returns:
        (loads, labels): ``loads[s, row]`` is server s's mean busy seconds per item divided by its
        number of servers (the read link, the workers, the feed thread, the step thread; stages
        that share a thread are merged into one server), ``labels[s, row]`` names its stages.
    """
    n = len(d["b"])
    worker = d["lat"] + d["mR"] + d["mX"]
    comp = d["mC"] + d["upd"]
    merged, none = d["merged"], d["feed_none"]
    load_w = np.where(merged, 0.0, worker / d["k"])
    load_t = np.where(none, 0.0, d["mT"] + np.where(merged, worker, 0.0))
    load_c = comp + np.where(none, d["mT"] + np.where(merged, worker, 0.0), 0.0)
    lab_t = np.where(merged, "transform+transfer", "transfer")
    lab_c = np.where(none, np.where(merged, "transform+transfer+compute", "transfer+compute"), "compute")
    labels = np.stack([np.full(n, "read", dtype=object), np.full(n, "transform", dtype=object),
                       lab_t.astype(object), lab_c.astype(object)])
    return np.stack([d["mR"], load_w, load_t, load_c]), labels


def analytic_bounds(frame_or_configs) -> pd.DataFrame:
    """Deterministic throughput bounds per configuration.

    * ``bottleneck_bound_samples_per_s``: the slowest server's rate, servers / mean service time
      (exact for deterministic times; an upper bound otherwise);
    * ``serial_bound_samples_per_s``: every stage of a batch in series, no overlap at all:
      ``batch_size / (latency + read + transform + transfer + compute)`` per batch.

    Args:
        frame_or_configs: a grid as accepted by :func:`sweep`.

    Returns:
        DataFrame with the two bounds, ``bottleneck_bound_stage`` and ``bottleneck_bound_steps_per_s``.

    Example:
        >>> cfg = PipelineConfig(num_workers=2, batch_size=10, transform_s=0.01, compute_s=0.02,
        ...                      record_bytes=0, device_sample_bytes=0, transfer_latency_s=0)
        >>> b = analytic_bounds([cfg]).iloc[0]
        >>> float(b.bottleneck_bound_samples_per_s), b.bottleneck_bound_stage
        (200.0, 'transform')
    """
    frame = frame_or_configs if isinstance(frame_or_configs, pd.DataFrame) and "bottleneck_bound_samples_per_s" in frame_or_configs else grid_frame(frame_or_configs, PipelineConfig())
    return _bounds(frame, derived(frame))


def _bounds(frame: pd.DataFrame, d: dict) -> pd.DataFrame:
    loads, names = servers(d)  # (servers, rows)
    worst = np.argmax(loads, axis=0)
    cols = np.arange(loads.shape[1])
    peak = loads[worst, cols]
    with np.errstate(divide="ignore"):
        items_bound = np.where(peak > 0, 1.0 / np.where(peak > 0, peak, 1.0), np.inf)
        serial = d["lat"] + d["mR"] + d["mX"] + d["mT"] + d["mC"] + d["upd"]
        serial_items = np.where(serial > 0, 1.0 / np.where(serial > 0, serial, 1.0), np.inf)
    labels = names[worst, cols]
    return pd.DataFrame({
        "bottleneck_bound_samples_per_s": items_bound * d["b"],
        "bottleneck_bound_steps_per_s": items_bound,
        "serial_bound_samples_per_s": serial_items * d["b"],
        "bottleneck_bound_stage": labels,
    })


# --------------------------------------------------------------------------- simulation

@dataclasses.dataclass(frozen=True)
class SimOptions:
    """How long and how carefully to simulate.

    Args:
        n_items: loader batches simulated per configuration (rounded up to whole chunks).
        warmup_frac: leading fraction of the items discarded before measuring.
        n_batches: batches of the batch-means Monte-Carlo error estimate.
        seed: random seed; a row's numbers depend on (seed, row position in the grid).
        dtype: ``"float32"`` (fast) or ``"float64"``.
    """

    n_items: int = 2000
    warmup_frac: float = 0.2
    n_batches: int = 8
    seed: int = 0
    dtype: str = "float32"

    def __post_init__(self):
        if not isinstance(self.n_batches, (int, np.integer)) or self.n_batches < 2:
            raise ConfigError(f"n_batches={self.n_batches!r}: need at least 2 batches for an error estimate")
        if not (0 <= self.warmup_frac < 1):
            raise ConfigError(f"warmup_frac={self.warmup_frac!r}: must be in [0, 1)")
        if not isinstance(self.n_items, (int, np.integer)) or self.n_items < 1:
            raise ConfigError(f"n_items={self.n_items!r}: must be a positive integer")
        if self.dtype not in ("float32", "float64"):
            raise ConfigError(f"dtype={self.dtype!r}: expected 'float32' or 'float64'")
        if not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ConfigError(f"seed={self.seed!r}: must be an integer >= 0")

    @property
    def layout(self) -> tuple[int, int, int]:
        """(warm-up chunks, total chunks, items per chunk)."""
        warm = 0 if self.warmup_frac == 0 else max(1, round(self.warmup_frac * self.n_batches / (1 - self.warmup_frac)))
        total = warm + self.n_batches
        chunk = max(1, -(-self.n_items // total))
        if self.n_items < total:
            raise ConfigError(f"n_items={self.n_items}: too few for {self.n_batches} batches after "
                              f"{warm} warm-up chunks; use at least {total} (better hundreds)")
        return warm, total, chunk


def seed_key(seed: int) -> int:
    return int(stream_ids(np.array([0xFFFFFFFF]), seed)[0])


def _lane_arrays(frame: pd.DataFrame, d: dict, rows: np.ndarray) -> tuple[dict, tuple, tuple]:
    """Per-lane kernel inputs for ``rows`` (which share their distribution kinds/tables)."""
    stage_dists = [frame[n].iloc[rows[0]] for n in DIST_FIELDS]
    per_sample = [d["b"][rows], d["b"][rows], np.ones(len(rows)), d["accum"][rows]]
    samplers, params, tables = [], [], []
    for dist, n in zip(stage_dists, per_sample):
        kind, p = batch_shape_params(dist, n)
        if kind == "gamma" and np.all(p == 1.0):
            kind = "exp"
        samplers.append(kind)
        params.append(p)
        tables.append(unit_table(dist))
    lanes = {"lat": d["lat"][rows], "mR": d["mR"][rows], "pR": params[0], "mX": d["mX"][rows],
             "pX": params[1], "mT": d["mT"][rows], "pT": params[2], "mC": d["mC"][rows],
             "pC": params[3], "upd": d["upd"][rows]}
    return lanes, tuple(samplers), tuple(tables)


def _tile_key(d: dict) -> np.ndarray:
    """Ring lags per row: k, p·k, B_H, B_D (1 where the ring is not used)."""
    k = np.where(d["no_workers"], 1, d["k"])
    q = np.where(d["no_workers"], 1, d["p"] * d["k"])
    h = np.maximum(d["host_buffer"], 1)
    dv = np.maximum(d["device_buffer"], 1)
    return np.stack([k, q, h, dv], axis=1)


def _dist_key(frame: pd.DataFrame) -> np.ndarray:
    keys = []
    for n in DIST_FIELDS:
        col = frame[n].array  # Categorical of Dist (see grid_frame)
        sub = pd.factorize(pd.Series([(c.kind, c.samples) for c in col.categories], dtype=object))[0]
        keys.append(sub[np.asarray(col.codes)])
    return np.stack(keys, axis=1)


def _row_codes(keys: np.ndarray) -> np.ndarray:
    """One int64 code per row of an integer key matrix (equal rows, equal codes)."""
    code = np.zeros(len(keys), np.int64)
    for col in keys.T:
        u, inv = np.unique(col, return_inverse=True)
        code = code * len(u) + inv.ravel()
    return code


def simulate_frame(frame: pd.DataFrame, opts: SimOptions, *, stream_rows: np.ndarray | None = None,
                   coupled_hosts: np.ndarray | None = None, trace: bool = False, mesh: Mesh | None = None) -> dict:
    """Runs the kernel for every row of a validated grid frame; raw per-row sums.

    Args:
        frame: from ``grid_frame``.
        opts: simulation options.
        stream_rows: random stream number per row (default: the row position).
        coupled_hosts: internal (many-hosts): rows with the same value form one synchronous step.
        trace: also return every item's times (one chunk of ``n_items``; no warm-up).
        mesh: the devices to spread configurations over, a ``jax.sharding.Mesh`` with an axis
            named ``"configs"`` (``memsim.config_mesh(devices)``); default: every local device.
            The numbers do not depend on it.

    Returns:
        dict with ``accs`` (rows, chunks, n_acc), ``ends`` (rows, chunks), ``first`` (rows,),
        the derived numbers ``d`` and, with ``trace``, ``trace`` (field -> (rows, items)).
    """
    warm, total, chunk = (0, 1, opts.n_items) if trace else opts.layout
    mesh = maxplus.check_mesh(mesh)
    d = derived(frame)
    n = len(frame)
    streams = stream_ids(np.arange(n) if stream_rows is None else stream_rows, opts.seed)
    fdt = np.float64 if opts.dtype == "float64" else np.float32
    accs = np.zeros((n, total, len(maxplus.ACC_NAMES)), fdt)
    ends = np.zeros((n, total), fdt)
    first = np.zeros(n)
    traces = {k: np.zeros((n, total * chunk), fdt) for k in maxplus.TRACE_NAMES} if trace else None
    tkey = _tile_key(d)
    tiles_of_step: dict[int, int] = {}  # coupled step -> number of tiles holding its hosts
    gkey = _dist_key(frame)
    gcode = _row_codes(gkey)
    for g in np.unique(gcode):
        g_rows = np.flatnonzero(gcode == g)
        per_lane = [s[1] for s in maxplus.ring_layout({k: tkey[g_rows, i] for i, k in
                                                      enumerate(("lag_w", "lag_q", "lag_h", "lag_d"))})]
        cols = [tkey[g_rows, i] for i in range(4) if not per_lane[i]]
        if coupled_hosts is not None:
            cols.append(coupled_hosts[g_rows])
        fcode = _row_codes(np.stack(cols, axis=1)) if cols else np.zeros(len(g_rows), np.int64)
        classes, inverse, counts = np.unique(fcode, return_inverse=True, return_counts=True)
        order = np.argsort(inverse.ravel(), kind="stable")
        members = np.split(g_rows[order], np.cumsum(counts)[:-1])
        if coupled_hosts is not None:
            width = maxplus.pow2(int(counts.max()))
        else:
            width = maxplus.choose_tile_width(counts)
        if coupled_hosts is not None or len(members) == 1:
            width = max(width, 32)  # small sweeps share one compiled shape; spare lanes are cheap
        tiles = []
        for m in members:
            for s in range(0, len(m), width):
                part = m[s:s + width]
                tiles.append(np.concatenate([part, np.full(width - len(part), part[0])]))
        idx = np.stack(tiles)  # (G, M) row numbers
        if coupled_hosts is not None:
            for t in idx:
                for step in np.unique(coupled_hosts[t]):
                    tiles_of_step[int(step)] = tiles_of_step.get(int(step), 0) + 1
        lanes, samplers, tables = _lane_arrays(frame, d, idx.ravel())
        lanes = {k: np.asarray(v).reshape(idx.shape) for k, v in lanes.items()}
        lanes["stream"] = streams[idx]
        tile = {"lag_w": tkey[idx, 0], "lag_q": tkey[idx, 1], "lag_h": tkey[idx, 2],
                "lag_d": tkey[idx, 3], "no_workers": d["no_workers"][idx], "merged": d["merged"][idx],
                "host0": d["host_buffer"][idx] == 0, "dev0": d["device_buffer"][idx] == 0,
                "feed_none": d["feed_none"][idx]}
        a, e, fst, tr = maxplus.run_tiles(lanes, tile, tables, samplers=samplers, n_chunks=total,
                                          chunk=chunk, coupled=coupled_hosts is not None, trace=trace,
                                          seed_key=seed_key(opts.seed), dtype=opts.dtype, mesh=mesh)
        if trace:  # (G, chunks, chunk, M) -> (G*M, items)
            for k, v in zip(maxplus.TRACE_NAMES, tr):
                traces[k][idx.ravel()] = np.transpose(v, (0, 3, 1, 2)).reshape(idx.size, -1)
        flat_rows = idx.ravel()  # a: (G, M, chunks, kernel sums) -> rows
        names = maxplus.kernel_acc_names(samplers)
        a = a.reshape(-1, total, len(names))
        for i, name in enumerate(names):
            accs[flat_rows, :, maxplus.ACC_NAMES.index(name)] = a[:, :, i]
        _fill_deterministic_busy(accs, g_rows, names, d, total, chunk)
        ends[flat_rows] = e.reshape(-1, total)
        first[flat_rows] = fst.ravel()
    split = [s for s, count in tiles_of_step.items() if count > 1]
    if split:  # the kernel couples the lanes of one tile only
        rows = np.flatnonzero(coupled_hosts == split[0])
        raise ConfigError(f"coupled_hosts={split[0]} (grid rows {rows.min()}..{rows.max()}): the hosts of one "
                          f"step differ in distribution kinds or in a buffer larger than "
                          f"{maxplus.LANE_RING_MAX} batches, so they cannot share a tile; make them equal")
    return {"accs": accs, "ends": ends, "first": first, "d": d, "layout": (warm, total, chunk),
            "trace": traces}


def _fill_deterministic_busy(accs, rows, kernel_names, d, total, chunk) -> None:
    """Per-chunk busy sums of deterministic stages, in closed form (the kernel skips them)."""
    for name in ("busy_compute", "busy_transfer", "busy_workers", "busy_link"):
        if name in kernel_names:
            continue
        per = {"busy_compute": d["mC"] + d["upd"], "busy_transfer": d["mT"],
               "busy_workers": d["lat"] + d["mR"] + d["mX"], "busy_link": d["mR"]}[name]
        val = np.broadcast_to(chunk * per[rows][:, None], (len(rows), total))
        accs[rows, :, maxplus.ACC_NAMES.index(name)] = val


def _ratio_stderr(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Batch-means standard error of sum(num)/sum(den) (delta method), along the last axis."""
    m = num.shape[-1]
    r = num.sum(-1) / den.sum(-1)
    resid = num - r[..., None] * den
    return np.sqrt((resid**2).sum(-1) / (m * (m - 1))) / den.mean(-1)


def summarize(raw: dict, frame: pd.DataFrame) -> pd.DataFrame:
    """Rates, fractions, occupancies and their Monte-Carlo errors from the kernel's sums."""
    warm, total, chunk = raw["layout"]
    d = raw["d"]
    ends = raw["ends"].astype(np.float64)
    starts = np.concatenate([np.zeros((len(ends), 1)), ends[:, :-1]], axis=1)
    dur = (ends - starts)[:, warm:]                       # (rows, batches)
    acc = {k: raw["accs"][:, warm:, i].astype(np.float64) for i, k in enumerate(maxplus.ACC_NAMES)}
    span = dur.sum(1)
    n_win = chunk * (total - warm)
    with np.errstate(divide="ignore", invalid="ignore"):
        items_per_s = n_win / span
        items_se = _ratio_stderr(np.full_like(dur, chunk), dur)
        frac = lambda k: acc[k].sum(1) / span  # noqa: E731
        _, names = servers(d)
        merged, none = d["merged"], d["feed_none"]
        util_read = frac("busy_link")
        util_transform = frac("busy_workers") / d["k"]
        util_transfer = frac("busy_transfer")
        util_compute = frac("busy_compute")
        server_util = np.stack([
            util_read,
            np.where(merged, 0.0, util_transform),
            np.where(none, 0.0, util_transfer + np.where(merged, util_transform, 0.0)),
            util_compute + np.where(none, util_transfer + np.where(merged, util_transform, 0.0), 0.0),
        ])
        worst = np.argmax(server_util, axis=0)
        bottleneck = names[worst, np.arange(len(worst))]
        wait = 1.0 - util_compute
        wait_se = _ratio_stderr(acc["busy_compute"], dur)
    unit = lambda v: np.clip(v, 0.0, 1.0)  # noqa: E731 — float32 sums overshoot by ~1e-7
    pos = lambda v: np.maximum(v, 0.0)  # noqa: E731
    out = pd.DataFrame({
        "samples_per_s": items_per_s * d["b"],
        "steps_per_s": items_per_s,
        "data_wait_frac": unit(wait),
        "step_time_mean_s": 1.0 / items_per_s,
        "util_read": unit(util_read),
        "util_transform": unit(util_transform),
        "util_transfer": unit(util_transfer),
        "util_compute": unit(util_compute),
        "blocked_transform_frac": unit(frac("blocked_workers") / d["k"]),
        "blocked_transfer_frac": unit(frac("blocked_transfer")),
        "mean_occupancy_worker_queues": pos(frac("sojourn_worker_queues")),
        "mean_occupancy_host_buffer": pos(frac("sojourn_host_buffer")),
        "mean_occupancy_device_buffer": pos(frac("sojourn_device_buffer")),
        "time_to_first_batch_s": raw["first"],
        "bottleneck": bottleneck,
        "samples_per_s_stderr": items_se * d["b"],
        "steps_per_s_stderr": items_se,
        "data_wait_frac_stderr": wait_se,
        "effective_host_buffer": d["host_buffer"],
        "effective_device_buffer": d["device_buffer"],
        "sim_items": chunk * total,
        "sim_warmup_items": chunk * warm,
    })
    bounds = _bounds(frame, d)
    out = pd.concat([out, bounds], axis=1)
    lo, hi = out["serial_bound_samples_per_s"], out["bottleneck_bound_samples_per_s"]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["bound_position"] = np.where(hi > lo, (out["samples_per_s"] - lo) / (hi - lo), 1.0)
    return out


def config_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """The grid's fields as plain columns (distributions written as strings)."""
    out = frame.copy()
    for n in DIST_FIELDS:
        col = frame[n].array
        out[n] = np.asarray([str(c) for c in col.categories], dtype=object)[np.asarray(col.codes)]
    for n in _INT_RULES:
        out[n] = out[n].astype(np.int64)
    for n in _FLOAT_RULES:
        out[n] = out[n].astype(np.float64)
    return out


def sweep(grid, base: PipelineConfig | None = None, *, n_items: int = 2000, warmup_frac: float = 0.2,
          n_batches: int = 8, seed: int = 0, dtype: str = "float32", mesh: Mesh | None = None) -> pd.DataFrame:
    """Simulates every configuration of ``grid``; one row per configuration.

    Args:
        grid: a mapping ``field -> values`` (Cartesian product over ``base``), a DataFrame whose
            columns that are ``PipelineConfig`` fields override ``base`` row by row (others are
            ignored, so measured rows can be passed as they are), or a list of ``PipelineConfig``.
        base: the configuration the grid varies (default ``PipelineConfig()``).
        n_items, warmup_frac, n_batches, seed, dtype: see :class:`SimOptions`.
        mesh: a ``jax.sharding.Mesh`` with an axis named ``"configs"`` to spread the
            configurations over (``memsim.config_mesh(devices)`` builds one); default: every
            local device. Each configuration's random stream is keyed by its grid row, so the
            rows are identical on any mesh. A mesh over several processes (``jax.distributed``,
            ``memsim.config_mesh(jax.devices())``): every process calls ``sweep`` with the same
            arguments, simulates the configurations of its devices, and gets the whole DataFrame.

    Returns:
        DataFrame: every config field (knobs named as in the measured rows), then
        ``samples_per_s``, ``steps_per_s``, ``data_wait_frac`` (fraction of time the accelerator
        is not computing: waiting for data, or transferring in the step loop), per-stage
        ``util_*`` (busy fraction of the stage's servers), ``blocked_*_frac``,
        ``mean_occupancy_*`` per buffer (batches), ``time_to_first_batch_s``, ``bottleneck``
        (stage(s) of the busiest server), ``*_stderr`` (batch means), the analytic bounds
        ``bottleneck_bound_samples_per_s`` and ``serial_bound_samples_per_s``,
        ``bound_position`` (0 = serial bound, 1 = bottleneck bound) and ``grid_row``.

    Example:
        >>> df = sweep({"num_workers": [1, 4]}, PipelineConfig(transform_s=1e-3, compute_s=0.02,
        ...            transform_dist="deterministic", compute_dist="deterministic"), n_items=400)
        >>> df[["num_workers", "bottleneck"]].values.tolist()
        [[1, 'transform'], [4, 'compute']]
        >>> round(float(df.samples_per_s[1]), 1)
        3200.0

        The same rows from one device and from a mesh over every device:

        >>> import jax
        >>> from memsim.maxplus import config_mesh
        >>> one = sweep({"num_workers": [1, 4]}, n_items=200, mesh=config_mesh(jax.devices()[:1]))
        >>> one.equals(sweep({"num_workers": [1, 4]}, n_items=200, mesh=config_mesh(jax.devices())))
        True
    """
    mesh = maxplus.check_mesh(mesh)
    base = PipelineConfig() if base is None else base
    if not isinstance(base, PipelineConfig):
        raise ConfigError(f"base={base!r}: expected a PipelineConfig")
    opts = SimOptions(n_items=n_items, warmup_frac=warmup_frac, n_batches=n_batches, seed=seed, dtype=dtype)
    opts.layout  # noqa: B018 — validates n_items against the chunk layout
    frame = grid_frame(grid, base)
    raw = simulate_frame(frame, opts, mesh=mesh)
    res = summarize(raw, frame)
    out = pd.concat([config_columns(frame), res], axis=1)
    out["grid_row"] = np.arange(len(out))
    out["seed"] = seed
    return out


_TRACE_COLUMNS = {"wf": "worker_start", "ls": "read_start", "le": "read_end", "wc": "transform_end",
                  "wq": "worker_out", "taken": "host_in", "ts": "transfer_start", "tc": "transfer_end",
                  "td": "device_in", "cs": "compute_start", "cd": "compute_end", "lat": "latency_s",
                  "R": "read_s", "X": "transform_s", "T": "transfer_s", "C": "compute_s"}


def simulate_traces(grid, base: PipelineConfig | None = None, n_items: int = 200, seed: int = 0,
                    dtype: str = "float64", mesh: Mesh | None = None) -> list[pd.DataFrame]:
    """Every item's times for every configuration of ``grid`` (one compiled run for all).

    Args:
        grid: as for :func:`sweep`.
        base: as for :func:`sweep`.
        n_items: items to simulate per configuration.
        seed: random seed; configuration i uses the random stream of ``sweep`` row i.
        dtype: float dtype.
        mesh: devices to spread the configurations over, as for :func:`sweep`.

    Returns:
        One DataFrame per configuration, one row per item: ``item``, ``worker``,
        ``worker_start`` (worker free), ``read_start``, ``read_end``, ``transform_end``,
        ``worker_out`` (into the worker's queue), ``host_in`` (into the host buffer),
        ``transfer_start``, ``transfer_end``, ``device_in``, ``compute_start``, ``compute_end``,
        and the service times ``latency_s``, ``read_s``, ``transform_s``, ``transfer_s``,
        ``compute_s``.

    Example:
        >>> trs = simulate_traces({"num_workers": [1, 2]}, PipelineConfig(compute_s=0.1), n_items=5)
        >>> len(trs), list(trs[1].worker)
        (2, [0, 1, 0, 1, 0])
    """
    base = PipelineConfig() if base is None else base
    if not isinstance(n_items, (int, np.integer)) or n_items < 1:
        raise ConfigError(f"n_items={n_items!r}: must be a positive integer")
    opts = SimOptions(n_items=int(n_items), seed=seed, dtype=dtype)
    frame = grid_frame(grid, base)
    raw = simulate_frame(frame, opts, trace=True, mesh=mesh)
    out = []
    for r in range(len(frame)):
        df = pd.DataFrame({_TRACE_COLUMNS[k]: v[r] for k, v in raw["trace"].items()})
        df.insert(0, "worker", np.arange(n_items) % int(raw["d"]["k"][r]))
        df.insert(0, "item", np.arange(n_items))
        out.append(df)
    return out


def simulate_trace(config: PipelineConfig, n_items: int = 200, seed: int = 0,
                   dtype: str = "float64") -> pd.DataFrame:
    """Every item's times for one configuration (see :func:`simulate_traces` for the columns).

    Example:
        >>> tr = simulate_trace(PipelineConfig(compute_dist="deterministic", compute_s=0.1), 5)
        >>> bool((tr.compute_end - tr.compute_start).round(12).eq(0.1).all())
        True
    """
    if not isinstance(config, PipelineConfig):
        raise ConfigError(f"config={config!r}: expected a PipelineConfig")
    return simulate_traces([config], config, n_items=n_items, seed=seed, dtype=dtype)[0]
