"""experiments.heap: the measuring processes' malloc thresholds, glibc's or fixed (MEMSIM_MALLOC=steady)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import heap

# a fresh process: import experiments (which sets the thresholds), then allocate and free a 40 MiB
# array twenty times and print the minor page faults of those twenty. glibc serves 40 MiB (above
# its largest dynamic mmap threshold, 32 MiB) with a fresh mapping each time; with the thresholds
# fixed it comes from the heap, whose freed top is kept.
CHURN = """
import resource
import experiments
import numpy as np
np.ones(5 << 20)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    a = np.ones(5 << 20)
    del a
print(experiments.heap.apply())
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _churn(mode: str) -> tuple[str, int]:
    env = {**os.environ, heap.ENV: mode}
    out = subprocess.run([sys.executable, "-c", CHURN], env=env, capture_output=True, text=True, timeout=120,
                         check=True, cwd=Path(__file__).resolve().parents[2]).stdout.split("\n")
    return out[0], int(out[1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt and thresholds")
def test_the_steady_heap_stops_a_freed_block_from_faulting_in_again():
    state, faults = _churn("steady")
    assert state == "steady (mmap 64 MiB, trim 128 MiB)"
    assert faults < 100, faults
    state, faults = _churn("default")
    assert state == "glibc default"
    assert faults > 5000, faults  # each 40 MiB block mapped afresh: pages faulted in again


def test_a_bad_mode_is_a_one_line_error_naming_it(monkeypatch):
    monkeypatch.setenv(heap.ENV, "jemalloc")
    with pytest.raises(ValueError, match=r"MEMSIM_MALLOC='jemalloc': must be 'default'.*or 'steady'"):
        heap.mode()
    monkeypatch.setenv(heap.ENV, "")
    assert heap.mode() == "default"
    monkeypatch.delenv(heap.ENV)
    assert heap.mode() == "default"
    monkeypatch.setenv(heap.ENV, " Steady ")
    assert heap.mode() == "steady"


# a fresh process: keep the heap's freed top (trim threshold 1 GiB), fill 200 MiB of the heap with
# 64 KiB blocks (below the mmap threshold) and free them, then print the resident memory before and
# after release_free, in MiB
RELEASE = """
import ctypes, resource
from experiments import heap
libc = ctypes.CDLL("libc.so.6")
libc.mallopt(-1, 1 << 30)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
blocks = [libc.malloc(64 << 10) for _ in range(3200)]
for b in blocks:
    ctypes.memset(b, 1, 64 << 10)
for b in blocks:
    libc.free(b)
held = rss()
print(heap.release_free(), held, rss())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")
def test_release_free_gives_the_freed_heap_back():
    out = subprocess.run([sys.executable, "-c", RELEASE], capture_output=True, text=True, timeout=120, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout.split()
    released, held, after = out[0] == "True", float(out[1]), float(out[2])
    assert released
    assert held - after > 150, (held, after)  # the 200 MiB freed but kept, then given back


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc maps a 64 MiB block afresh")
def test_minor_faults_count_the_pages_a_process_touches_first():
    import ctypes
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = (ctypes.c_void_p,)
    before = heap.minor_faults()
    block = libc.malloc(64 << 20)  # above the 32 MiB mmap cap: a fresh mapping, no huge-page advice
    ctypes.memset(block, 1, 64 << 20)  # (numpy advises huge pages for its large arrays)
    after = heap.minor_faults()
    libc.free(block)
    assert after - before > 8000, after - before  # 16 384 pages of 4 KiB


# a fresh process: leave a free 40 MiB block inside the heap (served from the heap under a raised mmap
# threshold, a block above it kept in use), put the threshold back at glibc's cap, then ask for 35 MB
# without and with hold_large_free; prints whether each came from a fresh mapping, and how many
# blocks the hold took
HOLD = """
import ctypes
from experiments import heap
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
def mapped(p):
    return bool(ctypes.c_size_t.from_address(p - 8).value & 2)
libc.mallopt(-3, 64 << 20)
block, guard = libc.malloc(40 << 20), libc.malloc(1 << 20)
libc.free(block)
libc.mallopt(-3, heap.MMAP_CAP)
b = libc.malloc(35_000_000)
print(mapped(b))
libc.free(b)
held = heap.hold_large_free()
c = libc.malloc(35_000_000)
print(mapped(c), len(held))
libc.free(c)
heap.free_held(held)
print(len(held))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's chunk layout")
def test_hold_large_free_makes_a_large_block_a_fresh_mapping_as_in_a_fresh_process():
    out = subprocess.run([sys.executable, "-c", HOLD], capture_output=True, text=True, timeout=120, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout.split()
    assert out[0] == "False"  # carved from the free block: faults in once, then reused
    assert out[1] == "True" and int(out[2]) >= 1, out  # held: mapped afresh, as a training process's
    assert out[3] == "0"  # given back and the list emptied


def test_hold_large_free_off_glibc_holds_nothing(monkeypatch):
    monkeypatch.setattr(heap.platform, "libc_ver", lambda: ("", ""))
    assert heap.hold_large_free() == []
    heap.free_held([])


# a fresh process: a 40 MiB block is a fresh mapping (above the cap); with reuse_large_blocks it comes
# from the heap; after map_large_blocks, with the block the heap kept held, a fresh mapping again
REUSE = """
import ctypes
from experiments import heap
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
def mapped():
    p = libc.malloc(40 << 20)
    m = bool(ctypes.c_size_t.from_address(p - 8).value & 2)
    libc.free(p)
    return m
print(mapped(), heap.reuse_large_blocks(), mapped(), heap.map_large_blocks())
held = heap.hold_large_free()  # the block the heap kept meanwhile, as the step probe holds it
print(mapped())
heap.free_held(held)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt and chunk layout")
def test_reuse_large_blocks_serves_them_from_the_heap_until_map_large_blocks():
    run = lambda mode: subprocess.run([sys.executable, "-c", REUSE], capture_output=True, text=True, timeout=120,
                                      check=True, env={**os.environ, heap.ENV: mode},
                                      cwd=Path(__file__).resolve().parents[2]).stdout.split()
    assert run("default") == ["True", "True", "False", "True", "True"]
    # the runs' fixed thresholds are left alone: 40 MiB comes from the heap throughout
    assert run("steady") == ["False", "False", "False", "False", "False"]
