"""The Grain input pipeline: source → seeded shuffle → per-sample transform → batch → workers → prefetch.

Each transform stamps the seconds it spent into the element (``t_decode``, ``t_augment``: wall
time), and the source read and each transform also the CPU seconds of the thread that ran them
(``c_read``, ``c_decode``, ``c_augment``: ``time.thread_time``, which does not advance while the
thread waits for a core, so it is the stage's cost without contention even inside worker processes
that share the host's cores with the step); after batching these are per-batch sums, so per-stage
times measured inside worker processes reach the main process exactly. Grain's own execution
statistics (STAGE_TIMING) are collected beside them where Grain can report them.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import time
from pathlib import Path
from typing import Literal

import numpy as np

from experiments import data as data_lib
from experiments.configs import check
from memsim.knobs import Source

STAGE_KEYS = ("t_decode", "t_augment", "c_read", "c_decode", "c_augment")
# When each sample's last stage finished (``time.perf_counter``: CLOCK_MONOTONIC on Linux, one clock
# for every process of the host, so a worker's stamp is comparable with the main process's time). A
# batch's is the latest of its samples'; the main process reads from it how long the batch waited in
# the loader's and the feed's buffers (``experiments.train``: ``batch_age_s``), which tells whether
# those buffers are still filling.
MADE_KEY = "made_at"
STAMP_KEYS = STAGE_KEYS + (MADE_KEY,)


def _ensure_absl_flags() -> None:
    # Grain's workers read absl flags; a plain script never parsed them.
    from absl import flags
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    workload: Literal["image", "text"] = "image"
    source: Source = "ram"
    seq_len: int = 128
    num_samples: int = 2048
    image_size: int = 32
    channels: int = 3
    num_classes: int = 10
    batch_size: int = 64
    num_workers: int = 0
    per_worker_buffer_size: int = 2
    read_threads: int = 1
    read_buffer_size: int = 2
    prefetch_buffer_size: int = 2
    augment_cost: int = 0
    crop_padding: int = 4
    seed: int = 0
    cache_dir: str = str(data_lib.DEFAULT_CACHE)
    # data-parallel processes: this loader reads samples shard_index, shard_index + shard_count, ...
    # of the source (before the shuffle), so the processes together see each sample once per epoch
    shard_index: int = 0
    shard_count: int = 1

    def __post_init__(self):
        check(self.source in data_lib.SOURCES, "source", self.source, f"expected one of {data_lib.SOURCES}")
        check(self.batch_size > 0, "batch_size", self.batch_size, "must be positive")
        check(self.num_workers >= 0, "num_workers", self.num_workers, "must be >= 0 (0 = no worker processes)")
        check(self.num_workers <= 64, "num_workers", self.num_workers, "must be <= 64")
        check(self.per_worker_buffer_size > 0, "per_worker_buffer_size", self.per_worker_buffer_size, "must be positive")
        check(1 <= self.read_threads <= 64, "read_threads", self.read_threads, "must be in 1..64")
        check(self.read_buffer_size >= 0, "read_buffer_size", self.read_buffer_size,
              "must be >= 0 (batches read ahead by a background thread; 0: none, each batch is made on demand)")
        check(self.prefetch_buffer_size >= 0, "prefetch_buffer_size", self.prefetch_buffer_size, "must be >= 0")
        check(self.augment_cost >= 0, "augment_cost", self.augment_cost, "must be >= 0 (extra blur passes per sample)")
        check(self.shard_count >= 1, "shard_count", self.shard_count, "must be >= 1")
        check(0 <= self.shard_index < self.shard_count, "shard_index", self.shard_index,
              f"must be in 0..{self.shard_count - 1} (shard_count={self.shard_count})")
        check(self.workload in ("image", "text"), "workload", self.workload, "expected 'image' or 'text'")
        if self.workload == "image":
            check(self.image_size > self.crop_padding, "image_size", self.image_size,
                  f"must be larger than the crop padding ({self.crop_padding} pixels)")
        check(0 <= self.crop_padding < max(self.image_size, 1), "crop_padding", self.crop_padding,
              "must be in [0, image_size)")
        if self.workload == "text":
            check(self.source == "ram", "source", self.source, "the text workload is held in RAM: use source=ram")
            check(self.seq_len > 1, "seq_len", self.seq_len, "must be > 1")
            return
        check(self.num_samples // self.shard_count >= self.batch_size, "num_samples", self.num_samples,
              f"must be at least batch_size ({self.batch_size}) per shard (shard_count={self.shard_count})")
        data_lib.ImageSpec(self.num_samples, self.image_size, self.channels, self.num_classes)

    @property
    def image_spec(self) -> data_lib.ImageSpec:
        return data_lib.ImageSpec(self.num_samples, self.image_size, self.channels, self.num_classes, seed=0)


class TimedSource:
    """A random-access image source whose elements carry the CPU seconds of their read (``c_read``)."""

    def __init__(self, src):
        self.src = src

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i):
        c0 = time.thread_time()
        x = dict(self.src[i])
        x["c_read"] = np.float64(time.thread_time() - c0)
        return x

    def __repr__(self) -> str:
        return f"TimedSource({self.src!r})"


class Decode:
    """ArrayRecord blob → uint8 image and label (zlib + CRC check)."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, x: dict) -> dict:
        t0, c0 = time.perf_counter(), time.thread_time()
        out = data_lib.decode_record(x["blob"], where=f"{self.path}: record {int(x['index'])}")
        out["t_decode"] = np.float64(time.perf_counter() - t0)
        out["c_decode"] = np.float64(time.thread_time() - c0)
        out["c_read"] = x.get("c_read", np.float64(0.0))
        return out


class Augment:
    """Normalise to float32, random crop (zero padding) and horizontal flip, plus ``cost`` blur passes.

    ``cost`` emulates heavy augmentation with real CPU work: each pass is a 3×3 box blur of the image.
    """

    MEAN, STD = 0.5, 0.25

    def __init__(self, padding: int, cost: int):
        self.padding, self.cost = padding, cost

    def __call__(self, x: dict, rng: np.random.Generator) -> dict:
        t0, c0 = time.perf_counter(), time.thread_time()
        img = x["image"].astype(np.float32) * (1.0 / 255.0)
        img = (img - self.MEAN) * (1.0 / self.STD)
        h, w, _ = img.shape
        p = self.padding
        if p:
            padded = np.pad(img, ((p, p), (p, p), (0, 0)))
            dy, dx = rng.integers(0, 2 * p + 1, size=2)
            img = padded[dy:dy + h, dx:dx + w]
        if rng.random() < 0.5:
            img = img[:, ::-1]
        img = np.ascontiguousarray(img)
        for _ in range(self.cost):
            q = np.pad(img, ((1, 1), (1, 1), (0, 0)), mode="edge")
            img = (q[:-2, :-2] + q[:-2, 1:-1] + q[:-2, 2:] + q[1:-1, :-2] + q[1:-1, 1:-1]
                   + q[1:-1, 2:] + q[2:, :-2] + q[2:, 1:-1] + q[2:, 2:]) * np.float32(1 / 9)
        t1 = time.perf_counter()
        out = {"image": img, "label": x["label"], "t_augment": np.float64(t1 - t0),
               "c_augment": np.float64(time.thread_time() - c0), MADE_KEY: np.float64(t1)}
        for k in ("t_decode", "c_read", "c_decode"):
            out[k] = x.get(k, np.float64(0.0))
        return out


class TextSample:
    """Text windows need no decoding; stamps the (tiny) host time so every workload has stage times."""

    def __call__(self, x: dict) -> dict:
        return {**x, **{k: np.float64(0.0) for k in STAGE_KEYS}, MADE_KEY: np.float64(time.perf_counter())}


def build_source(cfg: LoaderConfig):
    if cfg.workload == "text":
        return data_lib.TextWindows.from_split("train", cfg.seq_len)
    return data_lib.image_source(cfg.image_spec, cfg.source, cfg.cache_dir)


def shard(ds, cfg: LoaderConfig):
    """This loader's shard of a MapDataset: every ``shard_count``-th sample from ``shard_index``
    (Grain's slicing), taken before the shuffle so that the shards partition the source."""
    return ds if cfg.shard_count == 1 else ds[cfg.shard_index::cfg.shard_count]


def build_dataset(cfg: LoaderConfig, stage_timing: bool = True):
    """Returns the Grain IterDataset of host batches (infinite: reshuffled every epoch)."""
    import grain
    import grain.experimental as ge

    _ensure_absl_flags()
    src = build_source(cfg)
    if cfg.workload != "text":
        src = TimedSource(src)
    ds = shard(grain.MapDataset.source(src), cfg).shuffle(seed=cfg.seed).repeat(None)
    if cfg.workload == "text":
        ds = ds.map(TextSample())
    else:
        if cfg.source == "arrayrecord":
            ds = ds.map(Decode(src.src.path))
        # each shard draws its own crops and flips (shard 0 keeps the single-process seed)
        ds = ds.random_map(Augment(cfg.crop_padding, cfg.augment_cost), seed=cfg.seed + 1 + 7919 * cfg.shard_index)
    ds = ds.batch(cfg.batch_size, drop_remainder=True)
    # Grain's default read options (16 threads, 500 elements ahead) would hide a 500-batch buffer;
    # here the batches ahead per process are explicit knobs.
    it_ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=cfg.read_threads,
                                                 prefetch_buffer_size=cfg.read_buffer_size))
    options = ge.DatasetOptions(execution_tracking_mode=ge.ExecutionTrackingMode.STAGE_TIMING if stage_timing
                                else ge.ExecutionTrackingMode.DISABLED)
    it_ds = ge.WithOptionsIterDataset(it_ds, options)
    if cfg.num_workers > 0:
        it_ds = it_ds.mp_prefetch(grain.MultiprocessingOptions(
            num_workers=cfg.num_workers, per_worker_buffer_size=cfg.per_worker_buffer_size),
            worker_init_fn=WorkerInit(new_segment_log()))
    if cfg.prefetch_buffer_size > 0:
        it_ds = ge.ThreadPrefetchIterDataset(it_ds, prefetch_buffer_size=cfg.prefetch_buffer_size)
    return it_ds


def die_with_parent(*_args) -> None:
    """Asks Linux to SIGKILL this process when its parent dies (a killed run leaves no orphans)."""
    import ctypes
    import signal
    import sys
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except OSError:
            pass


# ------------------------------------------------------------ shared memory of killed workers
#
# A worker process killed between creating a shared-memory segment for a batch and registering it with
# multiprocessing's resource tracker leaves a segment nobody knows of: no process maps it, and no
# tracker unlinks it at exit. The dead-worker test (SIGKILL at a random moment) left one in /dev/shm in
# 2 of 7 runs on the 2-core CPU. So each worker writes the name of every segment it creates, with its
# pid, to a log of its loader before it creates it; once that pid is gone, a name of its still in
# /dev/shm is an orphan of ours and is unlinked (names whose creator still runs are left alone, so
# another loader's batches in flight are never touched).

_SEGMENT_LOGS: list[Path] = []


def new_segment_log() -> Path:
    """A new log for one loader's workers (in the temp folder, named after this process). Logs left
    by a process that is gone (killed before its exit handler ran) are settled first: their dead
    workers' segments unlinked, the logs removed."""
    import tempfile
    for stale in Path(tempfile.gettempdir()).glob("memsim-shm-*-*.log"):
        try:
            owner = int(stale.name.split("-")[2])
        except (IndexError, ValueError):
            continue
        if owner != os.getpid() and not _alive(owner):
            _settle(stale, final=True)
    fd, name = tempfile.mkstemp(prefix=f"memsim-shm-{os.getpid()}-", suffix=".log")
    os.close(fd)
    _SEGMENT_LOGS.append(Path(name))
    return Path(name)


def freeze_heap() -> None:
    """Moves every object this process holds now out of the cyclic garbage collector's reach
    (``gc.freeze``), after one full collection, so that the collections the measured loop triggers
    scan only what the loop allocates.

    A loader worker is a spawned process that imports what the main process imported (JAX, Flax,
    Grain: about 190,000 objects), and each full collection of that heap stopped it for 45–118 ms
    (measured with ``gc.callbacks`` in ``python -m experiments train --num_workers=1``, both
    processes). Where one fell inside a 3-s window of a run bound by its one worker, it took about
    3% off that run's samples/s and not off the next one's: a pause of the harness's own heap, not
    of the pipeline measured."""
    import gc
    gc.collect()
    gc.freeze()


class WorkerInit:
    """A loader worker's start: die with the parent, freeze the heap it imported (see
    :func:`freeze_heap`), and log each shared-memory segment it creates."""

    def __init__(self, log: Path):
        self.log = str(log)

    def __call__(self, *_args) -> None:
        die_with_parent()
        freeze_heap()
        from multiprocessing import shared_memory
        make = shared_memory._make_filename  # noqa: SLF001 — where SharedMemory(create=True) names a segment
        try:
            fd, pid = os.open(self.log, os.O_WRONLY | os.O_APPEND), os.getpid()
        except OSError:  # the log is gone: this worker's segments go unlogged, the loader runs on
            return

        def logged() -> str:
            name = make()
            os.write(fd, f"{pid} {name.lstrip('/')}\n".encode())
            return name
        shared_memory._make_filename = logged


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie is dead for this purpose)."""
    import psutil
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def release_dead_workers_segments(final: bool = False) -> int:
    """Unlinks the shared-memory segments that this process's loader workers created and that are
    still in /dev/shm after their creator died; returns how many. Logs whose workers have all gone
    are removed."""
    return sum(_settle(log, final) for log in list(_SEGMENT_LOGS))


def _settle(log: Path, final: bool) -> int:
    try:
        entries = [w for w in map(str.split, log.read_text().splitlines()) if len(w) == 2 and w[0].isdigit()]
    except FileNotFoundError:
        entries, final = [], True
    except OSError:  # another user's log, or unreadable: not ours to settle
        return 0
    pids = {int(p) for p, _ in entries}
    dead = {p for p in pids if not _alive(p)}
    mapped, n = _mapped_segments(), 0
    for p, name in entries:
        if int(p) in dead and name not in mapped:
            try:
                os.unlink(f"/dev/shm/{name}")
            except OSError:  # gone already (or not ours)
                continue
            n += 1
            _forget(name)
    if (pids and dead == pids) or final:
        try:
            log.unlink(missing_ok=True)
        except OSError:
            return n
        if log in _SEGMENT_LOGS:
            _SEGMENT_LOGS.remove(log)
    return n


def _mapped_segments() -> set[str]:
    """Names of the /dev/shm segments this process maps (batches it still holds)."""
    try:
        with open("/proc/self/maps") as f:
            return {ln.rsplit("/dev/shm/", 1)[1].split()[0] for ln in f if "/dev/shm/" in ln}
    except OSError:
        return set()


def _forget(name: str) -> None:
    # the worker registered the segment with the resource tracker it shares with this process (unless
    # it died first); unregistered here, the tracker does not report it as leaked at exit
    from multiprocessing import resource_tracker
    try:
        resource_tracker.unregister("/" + name, "shared_memory")
    except Exception:  # noqa: BLE001 — best effort: no tracker running
        pass


atexit.register(release_dead_workers_segments, final=True)


class LoaderFailed(RuntimeError):
    """The loader stopped delivering batches: a worker died, or the pipeline ended unexpectedly."""


def split_stage_times(batch: dict) -> tuple[dict, dict]:
    """Separates the per-stage time stamps from the arrays that go to the device."""
    times = {k: float(np.sum(batch[k])) for k in STAGE_KEYS if k in batch}
    if MADE_KEY in batch:
        times[MADE_KEY] = float(np.max(batch[MADE_KEY]))
    return {k: v for k, v in batch.items() if k not in STAMP_KEYS}, times


def _worker_stats_queues(stats) -> list:
    """The queues through which Grain's worker processes send their summaries, anywhere in the
    stats tree of an iterator (the multiprocessing prefetch node is a parent of the last node)."""
    out, todo, seen = [], [stats], set()
    while todo:
        s = todo.pop()
        if id(s) in seen:
            continue
        seen.add(id(s))
        out += list(getattr(getattr(s, "_config", None), "stats_in_queues", None) or ())
        todo += list(getattr(s, "_parents", None) or ())
    return out


def grain_stats_frame(iterator):
    """Grain's STAGE_TIMING execution summary of ``iterator`` as a DataFrame (empty if unavailable).

    Uses Grain's summary builder on the iterator's stats object; this is internal API in grain
    0.2.x, so failures are reported in a ``note`` column, never raised.
    """
    import pandas as pd
    try:
        # Worker processes send their summaries every 5 s (grain's _REPORTING_PERIOD_SEC); asking
        # before the first one has arrived blocks 2 s per worker and returns nothing, so a run
        # shorter than that gets a note instead (measured: 2.0 s of each 4.6 s smoke run with a worker).
        if any(q.empty() for q in _worker_stats_queues(iterator._stats)):  # noqa: SLF001
            return pd.DataFrame([{"node": "", "note": "no execution summary from the worker processes yet "
                                                      "(they report every 5 s; the run was shorter)"}])
        summary = iterator._stats._get_execution_summary()  # noqa: SLF001 — no public accessor in grain 0.2.18
    except Exception as e:  # grain internals differ between versions
        return pd.DataFrame([{"node": "", "note": f"grain summary unavailable: {type(e).__name__}: {e}"}])
    rows = []
    for nid, n in sorted(summary.nodes.items()):
        rows.append({"node_id": nid, "node": n.name, "num_produced_elements": n.num_produced_elements,
                     "total_processing_time_s": n.total_processing_time_ns / 1e9,
                     "min_processing_time_s": (n.min_processing_time_ns / 1e9
                                               if n.num_produced_elements else float("nan")),
                     "max_processing_time_s": n.max_processing_time_ns / 1e9,
                     "wait_time_ratio": n.wait_time_ratio, "bytes_produced": n.bytes_produced,
                     "is_prefetch": n.is_prefetch, "inputs": ",".join(str(i) for i in n.inputs), "note": ""})
    return pd.DataFrame(rows)


class WorkerWatch:
    """Knows the loader's worker processes so a dead one is reported by pid and exit code."""

    def __init__(self):
        import psutil
        self._me = psutil.Process()
        self._before = {p.pid for p in self._me.children(recursive=True)}
        self.workers = []

    def snapshot(self) -> None:
        self.workers = [p for p in self._me.children(recursive=False) if p.pid not in self._before
                        and _is_python(p)]

    def dead(self) -> list[str]:
        import psutil
        out = []
        for p in self.workers:
            try:
                st = p.status()
                if st == psutil.STATUS_ZOMBIE:
                    out.append(f"pid {p.pid} (zombie)")
            except psutil.NoSuchProcess:
                out.append(f"pid {p.pid} (gone)")
        return out


def _is_python(p) -> bool:
    try:
        return "resource_tracker" not in " ".join(p.cmdline())
    except Exception:
        return True


def describe_worker_failure(watch: WorkerWatch | None, cause: BaseException | None) -> str:
    dead = watch.dead() if watch else []
    msg = "the data loader stopped delivering batches"
    if dead:
        msg += f": loader worker process(es) died: {', '.join(dead)}"
    if cause is not None:
        msg += f" ({type(cause).__name__}: {cause})"
    return msg + ". Check memory (an OOM kill ends workers) and the transform code; lower num_workers to debug."


def shm_segments() -> set[str]:
    """Names in /dev/shm (where Grain's shared-memory batches live), for leak checks."""
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


def dataset_path(cfg: LoaderConfig) -> Path:
    return data_lib.ensure_images(cfg.image_spec, cfg.source, cfg.cache_dir)
