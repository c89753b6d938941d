"""Device feeds: how host batches reach the device(s). Three kinds behind one interface.

- ``none``: ``jax.device_put`` of each batch in the loop, synchronously (the step waits for it).
- ``double_buffer``: ours; a thread keeps up to ``device_buffer_size`` batches already placed on
  the device ahead of the step (the batch the step is using is one more), sharded along the batch
  axis. A slot frees when the step takes its batch, so the next copy overlaps that step.
- ``grain_device_put``: ``grain.experimental.device_put`` (a CPU-side thread prefetch of
  ``cpu_buffer_size`` host batches, then ``device_buffer_size`` device batches).

Every feed yields ``(device_batch, stage_times)`` and raises ``LoaderFailed`` instead of hanging or
ending quietly when the loader stops (the host datasets here are infinite).
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from experiments.loader import LoaderFailed, WorkerWatch, describe_worker_failure, split_stage_times

from memsim.knobs import FEEDS
_POLL_S = 0.25


def batch_sharding(devices=None) -> NamedSharding:
    """Shards the leading (batch) axis across ``devices`` (default: all local devices)."""
    devices = list(devices if devices is not None else jax.local_devices())
    mesh = Mesh(np.array(devices), ("batch",))
    return NamedSharding(mesh, P("batch"))


def put(host_batch: dict, sharding: NamedSharding) -> dict:
    """Places a host batch on the device(s), sharded along the batch axis."""
    if len(sharding.mesh.devices.flat) == 1:
        return jax.device_put(host_batch, sharding)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in host_batch.items()}


def _wait_future(fut, watch: WorkerWatch | None, timeout_s: float):
    """Waits for a host fetch, polling worker liveness so a dead worker fails fast, not hangs."""
    start = time.perf_counter()
    dead_since = None
    while True:
        try:
            return fut.result(timeout=_POLL_S)
        except TimeoutError:
            pass
        now = time.perf_counter()
        if watch is not None and watch.dead():
            dead_since = dead_since or now
            if now - dead_since > 2.0:
                raise LoaderFailed(describe_worker_failure(watch, None))
        if now - start > timeout_s:
            raise LoaderFailed(f"no batch from the loader for {timeout_s:.0f} s (data_timeout_s); "
                               + describe_worker_failure(watch, None))


class _Feed:
    kind = ""

    def __init__(self, host_ds, sharding, *, cpu_buffer_size: int, device_buffer_size: int,
                 timeout_s: float = 300.0):
        self.sharding = sharding
        self.cpu_buffer_size = cpu_buffer_size
        self.device_buffer_size = device_buffer_size
        self.timeout_s = timeout_s
        self.watch = WorkerWatch()
        self._host_ds = host_ds
        self._closed = False
        self._watch_looks = 0

    def _look_for_workers(self):
        # Grain starts its worker processes on the first fetch; look for them a few times.
        if self._watch_looks < 3:
            self._watch_looks += 1
            self.watch.snapshot()

    def __iter__(self):
        return self

    @property
    def host_iterator(self):
        """The host dataset's iterator this feed reads (Grain's, for its statistics); None before it
        exists."""
        return getattr(self, "_it", None)

    def _host_next(self, it):
        try:
            return next(it)
        except StopIteration as e:
            raise LoaderFailed(describe_worker_failure(self.watch, e)) from None
        except LoaderFailed:
            raise
        except Exception as e:  # noqa: BLE001 — re-raised with the loader context
            if self.watch.dead():
                raise LoaderFailed(describe_worker_failure(self.watch, e)) from e
            raise

    def _fetch(self):
        # An on-demand fetch in a helper thread (not a prefetch): a dead worker is noticed, not waited on.
        return _wait_future(self._pool.submit(self._host_next, self._it), self.watch, self.timeout_s)

    def _stop_producer(self):
        pass

    def close(self):
        if self._closed:
            return
        self._closed = True
        self._stop_producer()
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        _close_iter(getattr(self, "_it", None))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class SyncFeed(_Feed):
    """``none``: fetch, then ``device_put`` and wait, inside the loop."""

    kind = "none"

    def __init__(self, host_ds, sharding, **kw):
        super().__init__(host_ds, sharding, **kw)
        self._it = iter(host_ds)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="memsim-fetch")

    def __next__(self):
        host = self._fetch()
        self._look_for_workers()
        arrays, times = split_stage_times(host)
        dev = put(arrays, self.sharding)
        jax.block_until_ready(dev)
        return dev, times


class DoubleBufferFeed(_Feed):
    """``double_buffer``: a producer thread places up to ``device_buffer_size`` batches ahead."""

    kind = "double_buffer"
    _END = object()

    def __init__(self, host_ds, sharding, **kw):
        super().__init__(host_ds, sharding, **kw)
        if self.device_buffer_size < 1:
            raise ValueError(f"device_buffer_size={self.device_buffer_size}: double_buffer needs >= 1")
        self._it = iter(host_ds)
        self._slots = threading.Semaphore(self.device_buffer_size)
        self._ready: collections.deque = collections.deque()
        self._cv = threading.Condition()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._produce, name="memsim-double-buffer", daemon=True)
        self._thread.start()

    def _produce(self):
        try:
            while not self._stop.is_set():
                while not self._slots.acquire(timeout=_POLL_S):
                    if self._stop.is_set():
                        return
                host = self._host_next(self._it)
                arrays, times = split_stage_times(host)
                dev = put(arrays, self.sharding)
                jax.block_until_ready(dev)  # "placed" means the copy has finished
                with self._cv:
                    self._ready.append((dev, times))
                    self._cv.notify()
        except BaseException as e:  # noqa: BLE001 — handed to the consumer
            with self._cv:
                self._error = e
                self._cv.notify()

    def __next__(self):
        start = time.perf_counter()
        dead_since = None
        with self._cv:
            while not self._ready:
                if self._error is not None:
                    err = self._error
                    if isinstance(err, LoaderFailed):
                        raise LoaderFailed(str(err))
                    raise err
                self._cv.wait(timeout=_POLL_S)
                if not self._ready and self.watch.dead():
                    dead_since = dead_since or time.perf_counter()
                    if time.perf_counter() - dead_since > 2.0:
                        raise LoaderFailed(describe_worker_failure(self.watch, None))
                if time.perf_counter() - start > self.timeout_s:
                    raise LoaderFailed(f"no batch from the loader for {self.timeout_s:.0f} s; "
                                       + describe_worker_failure(self.watch, None))
            item = self._ready.popleft()
        self._slots.release()  # the batch leaves the buffer for the step: the producer may place the next
        self._look_for_workers()
        return item

    def _stop_producer(self):
        self._stop.set()
        self._thread.join(timeout=30)


class _StashTimes:
    """Moves the stage-time stamps aside (FIFO) so only arrays go to the device."""

    def __init__(self, stash: collections.deque):
        self.stash = stash

    def __call__(self, batch):
        arrays, times = split_stage_times(batch)
        self.stash.append(times)
        return arrays


class GrainDevicePutFeed(_Feed):
    """``grain_device_put``: Grain's own two-stage CPU → device prefetch."""

    kind = "grain_device_put"

    def __init__(self, host_ds, sharding, **kw):
        super().__init__(host_ds, sharding, **kw)
        import grain.experimental as ge
        if self.device_buffer_size < 1 or self.cpu_buffer_size < 1:
            raise ValueError("grain_device_put needs cpu_buffer_size >= 1 and device_buffer_size >= 1")
        self._stash: collections.deque = collections.deque()
        ds = ge.device_put(host_ds.map(_StashTimes(self._stash)), sharding,
                           cpu_buffer_size=self.cpu_buffer_size, device_buffer_size=self.device_buffer_size)
        self._it = iter(ds)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="memsim-fetch")

    def __next__(self):
        dev = self._fetch()
        times = self._stash.popleft() if self._stash else {}
        self._look_for_workers()
        return dev, times


def _close_iter(it) -> None:
    close = getattr(it, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # noqa: BLE001 — best effort during teardown
            pass


def make_feed(kind: str, host_ds, sharding, *, cpu_buffer_size: int = 4, device_buffer_size: int = 2,
              timeout_s: float = 300.0) -> _Feed:
    cls = {"none": SyncFeed, "double_buffer": DoubleBufferFeed, "grain_device_put": GrainDevicePutFeed}.get(kind)
    if cls is None:
        raise ValueError(f"feed={kind!r}: expected one of {', '.join(FEEDS)}")
    return cls(host_ds, sharding, cpu_buffer_size=cpu_buffer_size, device_buffer_size=device_buffer_size,
               timeout_s=timeout_s)
