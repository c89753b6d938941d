"""One measured training run: Grain loader → device feed → jitted Flax NNX step with optax AdamW.

``run(config) -> pandas.DataFrame`` (one row: every config field, the environment, the measurements).
Timing rules: compilation and warm-up are timed apart; the loss is read (a device sync) before the
clock stops for each step; the device-resident bound is measured in the same run with the same step.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import threading
import time

import numpy as np
import pandas as pd

from experiments import configs, env as env_lib, heap
from experiments.configs import ConfigError, check
from experiments.loader import (MADE_KEY, LoaderConfig, build_dataset, freeze_heap, grain_stats_frame,
                                release_dead_workers_segments, shm_segments)
from experiments.models import FAMILIES, ModelConfig
from experiments import data as data_lib
from memsim.knobs import Feed, Model, Precision, Source


class NonFiniteLoss(FloatingPointError):
    """The loss became NaN or inf; the message names the step."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    # model
    model: Model = "mlp"
    width: int = 256
    depth: int = 2
    num_heads: int = 4
    seq_len: int = 64
    precision: Precision = "fp32"
    # data and loader
    source: Source = "ram"
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
    feed: Feed = "double_buffer"
    cpu_buffer_size: int = 4
    device_buffer_size: int = 2
    num_devices: int = 0
    # data-parallel JAX processes (experiments.distributed): each loads batch_size / num_processes
    # samples of its own shard per step; the step's batch is one array over every process's devices
    num_processes: int = 1
    # optimisation
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    # timing: the fed loop and the device-resident bound each warm up, then measure until both
    # min_steps and min_measure_s are reached (see measure_window)
    min_steps: int = 30
    min_measure_s: float = 1.0
    # the device-resident bound's min_measure_s (0: min_measure_s); its steps repeat one compiled step
    # on one batch, so they vary less than the fed loop's (see experiments.sweep.quick)
    resident_min_measure_s: float = 0.0
    warmup_steps: int = 3
    warmup_time_s: float = 0.0
    max_warmup_s: float = 3.0
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
        check(self.num_processes >= 1, "num_processes", self.num_processes, "must be >= 1")
        check(self.batch_size % self.num_processes == 0, "batch_size", self.batch_size,
              f"must be divisible by num_processes ({self.num_processes}): each process loads "
              f"batch_size / num_processes samples; use a multiple of {self.num_processes}")
        check(self.num_processes == 1 or self.feed != "grain_device_put", "feed", self.feed,
              "grain.experimental.device_put places each process's batch as if it were the whole global "
              "batch; with num_processes > 1 use feed=double_buffer or feed=none")
        check(self.min_steps >= 2, "min_steps", self.min_steps, "must be >= 2 (an interval needs two steps)")
        check(math.isfinite(self.min_measure_s) and self.min_measure_s >= 0, "min_measure_s", self.min_measure_s,
              "must be a finite number of seconds >= 0")
        check(math.isfinite(self.resident_min_measure_s) and self.resident_min_measure_s >= 0, "resident_min_measure_s",
              self.resident_min_measure_s, "must be a finite number of seconds >= 0 (0: min_measure_s)")
        check(self.warmup_steps >= 1, "warmup_steps", self.warmup_steps, "must be >= 1")
        check(math.isfinite(self.warmup_time_s) and self.warmup_time_s >= 0, "warmup_time_s", self.warmup_time_s,
              "must be >= 0 (0: warm up until the step time is steady)")
        check(math.isfinite(self.max_warmup_s) and self.max_warmup_s > 0, "max_warmup_s", self.max_warmup_s,
              "must be a positive number of seconds")
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

    def loader_config(self, process_index: int = 0) -> LoaderConfig:
        """The loader of process ``process_index``: its shard, and its share of the batch."""
        return LoaderConfig(workload=self.workload, source=self.source, seq_len=self.seq_len,
                            num_samples=self.num_samples, image_size=self.image_size, channels=self.channels,
                            num_classes=self.num_classes, batch_size=self.batch_size // self.num_processes,
                            shard_index=process_index, shard_count=self.num_processes,
                            num_workers=self.num_workers,
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
    return TrainConfig(width=64, depth=1, batch_size=32, num_samples=256, min_steps=6, min_measure_s=0.0,
                       warmup_steps=2, max_warmup_s=0.5)


def quick() -> TrainConfig:
    """The default single run (about 15 s on a 2-core CPU: 3 s windows for the fed loop and the bound)."""
    return TrainConfig(min_measure_s=3.0)


def full() -> TrainConfig:
    return TrainConfig(model="cnn", width=32, depth=3, num_samples=8192, min_steps=100, min_measure_s=5.0,
                       warmup_steps=5, num_workers=2)


PRESETS = {"smoke": smoke, "quick": quick, "full": full}


# ------------------------------------------------------------------------------------------- step

def accum_unroll(grad_accum_steps: int, backend: str | None = None) -> int:
    """How many micro-batches of the gradient-accumulation ``lax.scan`` are unrolled: all of them on
    the CPU backend, none elsewhere.

    XLA's CPU backend runs the body of a while loop (what a rolled scan becomes) far slower than the
    same operations outside one: measured on the 2-core CPU (jax 0.10.2; the step alone on a
    device-resident batch of 64, 32×32 images), the CNN step took 9.6 ms without accumulation,
    227 ms with 2 micro-batches in the rolled scan and 7.6 ms unrolled; bf16 17.0, 264 and 16.3 ms;
    the MLP 2.8, 3.8 and 3.0 ms. A rolled loop on the CPU would measure that artefact, not what
    accumulation costs. On accelerators the loop stays rolled, as training code has it (a loop keeps
    one micro-batch's activations live at a time, and compiles once whatever the count).

    Unrolled, XLA's CPU buffer assignment does not reuse one micro-batch's buffers for the next
    (the CNN at batch 32 in 2 micro-batches: temp 7.24 MB unrolled, 4.71 MB rolled, with or without
    an optimisation barrier between them), so ``experiments.memory`` analyses the rolled loop: the
    memory accumulation takes where it is used to save memory."""
    import jax
    return grad_accum_steps if (backend or jax.default_backend()) == "cpu" else 1


class TrainStep:
    """Jitted AdamW step over ``(params, rest, opt_state)`` with the state donated.

    With ``grad_accum_steps`` G > 1 the batch is split into G micro-batches whose gradients a
    ``lax.scan`` sums, ``unroll`` of them per loop iteration (default :func:`accum_unroll`: all of
    them on the CPU backend, one elsewhere).

    ``trace_count`` counts Python traces of the step function, so tests can assert it traces once.
    """

    def __init__(self, model, cfg: TrainConfig, tx=None, unroll: int | None = None):
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
        unroll = accum_unroll(G) if unroll is None else unroll
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
                (loss, grads), _ = jax.lax.scan(micro, (jnp.zeros((), jnp.float32), zeros), (xs, ys),
                                                unroll=unroll)
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


def batch_specs(cfg: TrainConfig, sharding=None) -> dict:
    """The step's batch argument as ShapeDtypeStructs: what the loader yields, stage stamps removed
    (image: float32 after Augment, int32 labels; text: int32 token windows)."""
    import jax
    import jax.numpy as jnp
    b = cfg.batch_size
    if cfg.workload == "text":
        shapes = {"tokens": ((b, cfg.seq_len), jnp.int32), "targets": ((b, cfg.seq_len), jnp.int32)}
    else:
        shapes = {"image": ((b, cfg.image_size, cfg.image_size, cfg.channels), jnp.float32),
                  "label": ((b,), jnp.int32)}
    return {k: jax.ShapeDtypeStruct(shape, dt, sharding=sharding) for k, (shape, dt) in shapes.items()}


# ------------------------------------------------------------------------------------ host stats

class HostSampler:
    """The peak RSS of this process and its children (the loader's workers), and their CPU time.

    Each process's peak is the kernel's high-water mark (``VmHWM`` in ``/proc/<pid>/status``; this
    process's is reset at :meth:`start` through ``/proc/self/clear_refs``, so that it is the run's
    own), read every ``period_s`` and at :meth:`stop`. A mark only rises, so reads a second apart
    miss nothing of a process that lives past one of them (the workers live the whole run, and
    :meth:`stop` comes before they are stopped). ``peak_rss`` is the sum of the processes' peaks: at
    least the peak of their sum, and equal to it when they peak together, as a steady pipeline's
    processes do. Where the kernel keeps no mark (not Linux), or this process's cannot be reset, a
    read takes the current RSS instead, once a second: a coarser peak there than the 50 ms reads gave.

    Why marks read once a second, not the current RSS read every 50 ms as before: the reads run in
    a thread of this process and hold its interpreter lock, and a loader in the main process
    (``num_workers=0``) runs its stages in threads that need the lock. On the 2-core Intel Xeon
    (family 6, model 207) on 2026-11-26, the MLP at 16×16 from memmap with four augmentation passes
    at batch 128 (two sweeps each way, interleaved; ``results/cpu-2core/sampler``): without
    workers, the 50 ms reads put the augmentation at 247-275 µs of CPU per sample and the run at
    2 860-3 130 samples/s; with these reads, 213-218 µs and 3 420-3 550 samples/s (medians +12%).
    With a worker the run did not move (3 140-3 290 → 3 230-3 280). The rows measured the
    instrument, and the cost model took it for a property of the main process
    (``stage_main_scale`` 1.04-1.12 on the 2-core VM's quick studies)."""

    def __init__(self, period_s: float = 1.0):
        import psutil
        self._me = psutil.Process()
        self.period_s = period_s
        self._peaks: dict[int, int] = {}
        self._self_marked = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memsim-host-sampler", daemon=True)

    @property
    def peak_rss(self) -> int:
        return int(sum(self._peaks.values()))

    @staticmethod
    def _mark(pid: int) -> int | None:
        """``VmHWM`` of ``pid`` in bytes, or None where /proc does not say."""
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmHWM:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            return None
        return None

    def read(self) -> None:
        """Each process's peak so far into ``_peaks`` (never raises: a read that fails keeps the
        peaks it had)."""
        try:
            procs = [self._me] + self._me.children(recursive=True)
        except Exception:  # noqa: BLE001 — /proc unreadable for a moment: this process alone
            procs = [self._me]
        for p in procs:
            try:
                v = self._mark(p.pid) if (p.pid != self._me.pid or self._self_marked) else None
                if v is None:
                    v = p.memory_info().rss
            except Exception:  # noqa: BLE001 — a worker may exit between listing and reading
                continue
            self._peaks[p.pid] = max(self._peaks.get(p.pid, 0), int(v))

    def _cpu(self, children_only: bool = False) -> float:
        total = 0.0
        for p in ([] if children_only else [self._me]) + self._me.children(recursive=True):
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except Exception:  # noqa: BLE001
                pass
        return total

    def _loop(self):
        while not self._stop.wait(self.period_s):
            self.read()

    def start(self):
        try:  # "5": reset the peak RSS to the current RSS (Linux 4.0 and later)
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self._self_marked = self._mark(self._me.pid) is not None
        except OSError:
            self._self_marked = False
        self.read()
        self.window_start()
        self._thread.start()
        return self

    def _thread_cpu(self) -> dict:
        """CPU seconds so far of each thread of the child processes, by (pid, thread id)."""
        out = {}
        try:
            procs = self._me.children(recursive=True)
        except Exception:  # noqa: BLE001 — /proc unreadable for a moment: none
            return out
        for p in procs:
            try:
                out.update({(p.pid, t.id): t.user_time + t.system_time for t in p.threads()})
            except Exception:  # noqa: BLE001 — a worker may exit between listing and reading
                pass
        return out

    def window_start(self):
        self._t0, self._c0, self._w0 = time.perf_counter(), self._cpu(), self._cpu(children_only=True)
        self._th0 = self._thread_cpu()

    def busiest_thread_cpu_s(self) -> float:
        """CPU seconds since ``window_start`` of each child process's busiest thread, summed over the
        children. A loader worker runs its pipeline (read, decode, augmentation, batching) in one
        thread and hands its batches on from another, beside it while a core is free: its busiest
        thread's CPU is the part of its CPU on its period's path. On the 2-core Intel Xeon (family
        6, model 207) on 2026-12-03, the fp32 MLP at 16×16 from ArrayRecord with one worker kept one
        thread at 0.95 cores and the worker's main thread at 0.10, and its CPU per sample was 1.05×
        the run's seconds per sample (``results/cpu-2core/holdout/README.md``, "A worker's CPU
        beyond its period")."""
        th0, busiest = self._th0, {}
        for (pid, tid), c in self._thread_cpu().items():
            busiest[pid] = max(busiest.get(pid, 0.0), c - th0.get((pid, tid), 0.0))
        return float(sum(busiest.values()))

    def tree_cpu_s(self) -> float:
        """CPU seconds of this process and its children so far."""
        return self._cpu()

    def children_cpu_s(self) -> float:
        """CPU seconds of the child processes (the loader's workers) since ``window_start``."""
        return self._cpu(children_only=True) - self._w0

    def window_s(self) -> float:
        """Wall seconds since ``window_start``."""
        return time.perf_counter() - self._t0

    def cpu_util(self) -> float:
        """CPU seconds of self+children per wall second per core since ``window_start``, in [0, 1]."""
        import os
        wall = time.perf_counter() - self._t0
        return (self._cpu() - self._c0) / max(wall, 1e-9) / (os.cpu_count() or 1)

    def stop(self):
        """Stops the reads after a last one (again: a no-op but for that read)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.read()


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _pages_written() -> float:
    """Pages the kernel has written back since boot (``nr_written`` in /proc/vmstat); NaN where the
    file or the counter is missing (not Linux)."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("nr_written "):
                    return float(line.split()[1])
    except OSError:
        pass
    return float("nan")


class MachineWindow:
    """What the rest of the machine did during a window: the share of the machine's CPU time its
    hypervisor took (steal), the cores that processes other than this one and its children kept
    busy, and the MiB the kernel wrote back to disk from its page cache (``written_mib``, from
    /proc/vmstat: writeback shows as neither of the other two). On a 2-core Intel Xeon VM
    (2026-12-02) a sweep started within 20 s of 800 MB written to disk ran its first run 8-27% slower
    than its later repeats in 8 of 9 trials (none of 6 without the write), with no steal, no foreign
    CPU and, where this column was there, nothing written back inside its windows: the column rules
    writeback in or out for a window; that VM's slower runs came from elsewhere
    (``experiments.env.free_page_reporting``; results/cpu-2core/holdout/README.md, "Writeback").
    A shared 2-core VM is disturbed in bursts: on 2026-11-25 a resident window of a sweep run
    held 18 steps of 42-59 ms, then 8 of 114-136 ms with nothing of the run's own running beside
    them. These columns say which windows had company, so that a disturbed measurement can be told
    from a slow configuration. (On that VM most bursts had none: the same work itself took 10-20%
    more or less CPU time from one window to the next; see ``analysis.costmodel.evaluate.compare``'s
    ``work_spread``.) With several processes (``num_processes``), the run's other processes are not
    this one's children and count as company.

    Both come from the kernel's counters (``psutil.cpu_times``: /proc/stat, 10 ms ticks), so over a
    1 s window on 2 cores they resolve about 1%. A window shorter than ``MIN_S`` (ten ticks) resolves
    neither: both are NaN, not a number made of one tick. (The smoke preset's resident window took a
    few ms on a fast 2-core CPU: one tick in it read as 3.2 foreign cores on a 2-core machine, and
    none as NaN steal.)"""

    MIN_S = 0.1

    def __init__(self, own_cpu_s):
        self._own = own_cpu_s  # () -> CPU seconds of this process and its children

    def start(self):
        import psutil
        self._t, self._m, self._o = time.perf_counter(), psutil.cpu_times(), self._own()
        self._w = _pages_written()
        return self

    def stop(self) -> dict:
        import psutil
        m, o, wall = psutil.cpu_times(), self._own(), time.perf_counter() - self._t
        written = (_pages_written() - self._w) * PAGE_BYTES / 2**20
        d = {f: getattr(m, f) - getattr(self._m, f) for f in m._fields}
        total = sum(d.get(f, 0.0) for f in ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"))
        if wall < self.MIN_S or total <= 0:  # too few ticks inside the window to say anything
            return {"steal_frac": float("nan"), "foreign_cpu_cores": float("nan"), "written_mib": written}
        busy = total - d.get("idle", 0.0) - d.get("iowait", 0.0) - d.get("steal", 0.0)
        return {"steal_frac": d.get("steal", 0.0) / total,
                # the ticks of the machine and of the process tree are read at slightly different
                # moments: a window with no company can come out a hair below zero
                "foreign_cpu_cores": max(0.0, (busy - (o - self._o)) / max(wall, 1e-9)),
                "written_mib": written}


# -------------------------------------------------------------------------------------------- run

@dataclasses.dataclass
class RunResult:
    row: pd.DataFrame
    steps: pd.DataFrame
    grain_stats: pd.DataFrame
    # how the step's batch was laid out: its global shape, the shapes of the shards this process
    # holds, and whether this process holds all of it (false with several processes)
    batch_layout: dict = dataclasses.field(default_factory=dict)


def batch_layout(batch: dict) -> dict:
    leaf = batch["image"] if "image" in batch else batch["tokens"]
    return {"global_batch_shape": "x".join(map(str, leaf.shape)),
            "local_shard_shapes": ";".join("x".join(map(str, s.data.shape)) for s in leaf.addressable_shards),
            "batch_fully_addressable": bool(leaf.is_fully_addressable)}


def local_host_batch(batch: dict) -> dict:
    """This process's rows of a device batch, on the host (all of it with one process)."""
    import jax
    out = {}
    for k, x in batch.items():
        if x.is_fully_addressable:
            out[k] = np.asarray(jax.device_get(x))
        else:
            shards = sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0)
            out[k] = np.concatenate([np.asarray(s.data) for s in shards])
    return out


def _agreement():
    """(agree, agree_every) for ``measure_window``: this process's decisions with one process;
    process 0's, broadcast every STEADY_WINDOW steps, with several."""
    import jax
    if jax.process_count() == 1:
        return None, 1
    from jax.experimental import multihost_utils

    def agree(stop: bool) -> bool:
        return bool(multihost_utils.broadcast_one_to_all(np.array(stop)))
    return agree, STEADY_WINDOW


def _devices(cfg: TrainConfig):
    """The devices the step runs on: the first ``num_devices`` local devices of every process (the
    same list, in the same order, on every process)."""
    import jax
    devs = jax.local_devices()
    n = cfg.num_devices or len(devs)
    if n > len(devs):
        raise ConfigError(f"num_devices={n}: only {len(devs)} local device(s) here; use --num_devices=0 "
                          f"(all) or at most {len(devs)}")
    if jax.process_count() > 1:
        by_process: dict[int, list] = {}
        for d in sorted(jax.devices(), key=lambda d: (d.process_index, d.id)):
            by_process.setdefault(d.process_index, []).append(d)
        chosen = [d for p in sorted(by_process) for d in by_process[p][:n]]
    else:
        chosen = devs[:n]
    micro = cfg.batch_size // cfg.grad_accum_steps
    if micro % len(chosen):
        raise ConfigError(f"batch_size={cfg.batch_size}: the micro-batch ({micro} = batch_size / grad_accum_steps) "
                          f"must divide evenly across {len(chosen)} devices")
    return chosen


def check_runtime(cfg: TrainConfig) -> None:
    """Checks what only this machine can say (devices, a writable cache_dir); ConfigError before any work."""
    _devices(cfg)
    data_lib.check_cache_dir(cfg.cache_dir)


def check_finite(loss: float, step: int) -> None:
    """Raises ``NonFiniteLoss`` naming ``step`` when ``loss`` is NaN or infinite."""
    if not math.isfinite(loss):
        raise NonFiniteLoss(f"loss is {loss} at step {step}; lower learning_rate or check the data")


# Warm-up is steady when the median step time of the last STEADY_WINDOW steps is within STEADY_TOL of
# the median of the STEADY_WINDOW before them (the first steps after compiling run slower: caches,
# allocator, loader buffers filling).
STEADY_WINDOW = 5
STEADY_TOL = 0.10

# Warm-up also waits for the loader's buffers to fill. A loader faster than the step fills its
# workers' buffers, the prefetch buffer and the feed's while the step runs, and until they are full
# its workers make more batches than the step takes: a window measured then charges the step's
# samples with the workers' extra batches, and the step runs beside that extra work. On the 2-core
# Intel Xeon (family 6, model 207) on 2026-12-03, the quick study's fp32 CNN at 32×32 from memmap,
# batch 128, two workers, 4 augmentation passes (three runs each way, interleaved; 1 s windows):
# stopped at the quick sweep's 1 s of warm-up, the workers' CPU was 500-597 µs a sample and the run
# 1 746-1 946 samples/s; after 4 s of warm-up, 376-400 µs and 1 941-2 004 samples/s. The age of the
# batches the step takes (``batch_age_s``: how long since the loader made them) grows while the
# buffers fill and levels off once they are full; a loader slower than the step keeps them near
# empty and the age small. Filled: no worker's batches are growing older (``_filled``). Warm-up
# waits for it until max(max_warmup_s, FILL_MAX_S) has passed (then ``filled`` is recorded false).
#
# The opposite transient: a loader slower than the step still gets ahead while the loop starts (the
# first step, its first execution, is the slowest), and the steps after that drain its buffers,
# faster than the loader makes batches. The batches' age falls while they drain. The quick study's bf16 CNN at 16×16
# from RAM, batch 64, one worker, prefetch 4, double-buffered (AMD EPYC 25/17/1, 2026-12-06; runs
# with 6 s windows, each replayed at each rule's stop, results/cpu-2core/holdout/drain/): a 1 s
# window from where the growth check alone stopped read 12.1% (median of six runs) and 7.6% (of four)
# above the same run's window from 2 s to 6 s, its batches 16-45 ms old in its first half second
# against 7-10 ms later; from where the drain check below stops, 0.2-0.4 s later, 6.0% and 1.4%. The
# grid's MLP with two workers moved by 1-3% either way. So filled also needs the batches the step
# waits on (the worker whose batches are youngest) to have stopped getting younger: a worker whose
# batches are older has a lead that may shrink without the step ever waiting for it.
FILL_WINDOW = 5
FILL_TOL = 0.25
FILL_MAX_S = 4.0


@dataclasses.dataclass
class Window:
    """What ``measure_window`` ran: per-step records, and how the warm-up ended."""
    records: list
    warmup_steps: int
    warmup_s: float
    steady: bool
    measured_steps: int
    measured_s: float
    filled: bool = True


def _steady(times: list[float]) -> bool:
    w = STEADY_WINDOW
    if len(times) < 2 * w:
        return False
    last, prev = float(np.median(times[-w:])), float(np.median(times[-2 * w:-w]))
    return abs(last / prev - 1.0) <= STEADY_TOL


def _filled(ages: list[float], times: list[float], num_workers: int = 0) -> bool:
    """Whether the buffers have reached their level: the batches' age (``batch_age_s``) has stopped
    growing, and the youngest batches have stopped getting younger; true where no step has an age.

    Worker processes take turns, batch by batch, and each has buffers of its own: the ages of
    consecutive batches alternate between the workers' (on the fp32 CNN above, two workers' batches
    were 1.0-1.6 s and 0.06-0.7 s old in turn, the second's still growing). So each worker's
    batches (every ``num_workers``-th) are a series of their own, and the buffers are full when no
    series' mean over its last FILL_WINDOW batches is more than FILL_TOL of the median step time
    above its mean over the FILL_WINDOW before them. They are still draining while the series with
    the youngest batches (the worker the step waits on) has its mean over the last FILL_WINDOW more
    than FILL_TOL of a step below its mean over the FILL_WINDOW before (see the comment above)."""
    k, w = max(1, num_workers), FILL_WINDOW
    if not any(math.isfinite(a) for a in ages):
        return True
    recent = ages[-2 * w * k:]
    if len(recent) < 2 * w * k or not all(math.isfinite(a) for a in recent):
        return False
    tol = FILL_TOL * float(np.median(times[-w * k:]))
    before = [float(np.mean(recent[j::k][:w])) for j in range(k)]
    last = [float(np.mean(recent[j::k][w:])) for j in range(k)]
    if any(b - a > tol for a, b in zip(before, last)):
        return False  # a worker's batches growing older: its buffers still filling
    youngest = int(np.argmin(last))
    return before[youngest] - last[youngest] <= tol  # the batches the step waits on no longer draining


def measure_window(step_fn, cfg: TrainConfig, on_measure_start=None, agree=None, agree_every: int = 1,
                   startup_steps: int = 0, min_measure_s: float | None = None) -> Window:
    """Runs ``step_fn(i) -> record`` (a dict with ``step_time_s``) through warm-up, then measurement.

    Warm-up runs at least ``warmup_steps`` steps; then, with ``warmup_time_s > 0``, until that much
    time has passed; otherwise until the step time is steady (``_steady``) or ``max_warmup_s`` has
    passed (then ``steady`` is recorded false), and until the loader's buffers are full (``_filled``,
    from the records' ``batch_age_s``) or ``max(max_warmup_s, FILL_MAX_S)`` has passed (then
    ``filled`` is recorded false). Measurement runs until both ``min_steps`` steps and
    ``min_measure_s`` seconds are reached (``cfg``'s, or the argument's where given). ``on_measure_start()``
    is called between the two.

    The waits for data (a record's ``data_wait_s``) of the first ``startup_steps`` steps are the
    loader starting, not warm-up, and do not count toward ``warmup_time_s`` or ``max_warmup_s``: a
    loader with worker processes delivers its first batches one worker at a time, and a second
    worker's first batch can take a second on a 2-core CPU. Counted, that second used the whole
    warm-up of the quick sweep (``max_warmup_s=1``), and measurement began while the workers were
    still filling their buffers beside the step: on the 2-core CPU on 2026-11-25, runs with
    workers whose warm-up was cut to 3 steps this way were off their configuration's median by
    4.9% (median) and 24% (90th percentile), against 2.3% and 10% for those that warmed up 10 steps
    or more (200 runs of eleven quick studies and second sweeps).

    Several processes stepping together must stop at the same step (a step is a collective): then
    ``agree(stop) -> bool`` turns this process's decision into the one every process takes (process
    0's), and is asked only every ``agree_every`` steps, at the same steps on every process, outside
    the timed step.
    """
    agree = agree if agree is not None else bool
    records, times, ages = [], [], []
    t_warm = t_startup = 0.0
    steady = filled = False
    while True:
        rec = step_fn(len(records))
        records.append({**rec, "warmup": True})
        times.append(rec["step_time_s"])
        ages.append(rec.get("batch_age_s", float("nan")))
        t_warm += rec["step_time_s"]
        if len(records) <= startup_steps:
            t_startup += rec.get("data_wait_s", 0.0)
        if len(records) < cfg.warmup_steps:
            continue
        steady, filled = _steady(times), _filled(ages, times, getattr(cfg, "num_workers", 0))
        if (len(records) - cfg.warmup_steps) % agree_every:
            continue
        t = t_warm - t_startup
        if cfg.warmup_time_s > 0:
            stop = t >= cfg.warmup_time_s
        else:
            stop = (steady or t >= cfg.max_warmup_s) and (filled or t >= max(cfg.max_warmup_s, FILL_MAX_S))
        if agree(stop):
            break
    n_warm = len(records)
    if on_measure_start is not None:
        on_measure_start()
    measure_s = cfg.min_measure_s if min_measure_s is None else min_measure_s
    t_meas, n = 0.0, 0
    while True:
        if n >= cfg.min_steps and (n - cfg.min_steps) % agree_every == 0 and agree(t_meas >= measure_s):
            break
        rec = step_fn(len(records))
        records.append({**rec, "warmup": False})
        t_meas += rec["step_time_s"]
        n += 1
    return Window(records, n_warm, t_warm, steady, n, t_meas, filled)


def ratio_interval(num_times, den_times, n_blocks: int = 10, resamples: int = 2000, seed: int = 0,
                   level: float = 0.95) -> tuple[float, float]:
    """Interval of (rate of ``num_times``) / (rate of ``den_times``) by a block bootstrap.

    Each series of per-step times is cut into ``n_blocks`` consecutive blocks (blocks rather than steps,
    because consecutive step times are correlated: a slow loader stalls several steps); blocks are drawn
    with replacement in each series, and the ratio of the two mean rates is taken per resample.
    Returns the ``level`` percentile interval.

    >>> lo, hi = ratio_interval([1.0] * 20, [0.5] * 20)
    >>> round(lo, 6), round(hi, 6)
    (0.5, 0.5)
    """
    def blocks(x):
        x = np.asarray(x, float)
        k = max(1, min(n_blocks, len(x) // 2))
        parts = np.array_split(x, k)
        return np.array([p.sum() for p in parts]), np.array([len(p) for p in parts], float)

    rng = np.random.default_rng(seed)
    (nt, nn), (dt, dn) = blocks(num_times), blocks(den_times)
    i = rng.integers(0, len(nt), (resamples, len(nt)))
    j = rng.integers(0, len(dt), (resamples, len(dt)))
    ratio = (nn[i].sum(1) / nt[i].sum(1)) / (dn[j].sum(1) / dt[j].sum(1))
    a = (1 - level) / 2
    return float(np.quantile(ratio, a)), float(np.quantile(ratio, 1 - a))


# Threads that move data: Grain's prefetch threads and the feeds' producers. (Grain also keeps
# process-wide helpers for its whole life, idle between uses: a one-thread pool that unlinks shared
# memory and its statistics reporting loops. They are not loader work and are not waited for.)
LOADER_THREAD_PREFIXES = ("grain-thread-prefetch", "memsim-double-buffer", "memsim-feed", "ThreadPoolExecutor")


def loader_work_alive() -> tuple[list[int], list[str]]:
    """(pids of loader worker processes, names of loader threads) still alive in this process."""
    import psutil
    procs = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
            # multiprocessing's own helpers (a resource tracker, a sweep's fork server) move no data
            if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in cmd and "forkserver" not in cmd:
                procs.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    threads = [t.name for t in threading.enumerate() if t.name.startswith(LOADER_THREAD_PREFIXES)]
    return procs, threads


def _loader_quiet(timeout_s: float = 10.0) -> bool:
    """Waits until no loader worker process or loader thread is alive; True if none was left."""
    deadline = time.perf_counter() + timeout_s
    while True:
        procs, threads = loader_work_alive()
        if not procs and not threads:
            return True
        if time.perf_counter() > deadline:
            return False
        time.sleep(0.02)


def run_detailed(cfg: TrainConfig) -> RunResult:
    import jax
    from experiments.feed import batch_sharding, make_feed, put
    from experiments.models import make_model, param_counts

    if cfg.num_processes != jax.process_count():
        raise ConfigError(f"num_processes={cfg.num_processes}: this process is one of {jax.process_count()} JAX "
                          f"process(es); run several with experiments.distributed.launch (or python -m "
                          f"experiments train --num_processes={cfg.num_processes})")
    devices = _devices(cfg)
    data_lib.check_cache_dir(cfg.cache_dir)
    sharding = batch_sharding(devices)
    t_start = time.perf_counter()
    model = make_model(cfg.model_config(), seed=cfg.seed)
    counts = param_counts(model)
    step = TrainStep(model, cfg)
    step.replicate(sharding)
    del model

    # Compiled before the loader starts, from the batch's shapes: a loader started first would fill its
    # buffers while the step compiles, and the first steps would drain them faster than the loader can
    # make batches (measured: 30 steps after compiling read 5,600 samples/s where the steady rate of
    # the same configuration is 1,500).
    t0 = time.perf_counter()
    compiled = step.compile(batch_specs(cfg, sharding))
    compile_s = time.perf_counter() - t0
    cost = compiled.cost_analysis() or {}
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    mem = compiled.memory_analysis()

    shm_before = shm_segments()
    sampler = HostSampler().start()
    host_ds = build_dataset(cfg.loader_config(jax.process_index()), stage_timing=cfg.grain_stats)
    agree, agree_every = _agreement()
    feed = make_feed(cfg.feed, host_ds, sharding, cpu_buffer_size=cfg.cpu_buffer_size,
                     device_buffer_size=cfg.device_buffer_size, timeout_s=cfg.data_timeout_s)
    grain_stats = pd.DataFrame()
    closed = False
    try:
        t0 = time.perf_counter()
        first, first_times = next(feed)
        time_to_first_batch = time.perf_counter() - t0
        layout = batch_layout(first)
        last = {"batch": first}

        def fed_step(i):
            f0 = heap.minor_faults()
            t0 = time.perf_counter()
            if i == 0:
                batch, times = first, first_times
            else:
                batch, times = next(feed)
            t1 = time.perf_counter()
            times = dict(times)
            made = times.pop(MADE_KEY, float("nan"))
            with jax.transfer_guard("disallow"):
                loss = step(batch)
            jax.block_until_ready(loss)
            t2 = time.perf_counter()
            loss_v = float(jax.device_get(loss))
            check_finite(loss_v, i)
            last["batch"] = batch
            # how long the batch waited, made, in the loader's and the feed's buffers (the first one
            # waited while the step compiled: not a buffer's depth)
            age = t1 - made if i > 0 else float("nan")
            return {"step": i, "phase": "fed", "data_wait_s": t1 - t0, "step_time_s": t2 - t0,
                    "compute_s": t2 - t1, "batch_age_s": age, "loss": loss_v,
                    "minor_faults": heap.minor_faults() - f0, **times}

        freeze_heap()  # the model, the compiled step and the imports: out of the loop's collections
        machine = MachineWindow(sampler.tree_cpu_s)

        def fed_start():
            sampler.window_start()
            machine.start()
        # Grain's workers take turns: the first num_workers batches each come from a worker starting
        # (one more step for a feed whose thread asks for the next batch ahead)
        fed = measure_window(fed_step, cfg, on_measure_start=fed_start, agree=agree,
                             agree_every=agree_every, startup_steps=cfg.num_workers + 1 if cfg.num_workers else 0)
        fed_machine = machine.stop()
        cpu_util = sampler.cpu_util()
        # the kernel counts CPU time in 10 ms ticks: a window shorter than MachineWindow.MIN_S (ten
        # ticks) does not resolve the workers' CPU. The smoke study's worker probe (windows of two
        # steps, a few ms) once read 0 ticks for a worker that had been busy throughout: NaN, not 0.
        resolved = sampler.window_s() >= MachineWindow.MIN_S
        worker_thread_cpu_s = sampler.busiest_thread_cpu_s() if resolved else float("nan")
        worker_cpu_s = sampler.children_cpu_s() if resolved else float("nan")
        if cfg.grain_stats:  # with worker processes this waits up to 2 s per worker for their summaries
            grain_stats = grain_stats_frame(feed.host_iterator)
        # The device-resident bound: the same compiled step on a batch already on the device, measured
        # with no loader work running (feed threads and worker processes stopped), so that it is the
        # step's own rate and not the step's rate while the loader competes for the host's cores.
        host_batch = local_host_batch(last["batch"])
        del last["batch"]
        sampler.stop()  # the workers' last peaks, before they are stopped
        feed.close()
        closed = True
        gc.unfreeze()  # Grain's shared-memory batches still buffered are unlinked when collected,
        freeze_heap()  # then the bound's window runs with the heap frozen, as the fed loop's did
        loader_quiet = _loader_quiet()
        release_dead_workers_segments()  # what the stopped workers left in flight
        resident = put(host_batch, sharding)
        jax.block_until_ready(resident)
        n_fed = len(fed.records)

        def resident_step(i):
            f0 = heap.minor_faults()
            t0 = time.perf_counter()
            with jax.transfer_guard("disallow"):
                loss = step(resident)
            jax.block_until_ready(loss)
            dt = time.perf_counter() - t0
            loss_v = float(jax.device_get(loss))
            check_finite(loss_v, n_fed + i)
            return {"step": n_fed + i, "phase": "resident", "data_wait_s": 0.0, "step_time_s": dt,
                    "compute_s": dt, "loss": loss_v, "minor_faults": heap.minor_faults() - f0}

        res_machine = MachineWindow(sampler.tree_cpu_s)
        bound = measure_window(resident_step, cfg, on_measure_start=res_machine.start, agree=agree,
                               min_measure_s=cfg.resident_min_measure_s or cfg.min_measure_s,
                               agree_every=agree_every)
        res_machine = res_machine.stop()
    finally:
        gc.unfreeze()
        if not closed:
            try:
                sampler.stop()
            finally:
                feed.close()
            gc.collect()
            _loader_quiet()
            release_dead_workers_segments()  # a killed worker's half-made batch included

    steps_df = pd.DataFrame(fed.records + bound.records)
    fed_df = steps_df[(steps_df.phase == "fed") & ~steps_df.warmup]
    res_df = steps_df[(steps_df.phase == "resident") & ~steps_df.warmup]
    wall = float(fed_df.step_time_s.sum())
    samples = cfg.batch_size * len(fed_df)
    resident_sps = cfg.batch_size * len(res_df) / float(res_df.step_time_s.sum())
    sps = samples / wall
    eff_lo, eff_hi = ratio_interval(fed_df.step_time_s, res_df.step_time_s, seed=cfg.seed)
    local_devices = [d for d in devices if d.process_index == jax.process_index()]
    dev_stats = local_devices[0].memory_stats() or {}
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
        "warmup_s": fed.warmup_s,
        "warmup_steps_run": fed.warmup_steps,
        "warmup_steady": fed.steady,
        "warmup_filled": fed.filled,
        "steps_measured": len(fed_df),
        "measure_s": wall,
        "samples_per_s": sps,
        "steps_per_s": len(fed_df) / wall,
        "step_time_median_s": float(fed_df.step_time_s.median()),
        "step_time_p90_s": float(fed_df.step_time_s.quantile(0.9)),
        "compute_time_median_s": float(fed_df.compute_s.median()),
        "data_wait_s_total": float(fed_df.data_wait_s.sum()),
        "data_wait_median_s": float(fed_df.data_wait_s.median()),
        "data_wait_frac": float(fed_df.data_wait_s.sum()) / wall,
        "batch_age_median_s": float(fed_df.batch_age_s.median()),
        "device_resident_samples_per_s": resident_sps,
        "device_resident_step_median_s": float(res_df.step_time_s.median()),
        "resident_steps_measured": len(res_df),
        "resident_measure_s": float(res_df.step_time_s.sum()),
        "resident_warmup_steps_run": bound.warmup_steps,
        "resident_warmup_steady": bound.steady,
        "resident_loader_stopped": loader_quiet,
        # the main process's minor page faults per step (all its threads: without workers the
        # loader's too in the fed loop); a step that maps fresh memory pays one per 4 KiB page
        # (experiments.heap.release_free)
        "minor_faults_per_step": float(fed_df.minor_faults.mean()),
        "resident_minor_faults_per_step": float(res_df.minor_faults.mean()),
        "feed_efficiency": sps / resident_sps,
        "feed_efficiency_lo": eff_lo,
        "feed_efficiency_hi": eff_hi,
        "bound_exceeded": bool(eff_lo > 1.0),
        "decode_s_per_sample": float(fed_df.get("t_decode", pd.Series([0.0])).sum()) / samples,
        "augment_s_per_sample": float(fed_df.get("t_augment", pd.Series([0.0])).sum()) / samples,
        # the same stages' CPU seconds (thread time: their cost without contention for the cores)
        **{f"{stage}_cpu_s_per_sample": float(fed_df.get(f"c_{stage}", pd.Series([0.0])).sum()) / samples
           for stage in ("read", "decode", "augment")},
        # all CPU seconds of the worker processes over the window (Grain's work and the copies between
        # processes included) per sample consumed: the loader's whole cost, uncontended, when it has workers
        "worker_cpu_s_per_sample": worker_cpu_s / samples if cfg.num_workers > 0 else float("nan"),
        # of it, each worker's busiest thread (its pipeline's): the part on the workers' period's path
        "worker_thread_cpu_s_per_sample": worker_thread_cpu_s / samples if cfg.num_workers > 0 else float("nan"),
        "host_cpu_util": cpu_util,
        # the machine's company during the fed and the resident windows (MachineWindow)
        "steal_frac": fed_machine["steal_frac"], "foreign_cpu_cores": fed_machine["foreign_cpu_cores"],
        "resident_steal_frac": res_machine["steal_frac"],
        "resident_foreign_cpu_cores": res_machine["foreign_cpu_cores"],
        "written_mib": fed_machine["written_mib"], "resident_written_mib": res_machine["written_mib"],
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
        "final_loss": float(fed_df.loss.iloc[-1]),
        "first_loss": float(steps_df.loss.iloc[0]),
        "wall_s": time.perf_counter() - t_start,
    }
    return RunResult(pd.DataFrame([row]), steps_df, grain_stats, layout)


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
        f"  device-resident      {r.device_resident_samples_per_s:12.1f}   feed_efficiency {r.feed_efficiency:.3f} "
        f"[{r.feed_efficiency_lo:.3f}, {r.feed_efficiency_hi:.3f}]"
        + ("   BOUND EXCEEDED: the bound was measured low (something competed with it)" if r.bound_exceeded else ""),
        f"  windows              fed {r.measure_s:.2f} s ({r.steps_measured} steps), bound {r.resident_measure_s:.2f} s "
        f"({r.resident_steps_measured} steps); warm-up {r.warmup_steps_run} steps"
        + ("" if r.warmup_steady else " (not steady: stopped at max_warmup_s)")
        + ("" if getattr(r, "warmup_filled", True) else " (buffers still filling: stopped at the fill's limit)"),
        f"  step time median/p90 {r.step_time_median_s * 1e3:9.2f} / {r.step_time_p90_s * 1e3:.2f} ms",
        f"  data wait            {r.data_wait_frac * 100:11.1f} %  (median {r.data_wait_median_s * 1e3:.2f} ms/step)",
        f"  host per sample      decode {r.decode_s_per_sample * 1e6:.1f} µs, augment {r.augment_s_per_sample * 1e6:.1f} µs"
        f" (CPU: read {r.read_cpu_s_per_sample * 1e6:.1f}, decode {r.decode_cpu_s_per_sample * 1e6:.1f}, augment "
        f"{r.augment_cpu_s_per_sample * 1e6:.1f} µs)",
        f"  compile {r.compile_s:.2f} s, warm-up {r.warmup_s:.2f} s, first batch {r.time_to_first_batch_s:.2f} s",
        f"  host CPU {r.host_cpu_util * 100:.0f} % of {r.cpu_count} cores, peak RSS {r.peak_rss_bytes / 2**20:.0f} MiB",
        f"  loss {r.first_loss:.3f} → {r.final_loss:.3f}",
    ]
    return "\n".join(lines)
