"""Component probes: the training step alone and the loader alone, per shape (the step probe in a
process of its own, the others in the caller's).

The cost model (``analysis.costmodel``) composes a configuration's throughput from its parts: the
step on a batch already on the device, the loader's CPU per sample, the host→device copy (the
hierarchy probes) and the contention of all of them for the host's cores. A sweep run measures the
whole pipeline, and costs about 5–8 s on a 2-core CPU (a process, a compile, a loader, two
windows). Each part costs a fraction of that, so the study measures the parts over more shapes than
it can afford full runs of. Calibration then fits what only whole runs show, namely how the parts
share the cores, to the runs.

- **step probe** (``step_probe/rows.csv``). For each (model, precision, grad_accum_steps, batch_size,
  image_size) the runs' own ``TrainStep`` is compiled and stepped on a batch already on the device,
  with the runs' window rules and shorter windows, from a heap that cannot serve a block of the
  step's temporaries above glibc's 32 MiB mmap cap from an earlier shape's free memory (such a block
  is mapped and faulted in afresh on every step of a run, as there: ``xla_temp_bytes``,
  ``resident_minor_faults_per_step``; :func:`run`, ``experiments.heap.hold_large_free``). Such a
  shape is measured a second time with that block served from the heap and reused
  (``from_heap_step_median_s``): ``fault_s_per_page`` is the difference per faulted page, what a
  fault costs inside the step (``experiments.heap.reuse_large_blocks``; 1.1–2.2 µs on the 2-core
  AMD EPYC over the quick study's six such shapes). Each row has ``device_resident_samples_per_s``,
  the step median, the compile time and XLA's FLOPs: the columns a sweep row has, so that
  ``analysis.costmodel.fit(step_probe=...)`` reads either. It also has ``resident_cpu_cores``, the
  process's CPU seconds per second of step: the host cores the step keeps busy (XLA's thread pool,
  computing or spinning), which is what a loader worker competes with. Measured on the 2-core CPU
  on 2026-11-25 at 10:32 UTC (a slow spell: steps ran about 3× slower than at 05:45), at the
  probe's five shapes per cell: MLP 1.75–1.92 in either precision, CNN in fp32 1.24–1.33 without
  accumulation and 1.29–1.66 with, CNN in bf16 1.42–1.70. The cost model (version 7) fits
  ``ν`` per model family on the runs' own main-process CPU beside the workers, which includes the
  step's threads spinning while a worker holds a core: 2.18 for the MLP and 1.60 for the CNN on the
  committed study (``analysis/costmodel/model.py``).
- **stage probe** (``stage_probe/rows.csv``). For each (source, image_size, augment_cost) the
  loader's stamped stages (``experiments.loader``'s ``TimedSource`` read, ``Decode``, ``Augment``)
  are called alone in one thread on the runs' data, without Grain. Each row has the stages' CPU
  per sample (``read_cpu_s_per_sample``, ``decode_cpu_s_per_sample``, ``augment_cpu_s_per_sample``:
  the columns a sweep row has). A run stamps only the few (source, image size, augmentation)
  combinations its designed sample holds, inside a pipeline whose other processes disturb them;
  the probe measures every combination of the levels in about 10 s, so the cost model gets the
  stages' shape from the probe and only how the pipeline inflates them from the runs.
- **loader probe** (``loader_probe/rows.csv``). For each (source, image_size, augment_cost) the runs'
  Grain pipeline, with no worker process and no prefetch thread, is iterated alone. Each row has
  the seconds per batch and per sample.

- **worker probe** (``worker_probe/``, a sweep's folder: :func:`worker_sweep`). One loader worker
  feeding a step too small to wait for, at the sweep's smallest and largest batch and image sizes:
  the worker's CPU outside its stamped stages where the worker, not the step, sets the pace. Its
  runs go through the sweep's runner (a process each), as a worker process needs.

The study measures the step, stage and worker probes: calibration uses the loader probe only when asked
(``costmodel fit --loader_probe``; see ``analysis.costmodel.model.fit`` for the measurement
that decided it).

Shapes run in a seeded shuffled order, so a slow spell of a shared machine does not land on one
family; each shape is measured ``repeats`` times (the stage probe's ``stage_repeats``, 3 by
default), round-robin. Rows are appended as each
measurement finishes (Ctrl-C keeps them), and a resumed run skips the (shape, repeat) pairs it has.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from experiments import heap, results
from experiments.configs import check, to_flat_dict
from experiments.env import environment

STEP_KEYS = ("model", "precision", "grad_accum_steps", "batch_size", "image_size")
LOADER_KEYS = ("source", "image_size", "augment_cost")
#: the step probe's child process is killed after this long (the quick study's 40 shapes take 1–2 min)
STEP_CHILD_TIMEOUT_S = 3600.0
ENV_KEYS = ("platform", "device_kind", "cpu_count", "cpu_model", "cpu_simd", "malloc", "jax_version", "jaxlib_version",
            "grain_version", "git_commit")


@dataclasses.dataclass(frozen=True)
class ComponentConfig:
    # step probe: every combination of these, at the (batch_size, image_size) pairs of step_shapes
    model: tuple[str, ...] = ("mlp", "cnn")
    precision: tuple[str, ...] = ("fp32", "bf16")
    grad_accum_steps: tuple[int, ...] = (1, 2)
    # (batch_size, image_size) pairs per model/precision/accumulation cell: the corners and the
    # centre of the sampled range, so that a cell's overhead and rate are both identified
    step_shapes: tuple[tuple[int, int], ...] = ((32, 16), (128, 16), (64, 32), (32, 48), (128, 48))
    # stage and loader probes: the levels (the stage probe takes every combination)
    source: tuple[str, ...] = ("ram", "memmap", "arrayrecord")
    image_size: tuple[int, ...] = (16, 32, 48)
    augment_cost: tuple[int, ...] = (0, 2, 4)
    # 0: every combination; n > 0: a balanced designed sample of n of them (experiments.sweep.design_sample)
    loader_sample: int = 0
    loader_batch_size: int = 64
    loader: bool = True  # the loader probe
    stage: bool = True  # the stage probe
    stage_batch_size: int = 32  # samples per timed window step of the stage probe
    # the models and data of the runs the probes stand for (the sweep's)
    width: int = 512
    depth: int = 2
    cnn_width: int = 16
    cnn_depth: int = 3
    num_samples: int = 2048
    cache_dir: str = ""
    # windows (the runs' rules: warm up until steady or max_warmup_s, then min_steps and min_measure_s)
    min_steps: int = 4
    min_measure_s: float = 0.25
    warmup_steps: int = 2
    max_warmup_s: float = 0.5
    repeats: int = 1  # rounds of the step and loader probes
    # the step probe's window per round (0: min_measure_s). Each shape is compiled once, in its first
    # round; later rounds step the same executable (measure_step's cache), so a round costs its windows
    step_measure_s: float = 0.0
    # rounds of the stage probe: each combination once per round, every round in its own shuffled
    # order; the cost model takes each combination's median. With one 0.3 s window per combination a
    # slow spell lands on a few of them: over the fourteen quick studies of the 2-core Intel Xeon in
    # results/cpu-2core/holdout (pair14–pair27, one round each), 20 of the 378 (study, combination)
    # stamps were more than 20% above that combination's median over the fourteen, 13 more than 30%
    # (pair27's ArrayRecord 16×16 with 4 passes: 367 µs, against 253–301 in the others). The
    # cross-validation fold that leaned on that one predicted its held-out run 16% slow; with the
    # stamp at the others' level, 12%. Two more rounds cost about 20 s on that machine.
    stage_repeats: int = 3
    order_seed: int = 0

    def __post_init__(self):
        for k in ("model", "precision", "grad_accum_steps", "step_shapes", "source", "image_size", "augment_cost"):
            check(isinstance(getattr(self, k), tuple), k, getattr(self, k), "must be a tuple of levels (may be empty)")
        check(all(len(s) == 2 and s[0] > 0 and s[1] > 0 for s in self.step_shapes), "step_shapes",
              self.step_shapes, "each shape is a (batch_size, image_size) pair of positive integers, written 64x32 on "
              "the command line (--step_shapes=32x16,64x32)")
        check(self.repeats >= 1, "repeats", self.repeats, "must be >= 1")
        check(self.stage_repeats >= 1, "stage_repeats", self.stage_repeats, "must be >= 1")
        check(self.loader_batch_size >= 1, "loader_batch_size", self.loader_batch_size, "must be >= 1")
        check(self.stage_batch_size >= 1, "stage_batch_size", self.stage_batch_size, "must be >= 1")
        check(self.min_steps >= 2, "min_steps", self.min_steps, "must be >= 2")
        check(self.step_measure_s >= 0, "step_measure_s", self.step_measure_s, "must be >= 0 (0: min_measure_s)")
        self.step_configs()  # every shape must be a valid run, before any work
        self.loader_configs()

    def _train_config(self, **kw):
        from experiments import configs
        from experiments.train import TrainConfig
        base = TrainConfig(num_samples=self.num_samples, min_steps=self.min_steps, min_measure_s=self.min_measure_s,
                           warmup_steps=self.warmup_steps, max_warmup_s=self.max_warmup_s, grain_stats=False,
                           num_workers=0, prefetch_buffer_size=0, feed="none", device_buffer_size=0,
                           **({"cache_dir": self.cache_dir} if self.cache_dir else {}))
        wd = {"width": self.cnn_width, "depth": self.cnn_depth} if kw.get("model") == "cnn" else \
            {"width": self.width, "depth": self.depth}
        return configs.apply_overrides(base, {**wd, **kw})

    def step_configs(self) -> list:
        out = []
        for m, q, g, (b, s) in itertools.product(self.model, self.precision, self.grad_accum_steps, self.step_shapes):
            check(b % g == 0, "step_shapes", (b, s), f"batch_size {b} is not divisible by grad_accum_steps {g}")
            win = {"min_measure_s": self.step_measure_s} if self.step_measure_s else {}
            out.append(self._train_config(model=m, precision=q, grad_accum_steps=g, batch_size=b, image_size=s, **win))
        return out

    def stage_configs(self) -> list:
        if not (self.stage and self.source and self.image_size and self.augment_cost):
            return []
        return [self._train_config(source=src, image_size=s, augment_cost=a, batch_size=self.stage_batch_size)
                for src, s, a in itertools.product(self.source, self.image_size, self.augment_cost)]

    def loader_configs(self) -> list:
        if not (self.loader and self.source and self.image_size and self.augment_cost):
            return []  # off, or a level list left empty: no loader probe
        if self.loader_sample:
            from experiments.sweep import design_sample
            pts = design_sample({"source": self.source, "image_size": self.image_size,
                                 "augment_cost": self.augment_cost}, self.loader_sample, seed=self.order_seed)
            combos = [(p["source"], p["image_size"], p["augment_cost"]) for p in pts]
        else:
            combos = list(itertools.product(self.source, self.image_size, self.augment_cost))
        return [self._train_config(source=src, image_size=s, augment_cost=a, batch_size=self.loader_batch_size)
                for src, s, a in combos]


def smoke() -> ComponentConfig:
    """A few seconds: used by the tests."""
    return ComponentConfig(model=("mlp",), precision=("fp32",), grad_accum_steps=(1, 2), step_shapes=((8, 8), (16, 8)),
                           source=("ram", "arrayrecord"), image_size=(8,), augment_cost=(0, 1), loader_batch_size=8,
                           width=16, depth=1, num_samples=64, min_steps=2, min_measure_s=0.0, max_warmup_s=0.05)


def _levels(cfg, k: str) -> tuple:
    """The levels a sweep runs of knob ``k``: its grid's and, with a designed sample, the sample's."""
    vals = set(getattr(cfg, k)) | (set(getattr(cfg, f"sample_{k}")) if cfg.sample_size else set())
    return tuple(sorted(vals))


def for_sweep(cfg, repeats: int = 3, loader: bool = True, stage: bool = True,
              stage_repeats: int = 2) -> ComponentConfig:
    """The component probes of a sweep (``experiments.sweep.SweepConfig``): its models and data, the
    levels of its grid and designed sample.

    Each model × precision × accumulation cell is probed at five (batch, image) shapes: the four
    corners of the levels and the middle pair (40 shapes for the quick sweep). The step model gives
    each cell a FLOP rate and a cost per parameter and micro-batch (``analysis.costmodel.model``);
    for an MLP both grow with the image, and only shapes of one image at several batch sizes tell
    them apart. Measured on the 2-core CPU on 2026-11-25, the 5-fold cross-validation's largest
    held-out error of quick studies, with the probe at two shapes per cell (the smallest pair and
    the middle one, as before) → five → all nine pairs: 87% → 70% → 50% (the committed study, with
    the 72-shape grid of ``results/cpu-2core/step-noise/first`` as its probe) and 86% → 66% → 64%
    (a study measured with all nine). All nine cost 72 shapes, 85 s on a quiet day and 180 s on a
    slow one, which took the demo past 8 minutes; five cost 40. (``results/cpu-2core/holdout/README.md``.)
    The loader gets a balanced sample of source × image size × augmentation cost, as many points
    as the largest level count squared (9 of the 27 combinations for the quick sweep); with
    ``loader=False`` none (the study's choice: calibration does not use it by default, see
    ``analysis.costmodel.model.fit``). The stage probe takes every combination (27 for the quick
    sweep, about 10 s a round on the 2-core CPU); ``stage=False`` leaves it out. It runs
    ``stage_repeats`` rounds (two; the standalone command's default is three). Why two: the demo ran
    over its 8 minutes on the 2-core AMD EPYC (family 25, model 17), and the committed studies say
    the third round buys nothing. Over the 81 pairs ``results/cpu-2core/holdout/pair52``–``pair132``,
    refitted with their stage probe cut to its first two rounds and their worker probe to its first
    repeat (``costmodel holdout``), cross-validation met the goal in 17 pairs either way, with the
    probes kept in 24 against 23, the second sweep's comparison in 13 either way, both checks in 5
    either way; the pairs' median and max errors moved a median 0.1 points or less (at most 2.3 and
    3.7 points in one pair). The rounds are noisy on these machines (a combination's three stamps
    spread a median 15–28% max − min over their median in ``pair100``, ``pair131`` and ``pair132``),
    but the fit pools the 27 combinations into a few parameters. Cutting the step probe to two
    rounds as well did cost: cross-validation met the goal in 13 pairs instead of 17.

    The step probe measures each shape in ``repeats`` rounds (each in its own shuffled order) of a
    window ``repeats`` times shorter than the probes' 0.3 s, the shape compiled once; calibration
    takes each shape's median (``analysis.costmodel.model._step_probe_rows``). With one window a
    shape, a slow spell landed on single shapes: on the 2-core AMD EPYC (family 25, model 17) on
    2026-11-28, ``holdout/pair52``'s fp32 MLP at batch 32, 16×16 read 3.80 ms, twice the same shape
    in two micro-batches, and cross-validation's worst prediction (−36%) came from it. Three rounds
    of 0.1 s measured the quick study's 40 shapes in 103 s against 84 s for one round of 0.3 s (the
    same machine, one after the other; their rounds differed by a median 1.28×, max / min, on that
    busy machine, its numpy check at 30%), and in 83 s once a later round warmed a shape up in two
    steps instead of waiting for a steady step time (rounds 1.18× apart; the later rounds' steps a
    median 0.99× and 0.95× the first's)."""
    def levels(k):
        return _levels(cfg, k)
    bs, im = levels("batch_size"), levels("image_size")
    shapes = sorted({(b, s) for b in (bs[0], bs[-1]) for s in (im[0], im[-1])} | {(bs[len(bs) // 2], im[len(im) // 2])})
    src, aug = levels("source"), levels("augment_cost")
    n_loader = len(src) * len(im) * len(aug)
    return ComponentConfig(model=levels("model"), precision=levels("precision"),
                           grad_accum_steps=levels("grad_accum_steps"), step_shapes=tuple(shapes),
                           source=src, image_size=im, augment_cost=aug, loader=loader, stage=stage,
                           loader_sample=min(n_loader, max(len(src), len(im), len(aug)) ** 2),
                           width=cfg.width, depth=cfg.depth, cnn_width=cfg.cnn_width, cnn_depth=cfg.cnn_depth,
                           num_samples=cfg.num_samples, cache_dir=cfg.cache_dir, repeats=repeats,
                           stage_repeats=stage_repeats,
                           # the probes' windows, or the sweep's where those are shorter (the smoke preset)
                           min_steps=max(2, min(3, cfg.min_steps)), min_measure_s=min(0.3, cfg.min_measure_s),
                           step_measure_s=min(0.3, cfg.min_measure_s) / repeats,
                           warmup_steps=1, max_warmup_s=min(0.3, cfg.max_warmup_s))


#: the worker probe's windows, whatever the sweep's: the workers' CPU is read from the kernel's 10 ms
#: ticks, so a window must hold many of them. With the smoke sweep's windows (``min_measure_s=0``, two
#: steps, a few ms) one run of the smoke study read 0 ticks for a worker that was busy throughout.
WORKER_PROBE_WINDOW_S = 0.5


def worker_sweep(cfg, repeats: int = 1):
    """The worker probe of a sweep (``experiments.sweep.SweepConfig``): a sweep of one loader worker
    (``num_workers=1``, ``feed='none'``) feeding the width-16, depth-1 MLP, whose step (well under a
    millisecond) the worker never waits for, at the smallest and largest of the sweep's batch sizes
    and image sizes (4 runs for the quick sweep), each ``repeats`` times (once: a second repeat cost
    the demo about 15 s, and the pairs refitted without it fit as well; see :func:`for_sweep`), with
    half-second windows.
    Source ``ram`` and no augmentation: what is measured is the worker's CPU outside its stamped
    stages (Grain's per-element work, the batching, the batch's copy into shared memory), which does
    not read the source, and with the cheapest stages that rest is the largest share of it.

    Why: the cost model fits that rest (``worker_base_s``, ``worker_batch_s``, ``worker_pixel_s``)
    on the runs with workers, and in the quick study's designed sample only two runs have one worker
    and the loader as the bottleneck (the MLP at batch 128 and 16×16, ArrayRecord; at batch 64 and
    32×32, RAM). A 5-fold cross-validation that holds both out fits the rest on runs whose workers
    wait for the step, and over the seventeen quiet quick studies of the 2-core Intel Xeon in
    ``results/cpu-2core/holdout`` (``pair14``–``pair30``) it put them a median 12–14% too slow (at
    worst 38%). One worker feeding the width-16 MLP measured the rest at 90–117 µs a sample at batch
    128 and 115–170 µs at batch 32 (``holdout/worker-grid/width16``), against 99–117 µs in those
    studies' own one-worker runs at batches 128 and 64.

    The equivalent command line: ``python -m experiments sweep --preset quick --model=mlp --width=16
    --depth=1 --precision=fp32 --source=ram --image_size=16,48 --batch_size=32,128 --augment_cost=0
    --num_workers=1 --feed=none --prefetch_buffer_size=4 --grad_accum_steps=1 --sample_size=0
    --repeats=1 --min_measure_s=0.5 --max_warmup_s=0.5``."""
    from experiments.sweep import SweepConfig

    bs, im = _levels(cfg, "batch_size"), _levels(cfg, "image_size")
    return SweepConfig(model=("mlp",), source=("ram",), image_size=tuple(sorted({im[0], im[-1]})),
                       batch_size=tuple(sorted({bs[0], bs[-1]})), grad_accum_steps=(1,), precision=("fp32",),
                       augment_cost=(0,), num_workers=(1,), prefetch_buffer_size=(max(_levels(cfg, "prefetch_buffer_size")),),
                       device_buffer_size=(2,), feed=("none",), num_processes=(1,), sample_size=0, width=16, depth=1,
                       num_samples=cfg.num_samples, min_steps=cfg.min_steps, min_measure_s=WORKER_PROBE_WINDOW_S,
                       warmup_steps=cfg.warmup_steps, warmup_time_s=0.0, max_warmup_s=min(0.5, cfg.max_warmup_s),
                       seed=cfg.seed, grain_stats=False, cache_dir=cfg.cache_dir, repeats=repeats,
                       order_seed=cfg.order_seed, config_timeout_s=cfg.config_timeout_s, isolate=cfg.isolate)


def quick() -> ComponentConfig:
    """The parts of the quick sweep (the study's): every model × precision × accumulation cell at five
    (batch, image) shapes, every source × image size × augmentation cost of the loader."""
    from experiments import sweep
    return for_sweep(sweep.quick())


PRESETS = {"smoke": smoke, "quick": quick}


# ------------------------------------------------------------------------------------ measuring

def _compiled_step(tc) -> tuple:
    """(step, batch, compile_s, cost analysis, temp bytes): ``tc``'s step compiled, and one batch on
    the device."""
    import jax
    from experiments.feed import batch_sharding, put
    from experiments.models import make_model
    from experiments.train import TrainStep, batch_specs

    sharding = batch_sharding(jax.devices()[:1])
    step = TrainStep(make_model(tc.model_config(), seed=tc.seed), tc)
    step.replicate(sharding)
    t0 = time.perf_counter()
    compiled = step.compile(batch_specs(tc, sharding))
    compile_s = time.perf_counter() - t0
    cost = compiled.cost_analysis() or {}
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    try:
        temp_bytes = float(compiled.memory_analysis().temp_size_in_bytes)
    except Exception:  # a backend without the analysis
        temp_bytes = float("nan")
    rng = np.random.default_rng(tc.seed)
    host = {"image": rng.standard_normal((tc.batch_size, tc.image_size, tc.image_size, tc.channels)).astype(np.float32),
            "label": rng.integers(0, tc.num_classes, tc.batch_size).astype(np.int32)}
    batch = put(host, sharding)
    jax.block_until_ready(batch)
    return step, batch, compile_s, cost, temp_bytes


def measure_step(tc, cache: dict | None = None) -> dict:
    """The step of ``tc`` alone: compiled, then stepped on one batch already on the device, with
    ``tc``'s window rules (``experiments.train.measure_window``).

    With ``cache`` (a dict the caller keeps), a shape compiled in an earlier round is stepped again
    on the same executable and batch (``compile_reused``; ``compile_s`` is its first round's): the
    step probe's later rounds cost their windows, not a compile each (compiling was 36 of the quick
    study's 66 s of step probe on the 2-core AMD EPYC, one round)."""
    import jax
    from experiments.train import measure_window

    reused = cache is not None and tc in cache  # a TrainConfig is frozen: the shape is its key
    if reused:
        step, batch, compile_s, cost, temp_bytes = cache[tc]
        # warmed up in its first round: two steps for the caches, not the runs' wait for a steady
        # step time (10 steps or more; a quarter of a later round's 16 s on the 2-core AMD EPYC).
        # A microsecond's cap ends the warm-up at warmup_steps (the config refuses a cap of 0).
        tc = dataclasses.replace(tc, warmup_steps=max(2, tc.warmup_steps), max_warmup_s=1e-6)
    else:
        step, batch, compile_s, cost, temp_bytes = _compiled_step(tc)
        if cache is not None:
            cache[tc] = (step, batch, compile_s, cost, temp_bytes)
    released = heap.release_free()  # a heap holding nothing earlier shapes freed, as a run's (experiments.heap)
    held = heap.hold_large_free()  # and no free block above the mmap cap (experiments.heap.hold_large_free)
    n_held = len(held)

    def one(i):
        f, c, t = heap.minor_faults(), time.process_time(), time.perf_counter()
        jax.block_until_ready(step(batch))
        return {"step_time_s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
                "minor_faults": heap.minor_faults() - f}
    try:
        w = measure_window(one, tc)
    finally:
        heap.free_held(held)
    times = np.array([r["step_time_s"] for r in w.records[w.warmup_steps:]])
    cpu = np.array([r["cpu_s"] for r in w.records[w.warmup_steps:]])
    faults = np.array([r["minor_faults"] for r in w.records[w.warmup_steps:]])
    # a shape whose temporaries exceed glibc's mmap cap faults them in on every step, as a run does;
    # measured again with them served from the heap and reused, the difference per page is what a
    # page fault costs inside this step (experiments.heap.reuse_large_blocks)
    heap_s = heap_faults = fault_s = float("nan")
    if temp_bytes > heap.MMAP_CAP and heap.reuse_large_blocks():
        try:
            wh = measure_window(one, tc)
        finally:
            heap.map_large_blocks()
        heap_s = float(np.median([r["step_time_s"] for r in wh.records[wh.warmup_steps:]]))
        heap_faults = float(np.mean([r["minor_faults"] for r in wh.records[wh.warmup_steps:]]))
        if faults.mean() - heap_faults > 1000:
            fault_s = (float(np.median(times)) - heap_s) / (float(faults.mean()) - heap_faults)
    # the host cores the step keeps busy: the process's CPU seconds (XLA's thread pool included,
    # spinning or computing) per second of step
    return {"device_resident_samples_per_s": tc.batch_size * len(times) / float(times.sum()),
            "resident_cpu_cores": float(cpu.sum() / times.sum()),
            "device_resident_step_median_s": float(np.median(times)), "resident_steps_measured": len(times),
            "resident_measure_s": float(times.sum()), "resident_warmup_steps_run": w.warmup_steps,
            "resident_warmup_steady": w.steady, "compile_s": compile_s, "compile_reused": reused,
            "resident_minor_faults_per_step": float(faults.mean()), "heap_released": released,
            "heap_blocks_held": n_held, "async_dispatch": _async_dispatch(),
            "xla_flops_per_step": float(cost.get("flops", np.nan)),
            "xla_bytes_accessed_per_step": float(cost.get("bytes accessed", np.nan)),
            "xla_temp_bytes": temp_bytes, "from_heap_step_median_s": heap_s,
            "from_heap_minor_faults_per_step": heap_faults, "fault_s_per_page": fault_s}


def measure_stage(tc) -> dict:
    """The stamped stages of ``tc``'s loader alone, in this thread: a window step reads, decodes
    (ArrayRecord) and augments ``tc.batch_size`` samples in a seeded shuffled order, with ``tc``'s
    window rules. The stages stamp their own thread CPU time, as in a run."""
    from experiments.data import image_source
    from experiments.loader import Augment, Decode, TimedSource
    from experiments.train import measure_window
    lc = tc.loader_config()
    src = TimedSource(image_source(lc.image_spec, lc.source, lc.cache_dir))
    decode = Decode(str(src.src.path)) if lc.source == "arrayrecord" else None
    augment = Augment(lc.crop_padding, lc.augment_cost)
    rng = np.random.default_rng(tc.seed)
    order = rng.permutation(len(src))
    stamps = []

    def one(i):
        t = time.perf_counter()
        acc = np.zeros(3)
        for k in range(i * tc.batch_size, (i + 1) * tc.batch_size):
            x = src[int(order[k % len(order)])]
            x = augment(decode(x) if decode is not None else x, rng)
            acc += (x["c_read"], x["c_decode"], x["c_augment"])
        stamps.append(acc)
        return {"step_time_s": time.perf_counter() - t}
    w = measure_window(one, tc)
    n = tc.batch_size * (len(stamps) - w.warmup_steps)
    read, dec, aug = np.sum(stamps[w.warmup_steps:], axis=0) / n
    times = np.array([r["step_time_s"] for r in w.records[w.warmup_steps:]])
    return {"read_cpu_s_per_sample": float(read), "decode_cpu_s_per_sample": float(dec),
            "augment_cpu_s_per_sample": float(aug), "stage_s_per_sample": float(times.sum()) / n,
            "samples_measured": n, "stage_measure_s": float(times.sum())}


def measure_loader(tc) -> dict:
    """The loader of ``tc`` alone (no worker process, no prefetch thread): seconds per batch."""
    from experiments.loader import build_dataset
    from experiments.train import measure_window
    t0 = time.perf_counter()
    it = iter(build_dataset(tc.loader_config(), stage_timing=False))
    next(it)
    first_s = time.perf_counter() - t0

    def one(i):
        t = time.perf_counter()
        next(it)
        return {"step_time_s": time.perf_counter() - t}
    w = measure_window(one, tc)
    times = np.array([r["step_time_s"] for r in w.records[w.warmup_steps:]])
    close = getattr(it, "close", None)
    if close is not None:
        close()
    return {"loader_s_per_batch": float(times.mean()), "loader_s_per_batch_median": float(np.median(times)),
            "loader_s_per_sample": float(times.mean()) / tc.batch_size, "batches_measured": len(times),
            "loader_measure_s": float(times.sum()), "time_to_first_batch_s": first_s}


def _order(n: int, repeats: int, seed: int) -> list[tuple[int, int]]:
    """(shape index, repeat): round-robin over repeats, each round in its own seeded shuffled order."""
    rng = np.random.default_rng(seed)
    return [(int(i), r) for r in range(repeats) for i in rng.permutation(n)]


def _async_dispatch() -> bool:
    """Whether JAX's CPU client dispatches asynchronously (its default; the step child turns it off)."""
    import jax
    return bool(jax.config.read("jax_cpu_enable_async_dispatch"))


def _probe(kind: str, tcs: list, keys: tuple, fn, out: Path, cfg: ComponentConfig, env: dict, progress: bool) -> int:
    """One probe's shapes into ``out/<kind>_probe`` (resumable); the number that failed."""
    d = out / f"{kind}_probe"
    d.mkdir(parents=True, exist_ok=True)
    results.write_json_atomic(d / "config.json", {"experiment": f"{kind} probe", "config": to_flat_dict(cfg),
                                                 "environment": environment()}, sort_keys=False)
    done = results.done_pairs(d)
    writer = results.RowWriter(d)
    order = _order(len(tcs), cfg.stage_repeats if kind == "stage" else cfg.repeats, cfg.order_seed)
    failed = 0
    for k, (i, rep) in enumerate(order):
        tc = tcs[i]
        flat = to_flat_dict(tc)
        cid = results.config_id(flat)
        if (cid, rep) in done:
            continue
        row = {"config_id": cid, "repeat": rep, "attempt": 0, **flat, **env}
        t0 = time.perf_counter()
        try:
            row.update(fn(tc), status="ok", error="")
        except Exception as e:  # one shape's failure is a row; the probe goes on
            row.update(status="failed", error=f"{type(e).__name__}: {e}".splitlines()[0][:500])
            failed += 1
        row["wall_s"] = time.perf_counter() - t0
        writer.append(row)
        if progress:
            what = ", ".join(f"{key}={flat[key]}" for key in keys)
            val = (f"{row.get('device_resident_step_median_s', float('nan')) * 1e3:.2f} ms/step" if kind == "step"
                   else f"{row.get(kind + '_s_per_sample', float('nan')) * 1e6:.1f} µs/sample")
            print(f"  {kind} probe {k + 1}/{len(order)} {what}: {val if row['status'] == 'ok' else row['error']}",
                  file=sys.stderr, flush=True)
    return failed


def _step_child(cfg: ComponentConfig, out: str, env: dict, progress: bool) -> int:
    """The step probe in a fresh process, its steps dispatched synchronously (set before JAX starts its
    backend): the step's temporaries are then allocated in this thread's heap, where
    ``experiments.heap.hold_large_free`` can keep an earlier shape's free blocks from serving them."""
    import jax
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    cache: dict = {}  # each shape compiled once, stepped again in later rounds (measure_step)
    return _probe("step", cfg.step_configs(), STEP_KEYS, lambda tc: measure_step(tc, cache), Path(out), cfg, env,
                  progress)


def run(cfg: ComponentConfig, out: str | Path, progress: bool = True) -> dict:
    """Measures the step, stage and loader probes of ``cfg`` into ``out/step_probe``,
    ``out/stage_probe`` and ``out/loader_probe`` (resumable). Returns ``{"step": rows, "stage": rows,
    "loader": rows, "failed": n, "seconds": s}``; a shape that fails becomes a row with
    ``status='failed'`` and its error, and the others go on.

    The step probe runs in a child process of its own (spawned, dying with this one; about 3 s more
    on the 2-core CPU): a heap that only the step probe's shapes used, and JAX's CPU dispatch made
    synchronous before its backend starts (:func:`_step_child`). A training process maps a block of
    step temporaries above glibc's 32 MiB mmap cap afresh on every step, and the probe reproduces
    that only when the step allocates in the thread that holds the heap's large free blocks
    (``experiments.heap.hold_large_free``). Each step is waited for (``block_until_ready``) either
    way, so the dispatch mode changes where the step's buffers are allocated, not what is timed: the
    40 shapes measured so and each alone in a fresh process with JAX's default dispatch differed by
    a median 1.7% (a median 8.7% either way; single measurements)."""
    from experiments.rules import call_in_child
    out = Path(out)
    env = {k: v for k, v in environment().items() if k in ENV_KEYS}
    t_start = time.perf_counter()
    failed = 0
    if cfg.step_configs():
        failed += call_in_child(_step_child, cfg, str(out), env, progress, timeout_s=STEP_CHILD_TIMEOUT_S,
                                limit="experiments.components.STEP_CHILD_TIMEOUT_S")
    for kind, tcs, keys, fn in (("stage", cfg.stage_configs(), LOADER_KEYS, measure_stage),
                                ("loader", cfg.loader_configs(), LOADER_KEYS, measure_loader)):
        if tcs:
            failed += _probe(kind, tcs, keys, fn, out, cfg, env, progress)

    def rows(kind):
        f = out / f"{kind}_probe" / "rows.csv"
        return results.read_csv_rows(f) if f.is_file() else pd.DataFrame()
    return {"step": rows("step"), "stage": rows("stage"), "loader": rows("loader"), "failed": failed,
            "seconds": time.perf_counter() - t_start}


def main(cfg: ComponentConfig, preset: str, run_id: str | None = None, results_root: str | None = None) -> int:
    """``python -m experiments components``: the step and loader probes into
    ``results/components/<run_id>/`` (resumable with the same ``--run_id``)."""
    from experiments import sweep
    out = results.run_dir("components", run_id, results_root, resume=run_id is not None)
    res, code = sweep.run_interruptible(lambda: run(cfg, out), out)
    if code is not None:
        return code
    print(f"step probe: {len(res['step'])} rows, stage probe: {len(res['stage'])} rows, "
          f"loader probe: {len(res['loader'])} rows, "
          f"{res['seconds']:.0f} s → {out}")
    if res["failed"]:
        print(f"error: {res['failed']} shape(s) failed; their rows name the error", file=sys.stderr)
        return 1
    return 0
