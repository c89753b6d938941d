"""Probes: how fast bytes move on this machine, and how fast it multiplies matrices.

Each probe sweeps a size (4 KiB up to ``max_bytes``, capped by free memory), times every size
``repeats`` times after ``warmup`` untimed-for-the-fit runs, and emits one row per measurement.
``run`` returns the rows and, given ``out_dir``, appends them to ``out_dir/rows.csv`` through the
append-only writer of every experiment (``experiments.results.RowWriter``) as each probe's sweep
finishes, so an interrupted run keeps the probes it finished. ``pinned_vs_pageable`` compares
host-to-device copies from pinned and pageable memory, interleaved, at the same sizes. Fitting
t = α + n / B per link is analysis's (``analysis.links``); nothing here fits.

    python -m experiments probe --preset quick [--run_id=ID] [--results_root=DIR] [--key=value ...]
    python -m analysis links results/probe/<run_id>      # the fitted links of that folder

A probe the platform cannot run yields one row with status "not measured" and the reason; no
number is ever made up for it.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
import mmap
import os
import shutil
import signal
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Literal

import numpy as np
import pandas as pd
import psutil

from experiments import compat, results
from experiments.configs import ConfigError, check, to_flat_dict
from experiments.env import environment

KiB, MiB, GiB = 2**10, 2**20, 2**30
PAGE = mmap.PAGESIZE

# probe -> (src tier, dst tier, what the x axis of the fit counts)
PROBE_LINKS: dict[str, tuple[str, str, str]] = {
    "file_read_cold": ("disk", "page_cache", "bytes"),
    "file_read_warm": ("page_cache", "ram", "bytes"),
    "ram_copy": ("ram", "ram", "bytes"),
    "h2d_pageable": ("ram", "device", "bytes"),
    "h2d_pinned": ("pinned_host", "device", "bytes"),
    "d2h": ("device", "ram", "bytes"),
    "device_copy": ("device", "device", "bytes"),
    "matmul_fp32": ("device", "device", "flop"),
    "matmul_bf16": ("device", "device", "flop"),
}
PROBES = tuple(PROBE_LINKS)


@dataclasses.dataclass(frozen=True)
class ProbeConfig:
    probes: tuple[str, ...] = PROBES
    min_bytes: int = 4 * KiB
    max_bytes: int = 256 * MiB
    size_factor: int = 4            # sizes are min_bytes * size_factor**k
    repeats: int = 5
    warmup: int = 1
    memory_fraction: float = 0.25   # of available RAM that the largest size × 3 buffers may take
    max_seconds_per_size: float = 5.0  # a slower size ends that probe's sweep ("not measured" rows)
    cold_method: Literal["fadvise", "o_direct"] = "fadvise"
    matmul_sizes: tuple[int, ...] = (128, 256, 512, 1024)
    #: the matmuls' sizes on an accelerator (a GPU or TPU backend): the CPU's are launch-bound there.
    #: On an H200 (2026-11-26, ``results/nvidia-h200``) n ≤ 1024 took 2n³ flops in about the time of
    #: one kernel launch: the bf16 fit was "not fitted" and the fp32 fit's R² negative. At n = 8192 a
    #: bf16 matmul is 1.1 TFLOP, about a millisecond at the datasheet rate.
    accelerator_matmul_sizes: tuple[int, ...] = (1024, 2048, 4096, 8192)
    tmp_dir: str = ""               # "" = the system temp dir; the file probes write one file there
    seed: int = 0

    def __post_init__(self):
        unknown = [p for p in self.probes if p not in PROBE_LINKS]
        check(not unknown and len(self.probes) > 0, "probes", ",".join(self.probes),
              f"unknown probe(s) {unknown}; choose from {', '.join(PROBES)}")
        check(self.min_bytes >= PAGE and self.min_bytes % PAGE == 0, "min_bytes", self.min_bytes,
              f"must be a positive multiple of the page size ({PAGE} bytes; O_DIRECT needs it)")
        check(self.max_bytes >= self.min_bytes, "max_bytes", self.max_bytes,
              f"must be >= min_bytes={self.min_bytes}")
        check(self.size_factor >= 2, "size_factor", self.size_factor, "must be an integer >= 2")
        check(self.repeats >= 1, "repeats", self.repeats, "must be >= 1")
        check(self.warmup >= 0, "warmup", self.warmup, "must be >= 0")
        check(0 < self.memory_fraction <= 0.9, "memory_fraction", self.memory_fraction,
              "must be in (0, 0.9]")
        check(self.max_seconds_per_size > 0, "max_seconds_per_size", self.max_seconds_per_size,
              "must be > 0 seconds")
        check(all(n >= 1 for n in self.matmul_sizes), "matmul_sizes",
              ",".join(map(str, self.matmul_sizes)), "matrix sizes must be >= 1")
        check(all(n >= 1 for n in self.accelerator_matmul_sizes), "accelerator_matmul_sizes",
              ",".join(map(str, self.accelerator_matmul_sizes)), "matrix sizes must be >= 1")
        check(self.tmp_dir == "" or os.path.isdir(self.tmp_dir), "tmp_dir", self.tmp_dir,
              "is not an existing directory; create it or leave it empty for the system temp dir")

    def matmul_sizes_on(self, platform: str) -> tuple[int, ...]:
        """The matmul sizes measured on ``platform`` ('cpu', 'gpu', 'tpu', ...)."""
        return self.matmul_sizes if platform == "cpu" else self.accelerator_matmul_sizes


def smoke() -> ProbeConfig:
    """A few seconds: small sizes, for tests. 4 KiB … 4 MiB: up to 256 KiB a CPU's copies
    (1–15 µs) sit inside their timer's jitter, and 2 of 40 d2h sweeps measured no slope."""
    return ProbeConfig(max_bytes=4 * MiB, repeats=2, warmup=1, matmul_sizes=(16, 32, 64),
                       accelerator_matmul_sizes=(64, 128, 256))


def quick() -> ProbeConfig:
    """Under a minute on a 2-core CPU: 4 KiB … 256 MiB by ×4, 5 repeats; matmuls n = 128 … 1024 on
    the CPU, 1024 … 8192 on an accelerator."""
    return ProbeConfig(repeats=5, warmup=1)


def full() -> ProbeConfig:
    """Denser and longer: 4 KiB … 1 GiB by ×2, 7 repeats, matmuls up to 2048 (16384 on an
    accelerator)."""
    return ProbeConfig(max_bytes=1 * GiB, size_factor=2, repeats=7, warmup=2,
                       max_seconds_per_size=20.0, matmul_sizes=(128, 256, 512, 1024, 1536, 2048),
                       accelerator_matmul_sizes=(1024, 2048, 4096, 8192, 16384))


PRESETS: dict[str, Callable[[], ProbeConfig]] = {"smoke": smoke, "quick": quick, "full": full}


# ---- helpers ------------------------------------------------------------------------------------


def link_name(probe: str) -> str:
    """'src->dst' for transfer probes, 'device compute' for matmuls."""
    src, dst, unit = PROBE_LINKS[probe]
    return f"{src}->{dst}" if unit == "bytes" else f"{src} compute"


def sizes(cfg: ProbeConfig, cap_bytes: int) -> list[int]:
    """min_bytes · factor^k up to min(max_bytes, cap_bytes); at least min_bytes."""
    out, n = [], cfg.min_bytes
    limit = max(cfg.min_bytes, min(cfg.max_bytes, cap_bytes))
    while n <= limit:
        out.append(n)
        n *= cfg.size_factor
    return out


def _pread_full(fd: int, view: memoryview) -> None:
    off = 0
    while off < len(view):
        k = os.preadv(fd, [view[off:]], off)
        if k == 0:
            raise EOFError(f"file ended after {off} of {len(view)} bytes")
        off += k


def resident_fraction(fd: int, length: int) -> float:
    """Fraction of the file's first ``length`` bytes in the page cache (mincore(2)); NaN if unknown."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        addr = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return float("nan")
        try:
            pages = (length + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(ctypes.c_void_p(addr), length, vec) != 0:
                return float("nan")
            return float((np.frombuffer(vec, dtype=np.uint8) & 1).mean())
        finally:
            libc.munmap(ctypes.c_void_p(addr), length)
    except (OSError, AttributeError):
        return float("nan")


class _Recorder:
    """Collects rows; knows the environment and config columns every row carries."""

    def __init__(self, cfg: ProbeConfig, env: dict, log: Callable[[str], None],
                 writer: results.RowWriter | None = None):
        self.rows: list[dict] = []
        self.common = {**env, **to_flat_dict(cfg)}
        self.log = log
        self.writer = writer
        self._written = 0

    def flush(self) -> None:
        """Appends the rows not yet written (called between probes, never inside a timed sweep)."""
        if self.writer is not None:
            for row in self.rows[self._written:]:
                self.writer.append(row)
        self._written = len(self.rows)

    def add(self, probe: str, phase: str, size: float, seconds: float, repeat: int,
            note: str = "", flops: float = float("nan"), status: str = "ok") -> None:
        src, dst, unit = PROBE_LINKS[probe]
        measured = status == "ok" and seconds > 0
        row = {
            "probe": probe, "src": src, "dst": dst, "link": link_name(probe), "phase": phase,
            "size_bytes": size, "flops": flops, "repeat": repeat, "seconds": seconds,
            "bandwidth_Bps": size / seconds if measured and unit == "bytes" else float("nan"),
            "flop_rate": flops / seconds if measured and unit == "flop" else float("nan"),
            "status": status, "note": note,
        }
        row.update(self.common)
        self.rows.append(row)

    def not_measured(self, probe: str, reason: str, size: float = float("nan")) -> None:
        self.add(probe, "measure", size, float("nan"), -1, reason, status="not measured")
        self.log(f"  {probe}: not measured ({reason})")


def _sweep(rec: _Recorder, cfg: ProbeConfig, probe: str, sz: list[int],
           timed: Callable[[int], float], note: str | Callable[[int], str] = "",
           flops_of: Callable[[int], float] | None = None) -> None:
    """Warm-up then repeats for each size; stops the sweep when one size gets too slow."""
    for i, n in enumerate(sz):
        flops = flops_of(n) if flops_of else float("nan")
        size_b = n
        worst = 0.0
        for w in range(cfg.warmup):
            s = timed(n)
            rec.add(probe, "warmup", size_b, s, w, "warm-up/compile: not fitted", flops)
        for r in range(cfg.repeats):
            s = timed(n)
            worst = max(worst, s)
            rec.add(probe, "measure", size_b, s, r, note(n) if callable(note) else note, flops)
        if worst > cfg.max_seconds_per_size and i + 1 < len(sz):
            for m in sz[i + 1:]:
                rec.not_measured(probe, f"skipped: size {n} took {worst:.3g} s > "
                                        f"max_seconds_per_size={cfg.max_seconds_per_size}; raise it "
                                        "to measure larger sizes", size=m)
            break
    rec.flush()


# ---- the probes ---------------------------------------------------------------------------------


def _file_probes(rec: _Recorder, cfg: ProbeConfig, sz: list[int], tmp: Path) -> None:
    want = [p for p in ("file_read_cold", "file_read_warm") if p in cfg.probes]
    if not want:
        return
    free = psutil.disk_usage(str(tmp)).free
    if free < 2 * sz[-1]:
        fits = [n for n in sz if 2 * n <= free]
        if not fits:
            for p in want:
                rec.not_measured(p, f"only {free} bytes free in {tmp}; set tmp_dir= elsewhere")
            return
        sz = fits
    n_max = sz[-1]
    path = tmp / "probe.bin"
    rng = np.random.default_rng(cfg.seed)
    # An anonymous mmap is page-aligned, as O_DIRECT requires; touch it so page faults of the
    # destination are not timed.
    buf = mmap.mmap(-1, n_max)
    dst = np.frombuffer(buf, dtype=np.uint8)
    dst[:] = 1
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            chunk = 16 * MiB
            for off in range(0, n_max, chunk):
                os.write(fd, rng.integers(0, 256, min(chunk, n_max - off), dtype=np.uint8).tobytes())
            os.fsync(fd)  # DONTNEED only drops clean pages
        finally:
            os.close(fd)
        view = memoryview(buf)

        if "file_read_cold" in want:
            if cfg.cold_method == "fadvise":
                fd = os.open(path, os.O_RDONLY)
                base_note = ("page cache dropped with posix_fadvise(POSIX_FADV_DONTNEED) after fsync; "
                             "read() into a pre-touched buffer (includes the copy to user space). "
                             "On a VM the hypervisor may still cache the disk image")
            else:
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
                except OSError as e:
                    fd = None
                    rec.not_measured("file_read_cold", f"O_DIRECT open failed on {tmp}: {e}; "
                                                       "use cold_method=fadvise or another tmp_dir")
                base_note = ("page cache bypassed with O_DIRECT into a page-aligned buffer (no copy "
                             "to user space). On a VM the hypervisor may still cache the disk image")
            if fd is not None:
                try:
                    def cold(n: int, fd=fd) -> float:
                        if cfg.cold_method == "fadvise":
                            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                        t0 = time.perf_counter()
                        _pread_full(fd, view[:n])
                        return time.perf_counter() - t0

                    def cold_note(n: int, fd=fd) -> str:
                        if cfg.cold_method != "fadvise":
                            return base_note
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                        res = resident_fraction(fd, n)
                        if math.isnan(res):
                            return base_note + "; residency after fadvise not checked (mincore failed)"
                        return base_note + f"; mincore after fadvise: {res:.1%} of pages resident"

                    # The first read of the whole file after writing it: recorded apart (phase
                    # first_read), since a VM's host cache may make later "cold" reads faster.
                    s = cold(n_max)
                    rec.add("file_read_cold", "first_read", n_max, s, 0,
                            "first cold read of the whole file after writing it; not fitted")
                    rec.log(f"  file_read_cold: first read {n_max / s / 1e9:.3g} GB/s")
                    _sweep(rec, cfg, "file_read_cold", sz, cold, cold_note(sz[-1]))
                finally:
                    os.close(fd)

        if "file_read_warm" in want:
            fd = os.open(path, os.O_RDONLY)
            try:
                _pread_full(fd, view[:n_max])  # bring the file into the page cache

                def warm(n: int) -> float:
                    t0 = time.perf_counter()
                    _pread_full(fd, view[:n])
                    return time.perf_counter() - t0

                res = resident_fraction(fd, n_max)
                _sweep(rec, cfg, "file_read_warm", sz, warm,
                       "read() from the page cache into a pre-touched buffer"
                       + ("" if math.isnan(res) else f"; mincore: {res:.1%} of pages resident"))
            finally:
                os.close(fd)
    finally:
        del dst, view
        buf.close()


def _ram_copy(rec: _Recorder, cfg: ProbeConfig, sz: list[int]) -> None:
    src = np.ones(sz[-1], dtype=np.uint8)   # np.ones writes every page: pre-touched
    dst = np.zeros(sz[-1], dtype=np.uint8)
    dst[:] = 2                              # np.zeros may be lazily mapped; touch it

    def copy(n: int) -> float:
        t0 = time.perf_counter()
        np.copyto(dst[:n], src[:n])
        return time.perf_counter() - t0

    _sweep(rec, cfg, "ram_copy", sz, copy,
           "numpy.copyto into a pre-touched buffer; n bytes read and n written, rate = n/s")


def _placed(x, kind: str, what: str):
    got = getattr(x.sharding, "memory_kind", None)
    if got != kind:
        raise RuntimeError(f"{what}: jax placed the array in memory_kind={got!r}, not {kind!r}; "
                           "this runtime does not honour memory kinds, so pinned and pageable "
                           "transfers cannot be told apart")
    return x


def _unaliasable_ones(n: int) -> np.ndarray:
    """``n`` bytes of ones whose address is 16 mod 64, so that ``jax.device_put`` on the CPU copies.

    The CPU client zero-copies a numpy buffer aligned to 64 bytes and copies any other, whatever
    ``may_alias`` says (jax 0.10.2). numpy's allocator returns either, from run to run (measured:
    3 of 8 fresh 16 MiB arrays were 64-aligned); a sweep on an aligned buffer times ~40 µs at every
    size, its α-β fit has no positive slope, and the link is "not fitted". Pinning the address
    makes the probe measure what its note says, an allocation plus a copy, on every run.

    Example:
        >>> _unaliasable_ones(4096).ctypes.data % 64, _unaliasable_ones(4096).size
        (16, 4096)
    """
    buf = np.ones(n + 64, dtype=np.uint8)
    off = (16 - buf.ctypes.data) % 64
    return buf[off:off + n]


def _time_pageable_to_device(a: np.ndarray, dev) -> float:
    """Seconds for jax.device_put of pageable numpy memory onto ``dev``, synced."""
    import jax
    t0 = time.perf_counter()
    x = jax.device_put(a, dev)
    x.block_until_ready()
    s = time.perf_counter() - t0
    del x
    return s


def _time_pinned_to_device(a: np.ndarray, dev) -> tuple[float, float]:
    """(staging s, transfer s): numpy → a memory_kind='pinned_host' array, then that array →
    memory_kind='device', each synced and timed apart."""
    import jax
    from jax.sharding import SingleDeviceSharding
    t0 = time.perf_counter()
    p = jax.device_put(a, SingleDeviceSharding(dev, memory_kind="pinned_host")).block_until_ready()
    t1 = time.perf_counter()
    x = jax.device_put(p, SingleDeviceSharding(dev, memory_kind="device"))
    x.block_until_ready()
    t2 = time.perf_counter()
    _placed(p, "pinned_host", "staging")
    _placed(x, "device", "transfer")
    del x, p
    return t1 - t0, t2 - t1


PINNED_COLUMNS = ("size_bytes", "repeats", "pageable_s", "staging_s", "pinned_s", "pinned_speedup",
                  "staged_speedup", "pageable_Bps", "pinned_Bps", "platform", "device_kind", "status", "note")


def pinned_vs_pageable(sizes_bytes, repeats: int = 5, warmup: int = 1, device=None) -> pd.DataFrame:
    """Host-to-device copies from pageable and from pinned host memory, interleaved, per size.

    Each repeat runs, in turn: ``device_put`` of a pageable numpy array (``pageable_s``); and the
    pinned path, numpy → ``memory_kind='pinned_host'`` (``staging_s``) → ``memory_kind='device'``
    (``pinned_s``). Medians over ``repeats`` after ``warmup`` untimed rounds. ``pinned_speedup`` =
    pageable_s / pinned_s (what pinned buffers buy when the data is already in them, e.g. a loader
    that writes into pinned memory); ``staged_speedup`` = pageable_s / (staging_s + pinned_s)
    (pinning a batch just to send it). On a CPU backend every side is a RAM copy: the rows run the
    real code path and say so in ``note``. A device without a pinned_host memory kind gives one
    row with status "not measured" and the reason.
    """
    import jax
    sizes_bytes = [int(n) for n in sizes_bytes]
    if not sizes_bytes or min(sizes_bytes) < 1:
        raise ConfigError(f"sizes_bytes={sizes_bytes!r}: give one or more sizes >= 1 byte")
    if repeats < 1 or warmup < 0:
        raise ConfigError(f"repeats={repeats!r}, warmup={warmup!r}: need repeats >= 1 and warmup >= 0")
    dev = device if device is not None else jax.devices()[0]
    base = {"platform": dev.platform, "device_kind": dev.device_kind}
    kinds = compat.memory_kinds(dev)
    if "pinned_host" not in kinds:
        return pd.DataFrame([{**{c: float("nan") for c in PINNED_COLUMNS}, **base, "status": "not measured",
                              "note": f"device memories {list(kinds)} have no 'pinned_host' memory kind"}],
                            columns=list(PINNED_COLUMNS))
    note = ("interleaved repeats, medians; device_put synced with block_until_ready")
    if dev.platform == "cpu":
        note += ("; platform cpu: pinned_host, unpinned_host and device are all host RAM, so every "
                 "time here is a RAM copy (with allocation), not a bus transfer")
    host = np.ones(max(sizes_bytes), dtype=np.uint8)
    rows = []
    for n in sizes_bytes:
        a = host[:n]
        pageable, staging, pinned = [], [], []
        for r in range(warmup + repeats):
            s_page = _time_pageable_to_device(a, dev)
            s_stage, s_pin = _time_pinned_to_device(a, dev)
            if r >= warmup:
                pageable.append(s_page)
                staging.append(s_stage)
                pinned.append(s_pin)
        pg, st, pn = (float(np.median(v)) for v in (pageable, staging, pinned))
        rows.append({"size_bytes": n, "repeats": repeats, "pageable_s": pg, "staging_s": st, "pinned_s": pn,
                     "pinned_speedup": pg / pn, "staged_speedup": pg / (st + pn),
                     "pageable_Bps": n / pg, "pinned_Bps": n / pn, **base, "status": "ok", "note": note})
    return pd.DataFrame(rows, columns=list(PINNED_COLUMNS))


def _device_probes(rec: _Recorder, cfg: ProbeConfig, sz: list[int]) -> None:
    import jax
    import jax.numpy as jnp

    dev = jax.devices()[0]
    platform = dev.platform
    host = _unaliasable_ones(sz[-1]) if platform == "cpu" else np.ones(sz[-1], dtype=np.uint8)
    kinds = compat.memory_kinds(dev)

    if "h2d_pageable" in cfg.probes:
        probe_x = jax.device_put(host[:PAGE]).block_until_ready()
        aliased = probe_x.unsafe_buffer_pointer() == host.ctypes.data
        del probe_x
        note = "jax.device_put of a pageable numpy array, block_until_ready"
        if platform == "cpu":
            note += ("; on CPU the 'device' is host RAM: this is an allocation plus copy "
                     "(with page faults), not a bus transfer")
        if aliased:
            note += "; WARNING: device_put aliased the numpy buffer (zero-copy)"

        _sweep(rec, cfg, "h2d_pageable", sz, lambda n: _time_pageable_to_device(host[:n], dev), note)

    if "h2d_pinned" in cfg.probes:
        if platform == "cpu":
            rec.not_measured(
                "h2d_pinned",
                "platform cpu: the device's memory is host RAM, so there is no host-to-device bus "
                "for page-locked memory to speed up (the pinned_host path runs here, in "
                "probes.pinned_vs_pageable, but a copy from it is just another RAM copy)")
        elif "pinned_host" not in kinds:
            rec.not_measured("h2d_pinned", f"platform {platform}: device memories {list(kinds)} have no "
                                           "'pinned_host' memory kind")
        else:
            _sweep(rec, cfg, "h2d_pinned", sz, lambda n: _time_pinned_to_device(host[:n], dev)[1],
                   "jax.device_put from a memory_kind='pinned_host' array to 'device', "
                   "block_until_ready")

    if "d2h" in cfg.probes:
        base = jax.device_put(host).block_until_ready()
        fresh = jax.jit(lambda x: x + jnp.uint8(1))  # new buffers: Array caches its host copy
        trial = fresh(base[:PAGE]).block_until_ready()
        aliased = np.asarray(trial).ctypes.data == trial.unsafe_buffer_pointer()
        del trial
        if aliased:
            note = ("np.asarray of a device array aliases it on this platform (zero-copy, the "
                    "device buffer is host RAM); measured np.array(x, copy=True) instead: what a "
                    "consumer that needs its own host buffer pays")
        else:
            note = "np.asarray(jax array): device-to-host copy into a new host buffer"

        def d2h(n: int) -> float:
            x = fresh(base[:n]).block_until_ready()
            t0 = time.perf_counter()
            h = np.array(x, copy=True) if aliased else np.asarray(x)
            s = time.perf_counter() - t0
            del h, x
            return s

        _sweep(rec, cfg, "d2h", sz, d2h, note)
        del base

    if "device_copy" in cfg.probes:
        base = jax.device_put(host).block_until_ready()
        copy = jax.jit(lambda x: x.copy())

        def dev_copy(n: int) -> float:
            x = base[:n].block_until_ready() if n < base.shape[0] else base
            t0 = time.perf_counter()
            y = copy(x)
            y.block_until_ready()
            s = time.perf_counter() - t0
            del y
            return s

        _sweep(rec, cfg, "device_copy", sz, dev_copy,
               "jit(x.copy()) on device, compile in warm-up rows; n bytes read and n written")
        del base

    for probe, dtype in (("matmul_fp32", jnp.float32), ("matmul_bf16", jnp.bfloat16)):
        if probe not in cfg.probes:
            continue
        key = jax.random.PRNGKey(cfg.seed)
        mm = jax.jit(jnp.matmul)
        mats: dict[int, tuple] = {}

        def matmul(n: int, dtype=dtype, mm=mm, mats=mats) -> float:
            if n not in mats:
                mats.clear()
                ka, kb = jax.random.split(key)
                mats[n] = (jax.random.normal(ka, (n, n), dtype).block_until_ready(),
                           jax.random.normal(kb, (n, n), dtype).block_until_ready())
            a, b = mats[n]
            t0 = time.perf_counter()
            mm(a, b).block_until_ready()
            return time.perf_counter() - t0

        itemsize = jnp.dtype(dtype).itemsize
        # The "size" of a matmul row is the operand bytes (3 n² items); the fit uses flops = 2n³.
        sizes_n = list(cfg.matmul_sizes_on(platform))
        for i, n in enumerate(sizes_n):
            worst = 0.0
            for w in range(cfg.warmup):
                rec.add(probe, "warmup", 3 * n * n * itemsize, matmul(n), w,
                        "warm-up/compile: not fitted", flops=2.0 * n**3)
            for r in range(cfg.repeats):
                s = matmul(n)
                worst = max(worst, s)
                rec.add(probe, "measure", 3 * n * n * itemsize, s, r,
                        f"jit(jnp.matmul) of two square {jnp.dtype(dtype).name} matrices, n = "
                        f"{', '.join(map(str, sizes_n))}; flops = 2 n^3", flops=2.0 * n**3)
            if worst > cfg.max_seconds_per_size and i + 1 < len(sizes_n):
                for m in sizes_n[i + 1:]:
                    rec.not_measured(probe, f"skipped: n={n} took {worst:.3g} s > "
                                            f"max_seconds_per_size={cfg.max_seconds_per_size}",
                                     size=3 * m * m * itemsize)
                break
        mats.clear()
        rec.flush()


def _extra_environment(tmp: Path) -> dict:
    import jax
    vm = psutil.virtual_memory()
    stats = compat.memory_stats(jax.devices()[0]) or {}
    dev_mem = float(stats.get("bytes_limit", float("nan")))
    return {
        "ram_total_bytes": float(vm.total),
        "ram_available_bytes": float(vm.available),
        "disk_total_bytes": float(psutil.disk_usage(str(tmp)).total),
        "device_memory_bytes": dev_mem,
        "started_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def run(cfg: ProbeConfig, log: Callable[[str], None] | None = None,
        out_dir: str | os.PathLike | None = None) -> pd.DataFrame:
    """Runs the probes of ``cfg``; one row per measurement (and per probe not measured).

    With ``out_dir`` the rows are also appended to ``out_dir/rows.csv`` (and its
    ``rows.columns.json``) after each probe's sweep, through ``results.RowWriter``: never between
    the timed repeats of a sweep, and a Ctrl-C keeps every probe that finished.
    """
    if not isinstance(cfg, ProbeConfig):
        raise ConfigError(f"cfg is a {type(cfg).__name__}; pass a ProbeConfig (e.g. probes.quick())")
    log = log or (lambda _msg: None)
    tmp = Path(tempfile.mkdtemp(prefix="memsim-probe-", dir=cfg.tmp_dir or None))
    try:
        env = {**environment(), **_extra_environment(tmp)}
        cap = int(cfg.memory_fraction * env["ram_available_bytes"] / 3)
        sz = sizes(cfg, cap)
        env["max_bytes_effective"] = float(sz[-1])
        if sz[-1] < cfg.max_bytes:
            log(f"largest size capped at {sz[-1]} bytes by free memory "
                f"(memory_fraction={cfg.memory_fraction}, available={env['ram_available_bytes']:.3g})")
        writer = None
        if out_dir is not None:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            writer = results.RowWriter(Path(out_dir))
        rec = _Recorder(cfg, env, log, writer)
        t0 = time.perf_counter()
        _file_probes(rec, cfg, sz, tmp)
        log(f"file probes done at {time.perf_counter() - t0:.1f} s")
        if "ram_copy" in cfg.probes:
            _ram_copy(rec, cfg, sz)
        log(f"ram probes done at {time.perf_counter() - t0:.1f} s")
        _device_probes(rec, cfg, sz)
        log(f"device probes done at {time.perf_counter() - t0:.1f} s")
        rec.flush()
        return pd.DataFrame(rec.rows)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

# ---- writing and the command line ---------------------------------------------------------------

# The environment columns every row carries besides the config's (analysis.links copies them onto
# the fits).
ENV_COLUMNS = ("platform", "device_kind", "device_count", "cpu_count", "cpu_model", "cpu_simd", "jax_version",
               "jaxlib_version", "numpy_version", "python", "git_commit", "ram_total_bytes",
               "ram_available_bytes", "disk_total_bytes", "device_memory_bytes",
               "max_bytes_effective", "started_at")


def write_config(out_dir: Path, cfg: ProbeConfig, preset: str, files: tuple[str, ...] = ("rows.csv",)) -> Path:
    """``out_dir/config.json``: the probe config, the environment and the tables the run writes;
    written before measuring."""
    path = Path(out_dir) / "config.json"
    results.write_json_atomic(path, {"experiment": "probe", "preset": preset, "config": to_flat_dict(cfg),
                                     "environment": environment(), "files": list(files)}, sort_keys=False)
    return path


def format_pinned(df: pd.DataFrame) -> str:
    """The pinned-vs-pageable table as text."""
    if (df["status"] != "ok").all():
        return f"pinned vs pageable: not measured ({df['note'].iloc[0]})"
    lines = [f"pinned vs pageable host->device on {df['platform'].iloc[0]} ({df['device_kind'].iloc[0]}), medians",
             f"{'size_bytes':>12} {'pageable_s':>11} {'staging_s':>11} {'pinned_s':>11} {'pinned x':>9} {'staged x':>9}"]
    for _, r in df.iterrows():
        lines.append(f"{int(r['size_bytes']):>12} {r['pageable_s']:11.3g} {r['staging_s']:11.3g} {r['pinned_s']:11.3g} "
                     f"{r['pinned_speedup']:9.2f} {r['staged_speedup']:9.2f}")
    if df["platform"].iloc[0] == "cpu":
        lines.append("(platform cpu: every side is a RAM copy, not a bus transfer)")
    return "\n".join(lines)


def main(cfg: ProbeConfig, preset: str, run_id: str | None = None, results_root: str | None = None) -> int:
    """``python -m experiments probe``: measures, appends the rows, prints what it wrote.

    The folder is ``<results_root or results>/probe/<run_id or a new id>``; rows go to its
    ``rows.csv`` as each probe finishes, and ``pinned_vs_pageable.csv`` (host-to-device copies from
    pinned and pageable memory at the sizes of the ``h2d_pageable`` sweep) follows. The links are
    fitted by ``python -m analysis links <folder>``. A probe run is not resumed: an existing
    ``run_id`` with rows is refused before measuring. Ctrl-C or SIGTERM keeps the rows of the
    probes that finished, removes the probe's temporary file and exits 128 + the signal.
    """
    from experiments import sweep

    out = results.run_dir("probe", run_id, results_root, resume=run_id is not None)
    if (out / "rows.csv").exists():
        raise results.ResultsError(f"{out} already has probe rows; a probe run is not resumed: "
                                   "choose another --run_id (or none for a new one)")
    write_config(out, cfg, preset, ("rows.csv", "pinned_vs_pageable.csv"))

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    pinned = None
    with sweep.interruptible() as sig:
        try:
            raw = run(cfg, log=log, out_dir=out)
            h2d = raw[(raw["probe"] == "h2d_pageable") & (raw["status"] == "ok")]
            if len(h2d):  # the same sizes as the pageable sweep, pinned and pageable interleaved
                pinned = pinned_vs_pageable(sorted(h2d["size_bytes"].unique()), repeats=cfg.repeats,
                                            warmup=cfg.warmup)
                writer = results.RowWriter(out, "pinned_vs_pageable")
                for row in pinned.to_dict("records"):
                    writer.append(row)
        except KeyboardInterrupt:
            sig.caught = sig.caught or signal.SIGINT
    if sig.caught:
        print(f"\ninterrupted ({signal.Signals(sig.caught).name}): the rows of the finished probes are "
              f"kept in {out / 'rows.csv'}", file=sys.stderr)
        return sig.exit_code
    wall = time.perf_counter() - t0
    measured = raw[(raw["phase"] == "measure") & (raw["status"] == "ok")]
    for probe in [p for p in PROBES if p in set(raw["probe"])]:
        mine = raw[raw["probe"] == probe]
        ok = measured[measured["probe"] == probe]
        status = (f"{len(ok)} measurements at {ok['size_bytes'].nunique()} sizes" if len(ok)
                  else f"not measured ({mine['note'].iloc[0]})")
        print(f"{probe:<15} {link_name(probe):<24} {status}")
    if pinned is not None:
        print("\n" + format_pinned(pinned))
    print(f"\n{len(raw)} rows in {out / 'rows.csv'}; wall time {wall:.1f} s (preset {preset})\n"
          f"fit the links: python -m analysis links {out}")
    return 0
