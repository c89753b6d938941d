"""One measured training run: Grain loader → device feed → jitted Flax NNX step with optax AdamW.

``run(config) -> pandas.DataFrame`` (one row: every config field, the environment, the measurements).
Timing rules: compilation and warm-up are timed apart; the loss is read (a device sync) before the
clock stops for each step; the device-resident bound is measured in the same run with the same step.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from typing import Literal

import numpy as np
import pandas as pd

from experiments import configs, env as env_lib
from experiments.configs import ConfigError, check
from experiments.loader import LoaderConfig, build_dataset, grain_stats_frame, shm_segments
from experiments.models import FAMILIES, ModelConfig
from experiments import data as data_lib


class NonFiniteLoss(FloatingPointError):
    """The loss became NaN or inf; the message names the step."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    # model
    model: Literal["mlp", "cnn", "transformer"] = "mlp"
    width: int = 256
    depth: int = 2
    num_heads: int = 4
    seq_len: int = 64
    precision: Literal["fp32", "bf16"] = "fp32"
    # data and loader
    source: Literal["arrayrecord", "memmap", "ram"] = "ram"
    num_samples: int = 2048
    image_size: int = 32
    channels: int = 3
    num_classes: int = 10
    batch_size: int = 64
    grad_accum_steps: int = 1
    num_workers: int = 0
    per_worker_buffer_size: int = 2
    read_threads: int = 1
    read_buffer_size: int = 2
    prefetch_buffer_size: int = 2
    augment_cost: int = 0
    # device feed
    feed: Literal["none", "double_buffer", "grain_device_put"] = "double_buffer"
    cpu_buffer_size: int = 4
    device_buffer_size: int = 2
    num_devices: int = 0
    # optimisation and timing
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    steps: int = 30
    warmup_steps: int = 3
    resident_steps: int = 20
    seed: int = 0
    data_timeout_s: float = 120.0
    grain_stats: bool = True
    cache_dir: str = str(data_lib.DEFAULT_CACHE)

    def __post_init__(self):
        check(self.model in FAMILIES, "model", self.model, f"expected one of {', '.join(FAMILIES)}")
        check(self.batch_size > 0, "batch_size", self.batch_size, "must be positive")
        check(self.grad_accum_steps >= 1, "grad_accum_steps", self.grad_accum_steps, "must be >= 1")
        check(self.batch_size % self.grad_accum_steps == 0, "grad_accum_steps", self.grad_accum_steps,
              f"must divide batch_size ({self.batch_size}): each optimizer step splits its batch into micro-batches")
        check(self.feed in ("none", "double_buffer", "grain_device_put"), "feed", self.feed,
              "expected none, double_buffer or grain_device_put")
        check(self.device_buffer_size >= (0 if self.feed == "none" else 1), "device_buffer_size",
              self.device_buffer_size, f"must be >= 1 with feed={self.feed}")
        check(self.cpu_buffer_size >= (1 if self.feed == "grain_device_put" else 0), "cpu_buffer_size",
              self.cpu_buffer_size, f"must be >= 1 with feed={self.feed}")
        check(self.num_devices >= 0, "num_devices", self.num_devices, "must be >= 0 (0 = all local devices)")
        check(self.steps >= 1, "steps", self.steps, "must be >= 1")
        check(self.warmup_steps >= 1, "warmup_steps", self.warmup_steps, "must be >= 1 (the first step compiles)")
        check(self.resident_steps >= 1, "resident_steps", self.resident_steps, "must be >= 1")
        check(math.isfinite(self.learning_rate) and self.learning_rate > 0, "learning_rate", self.learning_rate,
              "must be a positive finite number")
        check(math.isfinite(self.weight_decay) and self.weight_decay >= 0, "weight_decay", self.weight_decay,
              "must be >= 0")
        check(self.data_timeout_s > 0, "data_timeout_s", self.data_timeout_s, "must be positive")
        self.loader_config()  # validates the loader knobs
        self.model_config()

    @property
    def workload(self) -> str:
        return "text" if self.model == "transformer" else "image"

    def loader_config(self) -> LoaderConfig:
        return LoaderConfig(workload=self.workload, source=self.source, seq_len=self.seq_len,
                            num_samples=self.num_samples, image_size=self.image_size, channels=self.channels,
                            num_classes=self.num_classes, batch_size=self.batch_size, num_workers=self.num_workers,
                            per_worker_buffer_size=self.per_worker_buffer_size,
                            read_threads=self.read_threads, read_buffer_size=self.read_buffer_size,
                            prefetch_buffer_size=self.prefetch_buffer_size, augment_cost=self.augment_cost,
                            seed=self.seed, cache_dir=self.cache_dir)

    def model_config(self) -> ModelConfig:
        return ModelConfig(family=self.model, width=self.width, depth=self.depth, num_heads=self.num_heads,
                           precision=self.precision, image_size=self.image_size, channels=self.channels,
                           num_classes=self.num_classes, seq_len=self.seq_len)


def smoke() -> TrainConfig:
    """Seconds on a 2-core CPU: used by the tests."""
    return TrainConfig(width=64, depth=1, batch_size=32, num_samples=256, steps=6, warmup_steps=2, resident_steps=4)


def quick() -> TrainConfig:
    """The default single run (well under a minute on a 2-core CPU)."""
    return TrainConfig()


def full() -> TrainConfig:
    return TrainConfig(model="cnn", width=32, depth=3, num_samples=8192, steps=100, warmup_steps=5,
                       resident_steps=50, num_workers=2)


PRESETS = {"smoke": smoke, "quick": quick, "full": full}


# ------------------------------------------------------------------------------------------- step

class TrainStep:
    """Jitted AdamW step over ``(params, rest, opt_state)`` with the state donated.

    ``trace_count`` counts Python traces of the step function, so tests can assert it traces once.
    """

    def __init__(self, model, cfg: TrainConfig, tx=None):
        import jax
        import jax.numpy as jnp
        import optax
        from flax import nnx

        self.graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        # ``tx`` replaces the default constant-rate AdamW (the scaling experiment passes a schedule)
        self.tx = tx if tx is not None else optax.adamw(cfg.learning_rate, weight_decay=cfg.weight_decay)
        self.state = (params, rest, self.tx.init(params))
        self.trace_count = 0
        G = cfg.grad_accum_steps
        text = cfg.workload == "text"
        graphdef, tx = self.graphdef, self.tx

        def loss_fn(params, rest, x, y):
            logits = nnx.merge(graphdef, params, rest)(x).astype(jnp.float32)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        self.loss_fn = loss_fn  # (params, rest, x, y) -> mean loss; evaluation reuses it
        grad_fn = jax.value_and_grad(loss_fn)

        def step(state, batch):
            self.trace_count += 1
            params, rest, opt_state = state
            x, y = (batch["tokens"], batch["targets"]) if text else (batch["image"], batch["label"])
            if G == 1:
                loss, grads = grad_fn(params, rest, x, y)
            else:
                xs = x.reshape((G, x.shape[0] // G) + x.shape[1:])
                ys = y.reshape((G, y.shape[0] // G) + y.shape[1:])

                def micro(acc, xy):
                    l, g = grad_fn(params, rest, *xy)
                    return (acc[0] + l, jax.tree.map(jnp.add, acc[1], g)), None

                zeros = jax.tree.map(jnp.zeros_like, params)
                (loss, grads), _ = jax.lax.scan(micro, (jnp.zeros((), jnp.float32), zeros), (xs, ys))
                loss, grads = loss / G, jax.tree.map(lambda g: g / G, grads)
            updates, opt_state = tx.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            return (params, rest, opt_state), loss

        self.jitted = jax.jit(step, donate_argnums=0)
        self.compiled = None

    def replicate(self, sharding) -> None:
        """Places the state, whole, on every device of ``sharding``'s mesh (data parallel)."""
        import jax
        from jax.sharding import NamedSharding, PartitionSpec as P
        self.state = jax.device_put(self.state, NamedSharding(sharding.mesh, P()))

    def compile(self, batch):
        self.compiled = self.jitted.lower(self.state, batch).compile()
        return self.compiled

    def __call__(self, batch):
        fn = self.compiled if self.compiled is not None else self.jitted
        self.state, loss = fn(self.state, batch)
        return loss

    def model(self):
        from flax import nnx
        return nnx.merge(self.graphdef, self.state[0], self.state[1])


# ------------------------------------------------------------------------------------ host stats

class HostSampler:
    """Samples RSS of this process and its children (loader workers) to find the peak; CPU time too."""

    def __init__(self, period_s: float = 0.05):
        import psutil
        self._me = psutil.Process()
        self.period_s = period_s
        self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memsim-host-sampler", daemon=True)

    def _rss(self) -> int:
        total = 0
        for p in [self._me] + self._me.children(recursive=True):
            try:
                total += p.memory_info().rss
            except Exception:  # noqa: BLE001 — a worker may exit between listing and reading
                pass
        return total

    def _cpu(self) -> float:
        total = 0.0
        for p in [self._me] + self._me.children(recursive=True):
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except Exception:  # noqa: BLE001
                pass
        return total

    def _loop(self):
        while not self._stop.wait(self.period_s):
            self.peak_rss = max(self.peak_rss, self._rss())

    def start(self):
        self.peak_rss = self._rss()
        self._t0, self._c0 = time.perf_counter(), self._cpu()
        self._thread.start()
        return self

    def window_start(self):
        self._t0, self._c0 = time.perf_counter(), self._cpu()

    def cpu_util(self) -> float:
        """CPU seconds of self+children per wall second per core since ``window_start``, in [0, 1]."""
        import os
        wall = time.perf_counter() - self._t0
        return (self._cpu() - self._c0) / max(wall, 1e-9) / (os.cpu_count() or 1)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self.peak_rss = max(self.peak_rss, self._rss())


# -------------------------------------------------------------------------------------------- run

@dataclasses.dataclass
class RunResult:
    row: pd.DataFrame
    steps: pd.DataFrame
    grain_stats: pd.DataFrame


def _devices(cfg: TrainConfig):
    import jax
    devs = jax.local_devices()
    n = cfg.num_devices or len(devs)
    if n > len(devs):
        raise ConfigError(f"num_devices={n}: only {len(devs)} local device(s) here")
    micro = cfg.batch_size // cfg.grad_accum_steps
    if micro % n:
        raise ConfigError(f"batch_size={cfg.batch_size}: the micro-batch ({micro} = batch_size / grad_accum_steps) "
                          f"must divide evenly across {n} devices")
    return devs[:n]


def _finite(loss: float, step: int) -> None:
    if not math.isfinite(loss):
        raise NonFiniteLoss(f"loss is {loss} at step {step}; lower learning_rate or check the data")


def run_detailed(cfg: TrainConfig) -> RunResult:
    import jax
    from experiments.feed import batch_sharding, make_feed, put
    from experiments.models import make_model, param_counts

    devices = _devices(cfg)
    sharding = batch_sharding(devices)
    t_start = time.perf_counter()
    model = make_model(cfg.model_config(), seed=cfg.seed)
    counts = param_counts(model)
    step = TrainStep(model, cfg)
    step.replicate(sharding)
    del model

    shm_before = shm_segments()
    sampler = HostSampler().start()
    host_ds = build_dataset(cfg.loader_config(), stage_timing=cfg.grain_stats)
    feed = make_feed(cfg.feed, host_ds, sharding, cpu_buffer_size=cfg.cpu_buffer_size,
                     device_buffer_size=cfg.device_buffer_size, timeout_s=cfg.data_timeout_s)
    records = []
    grain_stats = pd.DataFrame()
    try:
        t0 = time.perf_counter()
        batch, times = next(feed)
        time_to_first_batch = time.perf_counter() - t0
        t0 = time.perf_counter()
        compiled = step.compile(batch)
        compile_s = time.perf_counter() - t0
        cost = compiled.cost_analysis() or {}
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        mem = compiled.memory_analysis()

        total = cfg.warmup_steps + cfg.steps
        for i in range(total):
            if i == cfg.warmup_steps:
                sampler.window_start()
            t0 = time.perf_counter()
            if i > 0:
                batch, times = next(feed)
            t1 = time.perf_counter()
            with jax.transfer_guard("disallow"):
                loss = step(batch)
            jax.block_until_ready(loss)
            t2 = time.perf_counter()
            loss_v = float(jax.device_get(loss))
            _finite(loss_v, i)
            records.append({"step": i, "warmup": i < cfg.warmup_steps, "data_wait_s": t1 - t0,
                            "step_time_s": t2 - t0, "compute_s": t2 - t1, "loss": loss_v, **times})
        cpu_util = sampler.cpu_util()
        if cfg.grain_stats:  # with worker processes this waits up to 2 s per worker for their summaries
            grain_stats = grain_stats_frame(getattr(feed, "_it", None))

        # device-resident bound: the same step on a batch already on the device
        resident = put(jax.device_get(batch), sharding) if cfg.feed != "none" else batch
        jax.block_until_ready(resident)
        res_times = []
        for _ in range(cfg.resident_steps):
            t0 = time.perf_counter()
            with jax.transfer_guard("disallow"):
                loss = step(resident)
            jax.block_until_ready(loss)
            res_times.append(time.perf_counter() - t0)
            _finite(float(jax.device_get(loss)), len(records) + len(res_times) - 1)
    finally:
        feed.close()
        sampler.stop()
        import gc
        gc.collect()  # Grain's shared-memory batches still buffered are unlinked when collected

    steps_df = pd.DataFrame(records)
    m = steps_df[~steps_df.warmup]
    wall = float(m.step_time_s.sum())
    samples = cfg.batch_size * len(m)
    res = np.asarray(res_times)
    resident_sps = cfg.batch_size * len(res) / float(res.sum())
    sps = samples / wall
    dev_stats = devices[0].memory_stats() or {}
    row = {
        **configs.to_flat_dict(cfg),
        **env_lib.environment(),
        "num_devices_used": len(devices),
        "workload": cfg.workload,
        "status": "ok",
        "error": "",
        "params": counts["params"],
        "non_embedding_params": counts["non_embedding_params"],
        "time_to_first_batch_s": time_to_first_batch,
        "compile_s": compile_s,
        "warmup_s": float(steps_df[steps_df.warmup].step_time_s.sum()),
        "steps_measured": len(m),
        "samples_per_s": sps,
        "steps_per_s": len(m) / wall,
        "step_time_median_s": float(m.step_time_s.median()),
        "step_time_p90_s": float(m.step_time_s.quantile(0.9)),
        "compute_time_median_s": float(m.compute_s.median()),
        "data_wait_s_total": float(m.data_wait_s.sum()),
        "data_wait_median_s": float(m.data_wait_s.median()),
        "data_wait_frac": float(m.data_wait_s.sum()) / wall,
        "device_resident_samples_per_s": resident_sps,
        "device_resident_step_median_s": float(np.median(res)),
        "feed_efficiency": sps / resident_sps,
        "decode_s_per_sample": float(m.get("t_decode", pd.Series([0.0])).sum()) / samples,
        "augment_s_per_sample": float(m.get("t_augment", pd.Series([0.0])).sum()) / samples,
        "host_cpu_util": cpu_util,
        "peak_rss_bytes": sampler.peak_rss,
        "shm_segments_left": len(shm_segments() - shm_before),
        "device_peak_bytes": dev_stats.get("peak_bytes_in_use", float("nan")),
        "xla_flops_per_step": float(cost.get("flops", float("nan"))),
        "xla_bytes_accessed_per_step": float(cost.get("bytes accessed", float("nan"))),
        "xla_argument_bytes": getattr(mem, "argument_size_in_bytes", float("nan")),
        "xla_output_bytes": getattr(mem, "output_size_in_bytes", float("nan")),
        "xla_temp_bytes": getattr(mem, "temp_size_in_bytes", float("nan")),
        "xla_alias_bytes": getattr(mem, "alias_size_in_bytes", float("nan")),
        "trace_count": step.trace_count,
        "final_loss": float(m.loss.iloc[-1]),
        "first_loss": float(steps_df.loss.iloc[0]),
        "wall_s": time.perf_counter() - t_start,
    }
    return RunResult(pd.DataFrame([row]), steps_df, grain_stats)


def run(cfg: TrainConfig) -> pd.DataFrame:
    return run_detailed(cfg).row


def summary(row: pd.Series) -> str:
    r = row
    lines = [
        f"{r.model} (width {r.width}, depth {r.depth}, {r.params:,} params, {r.precision}) on "
        f"{r.device_kind} × {r.num_devices_used}; source={r.source}, feed={r.feed}",
        f"  batch_size={r.batch_size} grad_accum_steps={r.grad_accum_steps} num_workers={r.num_workers} "
        f"prefetch_buffer_size={r.prefetch_buffer_size} device_buffer_size={r.device_buffer_size} "
        f"augment_cost={r.augment_cost}",
        f"  samples/s            {r.samples_per_s:12.1f}   ({r.steps_per_s:.2f} steps/s over {r.steps_measured} steps)",
        f"  device-resident      {r.device_resident_samples_per_s:12.1f}   feed_efficiency {r.feed_efficiency:.3f}",
        f"  step time median/p90 {r.step_time_median_s * 1e3:9.2f} / {r.step_time_p90_s * 1e3:.2f} ms",
        f"  data wait            {r.data_wait_frac * 100:11.1f} %  (median {r.data_wait_median_s * 1e3:.2f} ms/step)",
        f"  host per sample      decode {r.decode_s_per_sample * 1e6:.1f} µs, augment {r.augment_s_per_sample * 1e6:.1f} µs",
        f"  compile {r.compile_s:.2f} s, warm-up {r.warmup_s:.2f} s, first batch {r.time_to_first_batch_s:.2f} s",
        f"  host CPU {r.host_cpu_util * 100:.0f} % of {r.cpu_count} cores, peak RSS {r.peak_rss_bytes / 2**20:.0f} MiB",
        f"  loss {r.first_loss:.3f} → {r.final_loss:.3f}",
    ]
    return "\n".join(lines)
