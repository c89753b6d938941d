"""The training memory footprint of real configurations: shapes from the real model and step,
XLA's memory analysis of the compiled step, a measured loader RSS; the arithmetic is memsim.footprint.

Nothing is materialised: the model, its parameters and the optimizer state are traced with
``jax.eval_shape`` and the step is compiled from ``jax.ShapeDtypeStruct``s, so a footprint of a
model too big for this machine costs a compile, not its memory.
"""

from __future__ import annotations

import functools
import gc
import multiprocessing as mp
import os
import time

import numpy as np
import pandas as pd

from experiments import configs
from experiments.configs import ConfigError
from experiments.loader import STAMP_KEYS, LoaderConfig, build_dataset, dataset_path
from experiments.models import make_model
from experiments.train import TrainConfig, TrainStep, batch_specs
from memsim import footprint as fp

TRAIN_OPTIMIZER = "adamw"  # what experiments.train.TrainStep uses


def optax_transform(name: str, cfg: TrainConfig):
    """The optax transformation each optimizer name of memsim.footprint stands for."""
    import optax
    makers = {"sgd": lambda: optax.sgd(cfg.learning_rate),
              "momentum": lambda: optax.sgd(cfg.learning_rate, momentum=0.9),
              "adam": lambda: optax.adam(cfg.learning_rate),
              "adamw": lambda: optax.adamw(cfg.learning_rate, weight_decay=cfg.weight_decay)}
    if name not in makers:
        raise ConfigError(f"optimizer={name!r}: expected one of {', '.join(makers)}")
    return makers[name]()


def device_sample_bytes(cfg: TrainConfig) -> int:
    return fp.tree_bytes(batch_specs(cfg)) // cfg.batch_size


def host_sample_bytes(cfg: TrainConfig) -> int:
    # the loader's batch also carries float64 time stamps per sample, one per stage and when it was
    # made (split off before device_put)
    return device_sample_bytes(cfg) + 8 * len(STAMP_KEYS)


def abstract_step(cfg: TrainConfig) -> TrainStep:
    """experiments.train's TrainStep with its state as ShapeDtypeStructs (nothing allocated).

    Gradient accumulation compiles as a rolled loop on every backend here: the memory it takes
    where it is used to save memory. (The CPU runs time an unrolled loop, whose buffers XLA does not
    reuse between micro-batches; see ``experiments.train.accum_unroll``.)"""
    import jax
    built = {}

    def build():
        built["step"] = TrainStep(make_model(cfg.model_config(), seed=cfg.seed), cfg, unroll=1)
        return built["step"].state

    state = jax.eval_shape(build)
    step = built["step"]
    step.state = state  # replaces the tracers eval_shape left behind
    return step


def _model_key(cfg: TrainConfig, **step_fields) -> TrainConfig:
    # the fields that decide the model and its step; the loader's and the feed's knobs do not
    keep = ("model", "width", "depth", "num_heads", "seq_len", "precision", "image_size", "channels",
            "num_classes", "seed", "learning_rate", "weight_decay")
    step_fields.setdefault("batch_size", 1)
    return TrainConfig(**{k: getattr(cfg, k) for k in keep}, num_samples=step_fields["batch_size"], **step_fields)


@functools.lru_cache(maxsize=64)
def _step_sizes(key: TrainConfig) -> tuple[int, int]:
    params, rest, _ = abstract_step(key).state
    return fp.tree_bytes(params), fp.tree_bytes(rest)


def step_sizes(cfg: TrainConfig) -> tuple[int, int]:
    """(parameter bytes, other model-state bytes) of cfg's model, from shapes; cached per model."""
    return _step_sizes(_model_key(cfg))


@functools.lru_cache(maxsize=64)
def _compiled_memory(key: TrainConfig) -> fp.XlaMemory:
    step = abstract_step(key)
    compiled = step.jitted.lower(step.state, batch_specs(key)).compile()
    return fp.XlaMemory.from_analysis(compiled.memory_analysis())


def compiled_memory(cfg: TrainConfig) -> fp.XlaMemory:
    """XLA's memory analysis of the training step for ``cfg`` (compiled from shapes; cached)."""
    return _compiled_memory(_model_key(cfg, batch_size=cfg.batch_size, grad_accum_steps=cfg.grad_accum_steps))


def footprint_config(cfg: TrainConfig, optimizer: str = TRAIN_OPTIMIZER) -> fp.FootprintConfig:
    params, rest = step_sizes(cfg)
    return fp.FootprintConfig(
        param_bytes=params, model_state_bytes=rest, host_sample_bytes=host_sample_bytes(cfg),
        device_sample_bytes=device_sample_bytes(cfg), optimizer=optimizer, batch_size=cfg.batch_size,
        grad_accum_steps=cfg.grad_accum_steps, num_workers=cfg.num_workers,
        per_worker_buffer_size=cfg.per_worker_buffer_size, read_threads=cfg.read_threads,
        read_buffer_size=cfg.read_buffer_size, prefetch_buffer_size=cfg.prefetch_buffer_size, feed=cfg.feed,
        cpu_buffer_size=cfg.cpu_buffer_size, device_buffer_size=cfg.device_buffer_size)


def transformer_shape(cfg: TrainConfig) -> fp.TransformerShape:
    from flax import nnx
    if cfg.model != "transformer":
        raise ConfigError(f"model={cfg.model!r}: the analytic activation estimate is for model=transformer")
    mc = cfg.model_config()
    model = nnx.eval_shape(lambda: make_model(mc, seed=cfg.seed))
    fc1 = model.blocks[0].fc1
    return fp.TransformerShape(seq_len=cfg.seq_len, width=cfg.width, num_heads=cfg.num_heads, depth=cfg.depth,
                               vocab_size=mc.vocab_size, mlp_ratio=fc1.out_features // fc1.in_features)


def analytic_activations(cfg: TrainConfig) -> int:
    """Korthikanti-style estimate (memsim.footprint) for one micro-batch; transformer only."""
    micro = cfg.batch_size // cfg.grad_accum_steps
    return fp.transformer_activation_bytes(transformer_shape(cfg), micro, cfg.precision)


def footprint(cfg: TrainConfig, activations: str = "xla", xla: fp.XlaMemory | None = None) -> pd.DataFrame:
    """memsim.footprint of ``cfg``; activations from XLA (``xla`` if given, else a compile from
    shapes) or ``analytic`` (transformer only)."""
    fcfg = footprint_config(cfg)
    if activations == "xla":
        return fp.footprint(fcfg, xla if xla is not None else compiled_memory(cfg))
    if activations == "analytic":
        return fp.footprint(fcfg, analytic_activations(cfg))
    raise ConfigError(f"activations={activations!r}: expected 'xla' or 'analytic'")


def config_from_row(row) -> TrainConfig:
    """The TrainConfig a measured row was made with (its flattened config fields)."""
    names = configs.field_names(TrainConfig)
    missing = [n for n in names if n not in row]
    if missing:
        raise ConfigError(f"the row lacks config field(s) {missing}; pass rows written by experiments.train")
    vals = {n: (row[n].item() if hasattr(row[n], "item") else row[n]) for n in names}
    return configs.apply_overrides(TrainConfig(), vals)


def _row_xla(row) -> fp.XlaMemory | None:
    try:
        return fp.XlaMemory.from_row(row)
    except (fp.FootprintError, TypeError, ValueError):
        return None  # a failed run or an older row: compile instead


def study_footprints(rows: pd.DataFrame) -> pd.DataFrame:
    """Footprints of every ok row of a sweep, long format: config_id, variant (xla | analytic), the
    footprint columns, and ``xla_step_bytes`` (XLA's own total for the step).

    XLA numbers come from the row (the measured run's compiled step) when it has them; the
    ``analytic`` variant exists for transformer rows."""
    if "status" in rows:
        rows = rows[rows.status == "ok"]
    out = []
    for _, row in rows.iterrows():
        cfg = config_from_row(row)
        xla = _row_xla(row) or compiled_memory(cfg)
        variants = {"xla": footprint(cfg, "xla", xla)}
        if cfg.model == "transformer":
            variants["analytic"] = footprint(cfg, "analytic")
        for name, df in variants.items():
            out.append(df.assign(config_id=row.get("config_id", ""), variant=name, xla_step_bytes=xla.step_bytes))
    cols = ["config_id", "variant", *fp.COLUMNS, "xla_step_bytes"]
    return pd.concat(out, ignore_index=True)[cols] if out else pd.DataFrame(columns=cols)


def write_study_footprints(rows: pd.DataFrame, out_dir) -> pd.DataFrame:
    """study_footprints of the sweep, written to ``out_dir/memory.csv`` for the report's Memory section."""
    df = study_footprints(rows)
    df.to_csv(os.path.join(out_dir, "memory.csv"), index=False)
    return df


# ----------------------------------------------------------------------------- measured device peak

PEAK_KEYS = ("model", "batch_size", "grad_accum_steps", "precision", "feed", "device_buffer_size")


def peak_vs_footprint(cfg: TrainConfig, memory_stats, xla: fp.XlaMemory | None = None) -> pd.DataFrame:
    """One row: the footprint's device total for ``cfg`` beside the measured ``peak_bytes_in_use``
    of ``memory_stats`` (a ``Device.memory_stats()`` dict, or None where the platform has none):
    predicted_bytes, measured_peak_bytes, ratio = measured / predicted, rel_error, status, note."""
    predicted = fp.totals(footprint(cfg, "xla", xla))["device"]
    row = {k: getattr(cfg, k) for k in PEAK_KEYS}
    return pd.DataFrame([{**row, **fp.peak_comparison(predicted, memory_stats)}],
                        columns=[*PEAK_KEYS, *fp.PEAK_COLUMNS])


def device_peak_vs_footprint(cfg: TrainConfig, device=None) -> pd.DataFrame:
    """peak_vs_footprint with this process's device statistics now: call it in a process that has
    just run ``cfg``'s training and nothing larger (the allocator's peak counts from process start).
    On CPU the row says "not available on this platform"."""
    import jax
    from experiments import compat
    dev = device if device is not None else jax.devices()[0]
    out = peak_vs_footprint(cfg, compat.memory_stats(dev))
    return out.assign(platform=dev.platform, device_kind=dev.device_kind)


def rows_peak_vs_footprint(rows: pd.DataFrame) -> pd.DataFrame:
    """peak_vs_footprint for every ok measured row (experiments.train writes ``device_peak_bytes``,
    NaN where the platform keeps no statistics), with its config_id and platform."""
    if "device_peak_bytes" not in rows:
        raise ConfigError("the rows lack 'device_peak_bytes'; pass rows written by experiments.train or a sweep")
    if "status" in rows:
        rows = rows[rows.status == "ok"]
    out = []
    for _, row in rows.iterrows():
        peak = float(row["device_peak_bytes"])
        stats = {"peak_bytes_in_use": int(peak)} if np.isfinite(peak) else None
        cfg = config_from_row(row)
        df = peak_vs_footprint(cfg, stats, _row_xla(row) or compiled_memory(cfg))
        out.append(df.assign(config_id=row.get("config_id", ""), platform=row.get("platform", "")))
    cols = ["config_id", "platform", *PEAK_KEYS, *fp.PEAK_COLUMNS]
    return pd.concat(out, ignore_index=True)[cols] if out else pd.DataFrame(columns=cols)


# ----------------------------------------------------------------------------- measured host memory

def _rss_child(cfg: LoaderConfig, settle_s: float, conn) -> None:
    import psutil
    try:
        ds = build_dataset(cfg, stage_timing=False)
        me = psutil.Process()
        gc.collect()
        before = me.memory_info().rss
        it = iter(ds)
        batch = next(it)  # held, like a consumer would
        # the buffers fill while the consumer asks for nothing more: wait until RSS stops growing
        # (a busy machine fills them slower), then take the median of a few samples
        last, still_since, deadline = me.memory_info().rss, time.monotonic(), time.monotonic() + 30 * settle_s
        while time.monotonic() - still_since < settle_s and time.monotonic() < deadline:
            time.sleep(0.1)
            now = me.memory_info().rss
            if abs(now - last) > 0.01 * max(now - before, 1):
                last, still_since = now, time.monotonic()
        samples = []
        for _ in range(5):
            samples.append(me.memory_info().rss)
            time.sleep(0.1)
        conn.send({"rss_before": before, "rss_after": int(np.median(samples)),
                   "batch_bytes": int(sum(v.nbytes for v in batch.values()))})
        it.close()
    except BaseException as e:  # noqa: BLE001 — sent to the parent to be raised there
        conn.send({"error": f"{type(e).__name__}: {e}"})
    finally:
        conn.close()


def measure_loader_rss(cfg: LoaderConfig, settle_s: float = 1.0, timeout_s: float = 120.0) -> dict:
    """RSS growth of a single-process loader (``num_workers=0``) with its buffers full, in a fresh
    child process (a clean baseline: nothing else allocated there).

    Returns rss_before (after building the dataset), rss_after (median of 5 samples once RSS has
    held still for ``settle_s``: the buffers are full and one batch is held by the consumer),
    growth, and the batch's measured bytes.
    """
    if cfg.num_workers:
        raise ConfigError(f"num_workers={cfg.num_workers}: one process's RSS misses the workers' memory; "
                          "measure with num_workers=0")
    if cfg.workload == "image":
        dataset_path(cfg)  # write the dataset here, not inside the measurement
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_rss_child, args=(cfg, settle_s, send), daemon=True)
    proc.start()
    send.close()
    try:
        if not recv.poll(timeout_s):
            raise TimeoutError(f"the loader RSS probe gave no answer in {timeout_s:.0f} s")
        res = recv.recv()
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
            proc.join()
    if "error" in res:
        raise RuntimeError(f"loader RSS probe failed in its child process: {res['error']}")
    res["growth"] = res["rss_after"] - res["rss_before"]
    return res
