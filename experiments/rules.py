"""The folklore, measured: for each popular rule of thumb about training input pipelines, the
smallest experiment that tests it on this machine. Raw rows only; the verdicts are analysis's
(``python -m analysis rules DIR`` writes ``rules.csv`` beside these rows and prints the table).

    python -m experiments rules [--preset smoke|quick|full] [--key=value ...]

What each part measures (``parts`` chooses them; each writes its own table in the run folder):

- ``workers`` (claim 1), ``prefetch`` (3), ``precision`` (4a), ``grad_accum`` (5), ``tiers`` (6):
  training runs of the real measured path (``experiments.train`` in a child process each, forked by
  the sweep's ``Runner``), each configuration ``repeats`` times, round-robin in a shuffled order
  (``sweep.schedule``), written through the resumable run loop (``runloop``) to ``rows.csv``. Every
  configuration differs from one baseline in one knob, so one run of the baseline serves every
  claim; ``claims`` lists the claims a row serves (all of them serve claim 9, the input-bound
  question). ``workers`` defaults to 0, 1, half the cores, the cores and the cores + 1.
- ``tiers``: the same pipeline reading from RAM (``source=ram``), from the page cache
  (``source=memmap``, the file read whole just before the run) and from cold storage
  (``source=memmap`` while a thread of this process calls ``posix_fadvise(POSIX_FADV_DONTNEED)`` on
  the file every ``drop_period_s``). Dropping has to go on during the run: the dataset's checksum
  check reads the whole file as the run starts, and the kernel never drops a page a process has
  mapped, so a page the loader already touched stays resident. ``page_cache_resident`` records the
  share of the file the page cache held during the run (``mincore``), which says how cold it was.
- ``probes`` (claim 6): the hierarchy probes of the tiers the claim quotes (``experiments.probes``:
  cold and warm file reads, RAM copy, device copy, host-to-device), in ``probe/rows.csv``.
- ``pinned`` (claim 2): ``probes.pinned_vs_pageable`` at one size, ``pinned_rounds`` times, in
  ``pinned.csv``. On CPU the device's memory is host RAM, so there is no bus for page-locked memory
  to speed up: one "not measured" row says so, and nothing is timed.
- ``memory`` (claims 4b and 5): XLA's memory analysis of the compiled step (compiled from shapes,
  ``experiments.memory``) for fp32 and bf16, and for gradient accumulation 1, 2, 4 at a fixed
  effective batch beside the micro-batch without accumulation; with memsim's footprint of each
  (device total), in ``memory.csv``. A platform with allocator statistics adds the measured peak of
  the training runs (``device_peak_bytes`` in ``rows.csv``).
- ``device_put`` (claim 8): in a fresh child process, host RSS before and after allocating a host
  array, after ``jax.device_put`` of it, after dropping the host array, after dropping the device
  array, and the device's ``bytes_in_use`` where the platform keeps it; ``device_put_repeats``
  times, in ``device_put.csv``.
- ``mmap`` (claim 7): in a child process limited with ``RLIMIT_DATA`` to what it holds once its
  loader started plus ``mmap_headroom_bytes``, the Grain loader reads one epoch of a memmap dataset
  ``mmap_multiple`` times larger than that whole limit (the child's holding is measured first in a
  child on a small dataset), and then the same file is loaded into RAM (``source=ram``'s loader),
  which the limit must refuse; in ``mmap.csv``. RLIMIT_DATA (Linux >= 4.7) counts private
  writable memory, which loading into RAM needs and a read-only file mapping does not; RLIMIT_AS
  would count the mapping itself and refuse it, and no cgroup can be created here without
  privileges. The machine's RAM is far larger than the dataset: the limit stands in for "RAM".

``study_dir`` (the ``study`` preset, run by ``experiments.study``): instead of training runs and
probes of its own, the run copies the study's sweep rows (tagged with the claims they serve: the
grid's controlled workers and prefetch comparisons, every row for claim 9) and its probe rows, and
measures only the cheap parts (``memory``, ``device_put``, ``mmap``: about 20 s on a 2-core CPU).

Faults: a part that fails is recorded in ``rules.json`` (``errors``) and the others still run; a
failed training run is a failed row. Ctrl-C keeps every finished row and table, and the command exits
non-zero with a summary of what failed (130 on an interrupt). Child processes die with this one
(PR_SET_PDEATHSIG) and a rerun with ``--run_id`` finishes what is missing.
"""

from __future__ import annotations

import dataclasses
import gc
import multiprocessing as mp
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Literal

import numpy as np
import pandas as pd

from experiments import configs, env as env_lib, results, runloop
from experiments.configs import ConfigError, check
from experiments.train import TrainConfig

MiB = 2**20
PARTS = ("workers", "prefetch", "precision", "grad_accum", "tiers", "probes", "pinned", "memory", "device_put",
         "mmap")
TRAINING_PARTS = ("workers", "prefetch", "precision", "grad_accum", "tiers")
TIERS = ("ram", "page_cache", "cold")
# the claim each training part serves (claim 9, the input-bound question, is served by every run)
PART_CLAIM = {"workers": "1", "prefetch": "3", "precision": "4a", "grad_accum": "5", "tiers": "6"}
# the files each part writes, for resuming and for analysis.rules
PART_FILES = {"probes": "probe/rows.csv", "pinned": "pinned.csv", "memory": "memory.csv",
              "device_put": "device_put.csv", "mmap": "mmap.csv"}
RULES_FILE = "rules.json"
# the probes claim 6 reads (the tiers it quotes)
TIER_PROBES = ("file_read_cold", "file_read_warm", "ram_copy", "device_copy", "h2d_pageable")


@dataclasses.dataclass(frozen=True)
class RulesConfig:
    # which parts run (see the module docstring)
    parts: tuple[str, ...] = PARTS
    # the baseline training run; every other configuration changes one knob of it
    model: Literal["mlp", "cnn"] = "mlp"
    width: int = 512
    depth: int = 2
    image_size: int = 32
    batch_size: int = 64
    num_samples: int = 16384   # the tiers' dataset: 50 MB at 32 px, more samples than a run reads
    augment_cost: int = 2
    num_workers: int = 0
    prefetch_buffer_size: int = 2
    feed: Literal["none", "double_buffer", "grain_device_put"] = "double_buffer"
    device_buffer_size: int = 2
    # the levels each claim varies (workers: () = 0, 1, cores // 2, cores, cores + 1)
    workers: tuple[int, ...] = ()
    prefetch: tuple[int, ...] = (0, 1, 2, 4)
    grad_accum: tuple[int, ...] = (1, 2, 4)
    tiers: tuple[str, ...] = TIERS
    drop_period_s: float = 0.02
    # measuring windows and repeats of the training runs
    min_steps: int = 20
    min_measure_s: float = 1.0
    warmup_steps: int = 3
    max_warmup_s: float = 1.0
    repeats: int = 2
    order_seed: int = 0
    config_timeout_s: float = 300.0
    # probes, pinned memory, device_put, mmap
    probe_max_bytes: int = 64 * MiB
    probe_repeats: int = 5
    pinned_bytes: int = 64 * MiB
    pinned_rounds: int = 5
    device_put_bytes: int = 128 * MiB
    device_put_repeats: int = 5
    mmap_headroom_bytes: int = 32 * MiB
    mmap_multiple: float = 1.0
    mmap_image_size: int = 128
    child_timeout_s: float = 300.0
    # a study folder whose sweep and probe rows stand in for the training runs and probes
    study_dir: str = ""
    seed: int = 0
    cache_dir: str = TrainConfig.cache_dir

    def __post_init__(self):
        unknown = [p for p in self.parts if p not in PARTS]
        check(not unknown and len(self.parts) > 0, "parts", ",".join(self.parts),
              f"unknown part(s) {unknown}; choose from {', '.join(PARTS)}")
        check(all(w >= 0 for w in self.workers), "workers", self.workers, "worker counts must be >= 0")
        check(len(self.prefetch) > 0 and all(p >= 0 for p in self.prefetch), "prefetch", self.prefetch,
              "give prefetch depths >= 0")
        check(len(self.grad_accum) > 0 and all(g >= 1 and self.batch_size % g == 0 for g in self.grad_accum),
              "grad_accum", self.grad_accum, f"every level must be >= 1 and divide batch_size ({self.batch_size})")
        check(1 in self.grad_accum, "grad_accum", self.grad_accum, "include 1 (the run without accumulation)")
        bad = [t for t in self.tiers if t not in TIERS]
        check(not bad and len(self.tiers) > 0, "tiers", ",".join(self.tiers),
              f"unknown tier(s) {bad}; choose from {', '.join(TIERS)}")
        check(self.drop_period_s > 0, "drop_period_s", self.drop_period_s, "must be a positive number of seconds")
        check(self.repeats >= 1, "repeats", self.repeats, "must be >= 1")
        check(self.config_timeout_s > 0, "config_timeout_s", self.config_timeout_s, "must be positive")
        check(self.child_timeout_s > 0, "child_timeout_s", self.child_timeout_s, "must be positive")
        for k in ("probe_max_bytes", "pinned_bytes", "mmap_headroom_bytes"):
            check(getattr(self, k) >= 4096, k, getattr(self, k), "must be at least 4096 bytes")
        check(self.device_put_bytes >= 64 * MiB, "device_put_bytes", self.device_put_bytes,
              "must be >= 64 MiB (67108864): glibc serves smaller arrays from its heap and keeps them after "
              "they are freed, so RSS would not show a copy being dropped")
        check(self.probe_repeats >= 2, "probe_repeats", self.probe_repeats, "must be >= 2 (an interval)")
        check(self.pinned_rounds >= 1, "pinned_rounds", self.pinned_rounds, "must be >= 1")
        check(self.device_put_repeats >= 1, "device_put_repeats", self.device_put_repeats, "must be >= 1")
        check(self.mmap_multiple >= 1.0, "mmap_multiple", self.mmap_multiple,
              "must be >= 1: the dataset must be at least as large as the memory the run may hold")
        check(self.study_dir == "" or (Path(self.study_dir) / "rows.csv").exists(), "study_dir", self.study_dir,
              "has no rows.csv; pass a folder a study wrote (e.g. results/cpu-2core/study) or leave it empty")
        self.base()  # the baseline and every level must be valid before any work
        for it in self.items(cores=2):
            it.train_config

    def base(self) -> TrainConfig:
        try:
            return TrainConfig(model=self.model, width=self.width, depth=self.depth, image_size=self.image_size,
                               batch_size=self.batch_size, num_samples=self.num_samples, source="ram",
                               augment_cost=self.augment_cost, num_workers=self.num_workers,
                               prefetch_buffer_size=self.prefetch_buffer_size, feed=self.feed,
                               device_buffer_size=self.device_buffer_size, min_steps=self.min_steps,
                               min_measure_s=self.min_measure_s, warmup_steps=self.warmup_steps,
                               max_warmup_s=self.max_warmup_s, seed=self.seed, grain_stats=False,
                               cache_dir=self.cache_dir)
        except ConfigError as e:
            raise ConfigError(f"the baseline run is impossible: {e}") from None

    def worker_levels(self, cores: int) -> tuple[int, ...]:
        """The worker counts claim 1 measures: ``workers``, or 0, 1, cores // 2, cores, cores + 1.

        >>> RulesConfig().worker_levels(2), RulesConfig().worker_levels(16)
        ((0, 1, 2, 3), (0, 1, 8, 16, 17))
        """
        return tuple(self.workers) if self.workers else tuple(sorted({0, 1, cores // 2, cores, cores + 1}))

    def items(self, cores: int | None = None) -> list["Item"]:
        """The distinct training runs of the chosen parts (none with ``study_dir``), each with the
        claims it serves, baseline first."""
        if self.study_dir:
            return []
        cores = cores if cores is not None else len(os.sched_getaffinity(0))
        base = self.base()
        out: dict[tuple, Item] = {}

        def add(part: str, tier: str = "ram", **change):
            tc = dataclasses.replace(base, **change) if change else base
            key = (tuple(sorted(configs.to_flat_dict(tc).items())), tier)
            it = out.setdefault(key, Item(tc, tier, set()))
            it.claims.add(PART_CLAIM[part])

        levels = {"workers": ("num_workers", self.worker_levels(cores)), "prefetch": ("prefetch_buffer_size", self.prefetch),
                  "precision": ("precision", ("fp32", "bf16")), "grad_accum": ("grad_accum_steps", self.grad_accum)}
        for part, (knob, vals) in levels.items():
            if part in self.parts:
                for v in vals:
                    add(part, **{knob: v})
        if "tiers" in self.parts:
            for tier in self.tiers:
                add("tiers", tier, **({} if tier == "ram" else {"source": "memmap"}))
        return list(out.values())


@dataclasses.dataclass
class Item:
    """One training configuration of the run: its config, where its data lies, the claims it serves."""

    tc: TrainConfig
    tier: str
    claims: set

    @property
    def train_config(self) -> TrainConfig:
        return self.tc

    @property
    def config_id(self) -> str:
        flat = configs.to_flat_dict(self.tc)
        return results.config_id(flat if self.tier == "ram" else {**flat, "page_cache": self.tier})


def smoke() -> RulesConfig:
    """Seconds: the cheap parts only, tiny sizes (the tests run pieces of it)."""
    return RulesConfig(parts=("memory", "device_put", "mmap"), width=32, depth=1, image_size=16, batch_size=16,
                       num_samples=256, device_put_bytes=64 * MiB, device_put_repeats=2, mmap_headroom_bytes=4 * MiB,
                       pinned_bytes=MiB, pinned_rounds=2, probe_max_bytes=MiB, probe_repeats=2,
                       min_steps=4, min_measure_s=0.0, warmup_steps=1, max_warmup_s=0.2, repeats=1)


def quick() -> RulesConfig:
    """Every claim on this machine in under 5 minutes on a 2-core CPU: 12 training configurations
    × 2 repeats (1 s windows), the tier probes up to 64 MiB, the cheap parts."""
    return RulesConfig()


def full() -> RulesConfig:
    """Five repeats (a 94% interval of each median), 2 s windows, larger transfers and probes."""
    return RulesConfig(repeats=5, min_steps=40, min_measure_s=2.0, max_warmup_s=3.0, probe_max_bytes=256 * MiB,
                       probe_repeats=7, pinned_bytes=256 * MiB, pinned_rounds=7, device_put_bytes=512 * MiB,
                       device_put_repeats=7, mmap_headroom_bytes=128 * MiB)


def study(study_dir: str = "") -> RulesConfig:
    """What ``experiments.study`` runs in its folder (``study_dir``): the study's own sweep and probe
    rows stand in for training runs and probes; only the cheap parts are measured (about 20 s)."""
    return RulesConfig(parts=("workers", "prefetch", "probes", "pinned", "memory", "device_put", "mmap"),
                       study_dir=study_dir, device_put_repeats=3, pinned_rounds=3)


PRESETS: dict[str, Callable[[], RulesConfig]] = {"smoke": smoke, "quick": quick, "full": full}


# ------------------------------------------------------------------------------ the page cache

def drop_page_cache(path: Path) -> None:
    """Asks the kernel to drop the clean, unmapped pages of ``path`` from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_whole(path: Path) -> None:
    """Reads ``path`` once, so that the page cache holds it."""
    with open(path, "rb") as f:
        while f.read(16 * MiB):
            pass


class CacheDropper:
    """A thread that drops ``path`` from the page cache every ``period_s`` while a run reads it, and
    samples the resident share of the file (``mincore``) each time."""

    def __init__(self, path: Path, period_s: float):
        self.path, self.period_s = Path(path), period_s
        self.resident: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memsim-cache-dropper", daemon=True)

    def _loop(self):
        from experiments.probes import resident_fraction
        fd = os.open(self.path, os.O_RDONLY)
        size = os.fstat(fd).st_size
        try:
            while True:
                self.resident.append(resident_fraction(fd, size))
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                if self._stop.wait(self.period_s):
                    break
        finally:
            os.close(fd)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)
        return False


def resident_share(path: Path) -> float:
    """The share of ``path`` in the page cache now (NaN where mincore fails)."""
    from experiments.probes import resident_fraction
    fd = os.open(path, os.O_RDONLY)
    try:
        return resident_fraction(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------- training runs

def run_training(cfg: RulesConfig, out_dir: Path, progress: bool = True, runner=None) -> pd.DataFrame:
    """The training runs of the chosen parts, resumable (``runloop.run_jobs``); returns every row.

    ``runner`` (default: a ``sweep.Runner``) runs one ``TrainConfig`` in a child:
    ``runner.run(tc, timeout_s) -> {'row', 'steps', ...} | {'error'}``.
    """
    from experiments import sweep
    from experiments.loader import dataset_path
    its = cfg.items()
    if not its:
        return results.read_csv_rows(out_dir / "rows.csv") if (out_dir / "rows.csv").exists() else pd.DataFrame()
    environment = env_lib.environment()
    header = {"experiment": "rules", "config": configs.to_flat_dict(cfg), "environment": environment}
    jobs = [runloop.Job(its[i].config_id, rep, f"r{rep} claims {','.join(sorted(its[i].claims))} {its[i].tier}", i)
            for i, rep in sweep.schedule(len(its), cfg.repeats, cfg.order_seed)]

    def head(job: runloop.Job) -> dict:
        it = its[job.payload]
        return {"config_id": job.config_id, "repeat": job.repeat, "claims": ";".join(sorted({*it.claims, "9"})),
                "tier": it.tier}

    def failed_row(job: runloop.Job, error: str, wall_s: float) -> dict:
        return {**head(job), **configs.to_flat_dict(its[job.payload].tc), **environment, "status": "failed",
                "error": error, "wall_s": wall_s}

    def work(job: runloop.Job) -> runloop.Outcome:
        it = its[job.payload]
        t0 = time.perf_counter()
        extra = {}
        if it.tier == "ram":
            out = runner.run(it.tc, cfg.config_timeout_s)
        else:
            path = dataset_path(it.tc.loader_config())
            if it.tier == "page_cache":
                read_whole(path)
                out = runner.run(it.tc, cfg.config_timeout_s)
                extra["page_cache_resident"] = resident_share(path)
            else:
                drop_page_cache(path)
                with CacheDropper(path, cfg.drop_period_s) as dropper:
                    out = runner.run(it.tc, cfg.config_timeout_s)
                res = [r for r in dropper.resident if r == r]
                extra["page_cache_resident"] = float(np.median(res)) if res else float("nan")
        if "row" not in out:
            return runloop.Outcome(failed_row(job, out["error"], time.perf_counter() - t0))
        return runloop.Outcome({**head(job), **out["row"], **extra}, {"steps": out.get("steps")})

    own = runner is None
    runner = sweep.Runner() if own else runner
    try:
        return runloop.run_jobs(out_dir, jobs, work, failed_row, header=header, desc="rules", unit="run",
                                progress=progress)
    finally:
        if own:
            runner.close()


def study_rows(study_dir: Path) -> pd.DataFrame:
    """A study's sweep rows tagged with the claims they serve: claim 1 the grid's controlled
    comparison of worker counts (the loader setting with most worker levels), claim 3 that of
    prefetch depths, claim 9 every row. Rows serving only claim 9 keep ``claims`` = "9"."""
    runs = results.current(results.read_csv_rows(Path(study_dir) / "rows.csv"))
    runs = runs.copy()
    tags = pd.Series([{"9"} for _ in range(len(runs))], index=runs.index)
    grid = runs[runs["design"] == "grid"] if "design" in runs else runs
    for claim, knob, others in (("1", "num_workers", ("prefetch_buffer_size", "feed")),
                                ("3", "prefetch_buffer_size", ("num_workers", "feed"))):
        best = None
        for key, g in grid.groupby(list(others)):
            n = g[knob].nunique()
            # most levels; then a double-buffered feed, then the fewest workers / deepest prefetch
            rank = (n, key[1] == "double_buffer", -key[0] if knob == "prefetch_buffer_size" else key[0])
            if n > 1 and (best is None or rank > best[0]):
                best = (rank, g.index)
        if best is not None:
            for i in best[1]:
                tags[i] = tags[i] | {claim}
    runs["claims"] = [";".join(sorted(t)) for t in tags]
    runs["tier"] = ""
    return runs


def copy_study(cfg: RulesConfig, out_dir: Path) -> pd.DataFrame:
    """``study_dir``'s sweep rows (tagged, ``study_rows``) into ``rows.csv`` and its probe rows into
    ``probe/``; a resumed run that has them keeps them."""
    src = Path(cfg.study_dir)
    if not (out_dir / "rows.csv").exists():
        writer = results.RowWriter(out_dir)
        for rec in study_rows(src).drop(columns=["run_dir"], errors="ignore").to_dict("records"):
            writer.append({k: (None if v is pd.NA else v) for k, v in rec.items()})
    if "probes" in cfg.parts and (src / "probe" / "rows.csv").exists() and not (out_dir / "probe" / "rows.csv").exists():
        (out_dir / "probe").mkdir(exist_ok=True)
        for name in ("rows.csv", "rows.columns.json", "config.json"):
            if (src / "probe" / name).exists():
                shutil.copy2(src / "probe" / name, out_dir / "probe" / name)
    return results.read_csv_rows(out_dir / "rows.csv")


# ------------------------------------------------------------------------------- the other parts

def run_probes(cfg: RulesConfig, out_dir: Path) -> None:
    from experiments import probes
    d = out_dir / "probe"
    pcfg = probes.ProbeConfig(probes=TIER_PROBES, max_bytes=cfg.probe_max_bytes, repeats=cfg.probe_repeats,
                              warmup=1, seed=cfg.seed)
    d.mkdir(parents=True, exist_ok=True)
    probes.write_config(d, pcfg, "rules")
    probes.run(pcfg, out_dir=d)


def run_pinned(cfg: RulesConfig, out_dir: Path) -> None:
    import jax
    from experiments import probes
    dev = jax.devices()[0]
    writer = results.RowWriter(out_dir, "pinned")
    if dev.platform == "cpu":
        writer.append({"round": -1, "size_bytes": cfg.pinned_bytes, "platform": dev.platform,
                       "device_kind": dev.device_kind, "status": "not measured",
                       "note": "platform cpu: the device's memory is host RAM, so there is no host-to-device bus "
                               "for page-locked memory to speed up"})
        return
    for r in range(cfg.pinned_rounds):
        for rec in probes.pinned_vs_pageable([cfg.pinned_bytes], repeats=3, warmup=1, device=dev).to_dict("records"):
            writer.append({"round": r, **rec})


def memory_configs(cfg: RulesConfig) -> list[tuple[str, TrainConfig]]:
    """(what, config) for the memory part: fp32 and bf16 at the baseline; accumulation over G
    micro-batches at the baseline batch, and the micro-batch (batch / G) without accumulation."""
    base = dataclasses.replace(cfg.base(), grad_accum_steps=1, precision="fp32")
    out = [("precision", base), ("precision", dataclasses.replace(base, precision="bf16"))]
    for g in sorted(set(cfg.grad_accum)):
        out.append(("grad_accum", dataclasses.replace(base, grad_accum_steps=g)))
        if g > 1:
            out.append(("micro_batch", dataclasses.replace(base, batch_size=base.batch_size // g,
                                                           num_samples=base.num_samples)))
    return out


def run_memory(cfg: RulesConfig, out_dir: Path) -> None:
    from experiments import memory
    from memsim import footprint as fp
    writer = results.RowWriter(out_dir, "memory")
    for what, tc in memory_configs(cfg):
        xla = memory.compiled_memory(tc)
        params, rest = memory.step_sizes(tc)
        writer.append({"what": what, "model": tc.model, "precision": tc.precision, "batch_size": tc.batch_size,
                       "grad_accum_steps": tc.grad_accum_steps,
                       "micro_batch_size": tc.batch_size // tc.grad_accum_steps, "param_bytes": params,
                       "xla_step_bytes": xla.step_bytes, "xla_temp_bytes": xla.temp_bytes,
                       "xla_argument_bytes": xla.argument_bytes,
                       "footprint_device_bytes": fp.totals(memory.footprint(tc, "xla", xla))["device"],
                       **env_lib.environment()})


def _rss() -> int:
    import psutil
    return int(psutil.Process().memory_info().rss)


def device_put_child(nbytes: int, repeats: int) -> list[dict]:
    """In a fresh process: host RSS and device bytes around ``jax.device_put`` (claim 8)."""
    import jax
    from experiments import compat
    dev = jax.devices()[0]

    def dev_bytes() -> float:
        stats = compat.memory_stats(dev)
        return float(stats["bytes_in_use"]) if stats and "bytes_in_use" in stats else float("nan")

    jax.device_put(np.ones(4096, np.uint8), dev).block_until_ready()  # the backend and its allocator start
    rows = []
    for r in range(repeats):
        gc.collect()
        rss0, dev0 = _rss(), dev_bytes()
        host = np.ones(nbytes, np.uint8)  # every page written: resident
        rss_host = _rss()
        x = jax.device_put(host, dev).block_until_ready()
        rss_put, dev_put = _rss(), dev_bytes()
        aliased = bool(dev.platform == "cpu" and x.unsafe_buffer_pointer() == host.ctypes.data)
        del host
        gc.collect()
        rss_host_dropped, dev_host_dropped = _rss(), dev_bytes()
        del x
        gc.collect()
        rss_end, dev_end = _rss(), dev_bytes()
        rows.append({"repeat": r, "nbytes": nbytes, "rss_before": rss0, "rss_host_array": rss_host,
                     "rss_after_device_put": rss_put, "rss_host_dropped": rss_host_dropped, "rss_end": rss_end,
                     "device_bytes_before": dev0, "device_bytes_after_device_put": dev_put,
                     "device_bytes_host_dropped": dev_host_dropped, "device_bytes_end": dev_end,
                     "aliased": aliased, "platform": dev.platform, "device_kind": dev.device_kind})
    return rows


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return -1


def _reading(loader_cfg):
    """The claim-7 loader, started (its threads and the file's mapping exist), and VmData then."""
    from experiments.loader import build_dataset
    it = iter(build_dataset(loader_cfg, stage_timing=False))
    next(it)
    gc.collect()
    return it, _status("VmData")


def vm_data_child(loader_cfg) -> int:
    """VmData of a process that has started the claim-7 loader (on a small dataset): what a run holds
    before the limit, so that the dataset can be made larger than the limit."""
    return _reading(loader_cfg)[1]


def mmap_child(loader_cfg, headroom: int) -> dict:
    """In a fresh process: under RLIMIT_DATA = what it holds + ``headroom``, one epoch of the
    memmap dataset through the Grain loader, then an attempt to load the file into RAM (claim 7)."""
    import resource
    from experiments import data as data_lib
    it, base = _reading(loader_cfg)
    limit = base + headroom
    resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.getrlimit(resource.RLIMIT_DATA)[1]))
    anon0 = _status("RssAnon")
    n, t0, error = loader_cfg.batch_size, time.perf_counter(), ""
    try:
        while n < loader_cfg.num_samples:
            n += len(next(it)["label"])
    except MemoryError as e:
        error = f"MemoryError: {e}"
    read_s = time.perf_counter() - t0
    anon_read, file_read = _status("RssAnon"), _status("RssFile")
    try:
        path = data_lib.ensure_images(loader_cfg.image_spec, "memmap", loader_cfg.cache_dir, verify=False)
        held = data_lib.RamImages.from_memmap(path)
        ram_load = f"loaded ({held.images.nbytes} bytes)"
        del held
    except MemoryError as e:
        ram_load = f"MemoryError: {e}"
    return {"limit_kind": "RLIMIT_DATA", "vm_data_before": base, "limit_bytes": limit, "headroom_bytes": headroom,
            "samples_read": n, "num_samples": loader_cfg.num_samples, "read_s": read_s, "read_error": error,
            "rss_anon_before": anon0, "rss_anon_after": anon_read, "rss_file_after": file_read,
            "ram_load": ram_load}


def _child_main(fn, args, conn) -> None:
    from experiments.loader import die_with_parent
    die_with_parent()
    try:
        conn.send({"result": fn(*args)})
    except BaseException as e:  # noqa: BLE001 — sent to the parent to be raised there
        conn.send({"error": f"{type(e).__name__}: {e}"})
    finally:
        conn.close()


def call_in_child(fn: Callable, *args, timeout_s: float = 300.0, limit: str = "child_timeout_s"):
    """``fn(*args)`` in a fresh (spawned) process that dies with this one; its result, or
    RuntimeError with the child's error; killed after ``timeout_s`` (TimeoutError, naming ``limit``,
    the setting that gave it)."""
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_main, args=(fn, args, send), name="memsim-rules-child")
    proc.start()
    send.close()
    try:
        if not recv.poll(timeout_s):
            raise TimeoutError(f"{fn.__name__} gave no answer in {timeout_s:.0f} s ({limit})")
        res = recv.recv()
    except EOFError:
        proc.join(timeout=10)
        raise RuntimeError(f"{fn.__name__}: the child process died (exit code {proc.exitcode})") from None
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
            proc.join()
    if "error" in res:
        raise RuntimeError(f"{fn.__name__} failed in its child process: {res['error']}")
    return res["result"]


def run_device_put(cfg: RulesConfig, out_dir: Path) -> None:
    rows = call_in_child(device_put_child, cfg.device_put_bytes, cfg.device_put_repeats,
                         timeout_s=cfg.child_timeout_s)
    writer = results.RowWriter(out_dir, "device_put")
    for row in rows:
        writer.append(row)


def mmap_loader_config(cfg: RulesConfig, file_bytes: float):
    """The claim-7 loader over a memmap dataset of ``mmap_image_size`` pixels and at least
    ``file_bytes`` bytes, read without worker processes or prefetch threads (one process, one mapping)."""
    from experiments.loader import LoaderConfig
    sample = 8 + cfg.mmap_image_size ** 2 * 3
    return LoaderConfig(source="memmap", num_samples=max(64, int(np.ceil(file_bytes / sample))),
                        image_size=cfg.mmap_image_size, batch_size=16, num_workers=0, prefetch_buffer_size=0,
                        read_buffer_size=0, seed=cfg.seed, cache_dir=cfg.cache_dir)


def run_mmap(cfg: RulesConfig, out_dir: Path) -> None:
    """Claim 7: the data limit is what the run holds once its loader started plus the headroom; the
    dataset is made ``mmap_multiple`` times that whole limit (measured first in a child on a small
    dataset), so that neither the headroom nor the whole limit could hold it."""
    from experiments.loader import dataset_path
    small = mmap_loader_config(cfg, 0)
    dataset_path(small)
    held = call_in_child(vm_data_child, small, timeout_s=cfg.child_timeout_s)
    lc = mmap_loader_config(cfg, cfg.mmap_multiple * (held + cfg.mmap_headroom_bytes) + 16 * MiB)
    path = dataset_path(lc)  # written here, outside the limit
    row = call_in_child(mmap_child, lc, cfg.mmap_headroom_bytes, timeout_s=cfg.child_timeout_s)
    results.RowWriter(out_dir, "mmap").append({**row, "file_bytes": os.path.getsize(path),
                                               "image_size": lc.image_size, **env_lib.environment()})


STAGES: dict[str, Callable[[RulesConfig, Path], None]] = {
    "probes": run_probes, "pinned": run_pinned, "memory": run_memory, "device_put": run_device_put, "mmap": run_mmap}


# ------------------------------------------------------------------------------------- running

def run(cfg: RulesConfig, out_dir: Path, progress: bool = True) -> dict:
    """Runs every part of ``cfg`` not yet in ``out_dir``; returns ``rules.json``'s record (preset-free):
    seconds per part and the error of each part that failed. Training rows are in ``rows.csv``; a
    KeyboardInterrupt is re-raised after ``rules.json`` is written."""
    out_dir = Path(out_dir)
    meta_path = out_dir / RULES_FILE
    import json
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    meta.update({"parts": list(cfg.parts), "study_dir": cfg.study_dir, "environment": env_lib.environment(),
                 "cpu_count": len(os.sched_getaffinity(0)), "worker_levels": list(cfg.worker_levels(
                     len(os.sched_getaffinity(0)))), "baseline": configs.to_flat_dict(cfg.base())})
    errors = {k: v for k, v in meta.get("errors", {}).items() if k in cfg.parts}
    stage_s = dict(meta.get("stage_s", {}))
    try:
        t = time.perf_counter()
        if cfg.study_dir:
            copy_study(cfg, out_dir)
        elif any(p in cfg.parts for p in TRAINING_PARTS):
            run_training(cfg, out_dir, progress=progress)
        stage_s["training"] = time.perf_counter() - t
        for name, fn in STAGES.items():
            if name not in cfg.parts or (cfg.study_dir and name == "probes"):
                continue
            if (out_dir / PART_FILES[name]).exists():
                print(f"{name}: rows already in {out_dir / PART_FILES[name]}, kept", file=sys.stderr, flush=True)
                continue
            print(f"{name} …", file=sys.stderr, flush=True)
            t = time.perf_counter()
            try:
                fn(cfg, out_dir)
                errors.pop(name, None)
            except Exception as e:  # noqa: BLE001 — recorded; the other parts still run
                errors[name] = f"{type(e).__name__}: {e}"
                print(f"warning: {name} failed: {errors[name]}", file=sys.stderr, flush=True)
            stage_s[name] = time.perf_counter() - t
    finally:
        meta.update({"stage_s": stage_s, "errors": errors})
        results.write_json_atomic(meta_path, meta, sort_keys=False)
    return meta


def failures(out_dir: Path, meta: dict) -> list[str]:
    """One line per failed part and per failed training run (configuration, repeat, error)."""
    lines = [f"part {k}: {v}" for k, v in meta.get("errors", {}).items()]
    if (out_dir / "rows.csv").exists():
        cur = results.current(results.read_csv_rows(out_dir / "rows.csv"))
        bad = cur[cur["status"] != "ok"] if "status" in cur else cur.iloc[:0]
        for _, r in bad.iterrows():
            lines.append(f"run claims={r.get('claims', '')} tier={r.get('tier', '')} num_workers={r.get('num_workers')} "
                         f"prefetch_buffer_size={r.get('prefetch_buffer_size')} precision={r.get('precision')} "
                         f"grad_accum_steps={r.get('grad_accum_steps')} repeat {r.get('repeat')}: {r.get('error')}")
    return lines


def main(cfg: RulesConfig, preset: str, run_id: str | None = None, results_root: str | None = None) -> int:
    from experiments import sweep, train
    train.check_runtime(cfg.base())
    out = results.run_dir("rules", run_id, results_root, resume=run_id is not None)
    n = len(cfg.items())
    print(f"rules: parts {', '.join(cfg.parts)}; {n} training configurations × {cfg.repeats} repeats → {out}",
          flush=True)
    t0 = time.perf_counter()
    meta: dict = {}
    with sweep.interruptible() as sig:
        try:
            meta = run(cfg, out)
        except KeyboardInterrupt:
            sig.caught = sig.caught or signal.SIGINT
    import json
    meta = json.loads((out / RULES_FILE).read_text()) if (out / RULES_FILE).exists() else meta
    meta["preset"] = preset
    results.write_json_atomic(out / RULES_FILE, meta, sort_keys=False)
    failed = failures(out, meta)
    if sig.caught:
        print(f"\ninterrupted ({signal.Signals(sig.caught).name}): finished rows kept in {out}; rerun with "
              f"--run_id={out.name} to finish the rest", file=sys.stderr)
        for line in failed:
            print(f"  failed: {line}", file=sys.stderr)
        return sig.exit_code
    print(f"rules: measured in {time.perf_counter() - t0:.0f} s ("
          + ", ".join(f"{k} {v:.0f} s" for k, v in meta.get("stage_s", {}).items()) + f") → {out}")
    print(f"the verdicts: python -m analysis rules {out}")
    if failed:
        print(f"error: {len(failed)} part(s) or run(s) failed:\n" + "\n".join(f"  {x}" for x in failed[:8])
              + (f"\n  … and {len(failed) - 8} more" if len(failed) > 8 else "")
              + f"\nrerun with --run_id={out.name} to run the missing parts again", file=sys.stderr)
        return 1
    return 0
