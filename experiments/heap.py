"""The C heap of the measuring processes: glibc's own malloc thresholds (the default), or, with
``MEMSIM_MALLOC=steady``, thresholds held fixed so that a step's time does not depend on what the
process allocated before it.

glibc serves an allocation above its mmap threshold with a fresh ``mmap`` (zeroed pages, a page
fault on each first touch, an ``munmap`` on free) and gives the heap's free top back to the kernel
once it exceeds its trim threshold. Both thresholds move with the process's history: freeing an
mmapped block raises the mmap threshold to that block's size (up to 32 MiB) and the trim threshold
to twice that. XLA's CPU runtime allocates and frees a step's temporaries on every call, so a
step's time depended on which larger blocks the process had freed before. Measured on the 2-core
Intel Xeon VM (family 6, model 207), 2026-11-26, the MLP in bf16 at 48×48 images, batch 32 in two
micro-batches (``experiments.components.measure_step``, eight measurements of it between three
other shapes in one process, idle machine):

- glibc's own thresholds: 22.1–43.3 ms per step; the same shape alone in a fresh process 28.3 ms,
  and in the components probe of four quick studies 18.3–27.9 ms where the studies' own runs of
  it measured 26.6–30.4 ms (the cost model's largest held-out error, every study);
- ``M_MMAP_THRESHOLD`` 64 MiB and ``M_TRIM_THRESHOLD`` 128 MiB (this module): 19.2–22.6 ms;
- the mmap threshold alone fixed at 32 MiB (trim at glibc's 128 KiB): 19.5–33.1 ms, so the trim
  threshold is the part that matters.

``python -m experiments train`` of that configuration with two workers, alternating, steady then
glibc twice: device-resident 1 418 and 1 324 samples/s against 1 046 and 1 103, fed 801 and 853
against 698 and 781, peak RSS of the process tree 1 116 and 1 192 MiB against 1 037 and 1 027 MiB
(the heap keeps up to 128 MiB of freed top per process).

It is not the default, because it does not speed every step up. Two sweeps of each, interleaved
(steady, glibc, steady, glibc; the MLP at 48×48, batch 32 in two micro-batches, from RAM with 2
augmentation passes, 0 and 2 workers, 2 repeats each; ``results/cpu-2core/malloc/``), medians of
four runs: the bf16 step 21–23 against 31 ms, its samples/s 989 and 876 against 791 and 766 (0 and
2 workers); the fp32 step 9.2 and 10.4 against 9.4 and 9.3 ms, with two steps of 17–18 ms, and its
samples/s 1 711 and 1 476 against 1 849 and 1 643 (7–10% slower); peak RSS 80–130 MiB higher. The
two quick studies measured with it as the default (``results/cpu-2core/holdout/pair20``,
``pair21``) ran on a noisy machine and say nothing either way.

``MEMSIM_MALLOC=default`` (or unset) keeps glibc's own thresholds, what a training process gets
unless it sets them; the rows record which was used (``malloc``). Off glibc (no ``mallopt``)
nothing is set and the rows say so. Applied at ``import experiments`` (:func:`apply`), so the
sweep's run processes, the loader's spawned workers and the data-parallel processes all get the
same: they import this package before they allocate what they measure, and inherit the variable.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform

ENV = "MEMSIM_MALLOC"
MODES = ("steady", "default")
MMAP_THRESHOLD = 64 << 20
TRIM_THRESHOLD = 128 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # <malloc.h>

_state: str | None = None


def _libc():
    """glibc with the signatures this module calls (``mallopt``, ``malloc_trim``, ``malloc``,
    ``free``), or None off glibc or where it cannot be loaded."""
    if platform.libc_ver()[0] != "glibc":
        return None
    return _load_libc()


@functools.lru_cache(maxsize=1)
def _load_libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt.argtypes, libc.mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = (ctypes.c_size_t,), ctypes.c_int
        libc.malloc.argtypes, libc.malloc.restype = (ctypes.c_size_t,), ctypes.c_void_p
        libc.free.argtypes, libc.free.restype = (ctypes.c_void_p,), None
    except (OSError, AttributeError):
        return None
    return libc


def mode() -> str:
    """``MEMSIM_MALLOC`` (unset: ``default``); ValueError naming the value for anything else."""
    value = os.environ.get(ENV, "default").strip().lower() or "default"
    if value not in MODES:
        raise ValueError(f"{ENV}={os.environ[ENV]!r}: must be 'default' (glibc's own malloc thresholds, used when "
                         f"unset) or 'steady' (fixed: mmap 64 MiB, trim 128 MiB); unset it or set one of those")
    return value


def apply() -> str:
    """Sets this process's malloc thresholds as ``MEMSIM_MALLOC`` says (once; later calls return
    the first call's result) and returns what the rows record: ``steady (mmap 64 MiB, trim 128 MiB)``,
    ``glibc default``, ``default (not glibc)`` or ``unavailable (...)`` (then nothing was changed or
    the record says which threshold was)."""
    global _state
    if _state is not None:
        return _state
    glibc = platform.libc_ver()[0] == "glibc"
    if mode() == "default":
        _state = "glibc default" if glibc else "default (not glibc)"
        return _state
    libc = _libc()
    if libc is None:
        _state = "unavailable (no glibc mallopt)"
        return _state
    mallopt = libc.mallopt
    # the trim threshold first: it is the part that matters (see above), and older glibc refuses an
    # mmap threshold above 32 MiB (HEAP_MAX_SIZE / 2)
    trim = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    mmap = trim and mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    if trim and mmap:
        _state = f"steady (mmap {MMAP_THRESHOLD >> 20} MiB, trim {TRIM_THRESHOLD >> 20} MiB)"
    elif trim:
        _state = f"unavailable (trim {TRIM_THRESHOLD >> 20} MiB set, mallopt refused mmap {MMAP_THRESHOLD >> 20} MiB)"
    else:
        _state = "unavailable (mallopt refused the thresholds)"
    return _state


def minor_faults() -> int:
    """This process's minor page faults so far (``getrusage``; all its threads): a step that maps
    fresh memory pays one per page it touches (4 KiB, unless the block was advised huge pages, as
    numpy does for its large arrays; XLA's CPU buffers are not)."""
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def release_free() -> bool:
    """Gives the heap's free memory back to the kernel (glibc's ``malloc_trim(0)``); False off glibc.

    The components probe calls it before each shape, so that each shape's step starts from a heap
    that holds nothing an earlier shape freed, as a training process's does. Otherwise a block of
    temporaries above glibc's 32 MiB mmap cap, which a fresh process maps (and faults in) on every
    step, can be carved from a free heap top an earlier shape left, and the step measures as if it
    never faulted. Measured on the 2-core Intel Xeon VM (family 6, model 207), 2026-11-26, with the
    minor faults per step counted (``getrusage``):

    - the bf16 MLP at 48×48, batch 32 in two micro-batches (a 35 MB block): alone in a fresh process
      8 644 faults and 29–36 ms per step at every mmap threshold from 4 to 32 MiB; the studies' runs
      of it 26–35 ms (pair8–pair23), their components probes 18.5–57 ms;
    - the quick study's 40 probe shapes in the probe's order, without → with the release before each:
      that shape 8 647 → 8 643 faults (30.2 → 29.2 ms); the bf16 MLP at 48×48, batch 128 in two,
      4 345 → 8 676 faults (31.4 → 40.8 ms); the bf16 CNN there 1 202 → 12 012 faults (131 → 169 ms).
      Most shapes fault less than 50 times a step either way."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


#: glibc's largest dynamic mmap threshold on 64-bit (``DEFAULT_MMAP_THRESHOLD_MAX``): a fresh process
#: maps every block above it afresh
MMAP_CAP = 32 << 20
_IS_MMAPPED = 0x2  # the flag bit in a glibc chunk's size word, just below the pointer malloc returns


def hold_large_free(size: int = MMAP_CAP, limit: int = 256) -> list[int]:
    """Takes every free block of at least ``size`` bytes out of this thread's heap (glibc's arena)
    and returns them (pointers, to give to :func:`free_held`); [] off glibc.

    Why: after :func:`release_free` the heap still holds free blocks (their pages given back), and a
    block above glibc's 32 MiB mmap cap that XLA's CPU runtime asks for on each step is carved from
    one of them when one is large enough: it faults in once and is reused, where a training
    process, whose heap holds no such block, maps and faults it in afresh on every step. Held, no
    free block can serve it, and it is mapped as in a training process. It allocates ``size`` bytes
    until glibc answers with a fresh mapping (which it frees at once): the blocks it holds were
    free, and it touches only their headers.

    Measured on the 2-core AMD EPYC (family 25, model 1), 2026-11-27: the quick study's 40 step
    shapes in the probe's order after the tier probes, in one process, against each shape alone in a
    fresh process. The MLP in bf16 at 48×48, batch 32 in two micro-batches (35 MB of temporaries):
    alone 8 647 faults a step and 39.2 ms; in the probe 3 842–4 323 faults and 33 ms (the studies'
    probes of ``results/cpu-2core/holdout/pair35``, ``pair39`` and ``pair40`` had 0–1 441 where their
    runs had 8 645, and the cost model put those runs 28–52% too fast held out). With
    the steps dispatched synchronously and this hold (one block held before each shape): 8 647 and
    40.0 ms, and the five other shapes above the cap faulted as alone. The step probe now runs in a
    process of its own (:func:`experiments.components.run`), whose heap held no such block on the
    quick study (the hold took none, and the six shapes faulted 8 644–20 218 pages a step, XLA's
    temporaries over 4 KiB), so the hold is the guard for a probe whose earlier shapes leave one.
    The step must allocate in this thread's arena for it to work: the step probe runs its steps
    synchronously (:func:`experiments.components.run`)."""
    libc = _libc()
    if libc is None:
        return []
    held = []
    for _ in range(limit):
        p = libc.malloc(size)
        if not p:
            break
        if ctypes.c_size_t.from_address(p - ctypes.sizeof(ctypes.c_size_t)).value & _IS_MMAPPED:
            libc.free(p)
            break
        held.append(p)
    return held


def free_held(held: list[int]) -> None:
    """Gives back what :func:`hold_large_free` took."""
    libc = _libc() if held else None
    for p in held:
        libc.free(p)
    held.clear()


def reuse_large_blocks() -> bool:
    """Lets this process serve blocks above the mmap cap from its heap and keep them (mmap threshold
    256 MiB, trim threshold 1 GiB) until :func:`map_large_blocks`; False (nothing changed) off glibc
    or with ``MEMSIM_MALLOC=steady``, whose fixed thresholds the runs use.

    The step probe measures a shape whose temporaries exceed the cap a second time so, without their
    page faults, and takes the difference per faulted page as what a fault costs inside the step:
    measured on the 2-core AMD EPYC (family 25, model 1), 2026-11-27, three rounds of three shapes
    (the bf16 MLP at 48×48, batch 32 and 128 in two micro-batches, 8 645 pages a step; the fp32 CNN
    at 48×48, batch 128, 19 900), 1.0–2.4 µs a page, 1.6 at the median, where mapping, touching and
    unmapping a 35 MB block in one Python thread costs 3.9–4.3 µs a page (the step's threads fault
    while others compute)."""
    return _set_thresholds(trim=1 << 30, mmap=256 << 20)


def map_large_blocks() -> bool:
    """After :func:`reuse_large_blocks`: blocks above the cap mapped afresh again, as in a training
    process whose thresholds have settled (mmap threshold fixed at the 32 MiB cap, trim threshold
    twice it, where glibc's own move to); False off glibc or with ``MEMSIM_MALLOC=steady``. A large
    block freed in between stays in the heap and can serve the next request: :func:`hold_large_free`
    keeps it from doing so (the step probe holds before each shape)."""
    return _set_thresholds(trim=2 * MMAP_CAP, mmap=MMAP_CAP)


def _set_thresholds(trim: int, mmap: int) -> bool:
    """Both thresholds set (the trim threshold first, as :func:`apply` does); False, nothing changed,
    off glibc or with ``MEMSIM_MALLOC=steady``."""
    libc = _libc() if mode() == "default" else None
    return (libc is not None and libc.mallopt(_M_TRIM_THRESHOLD, trim) == 1
            and libc.mallopt(_M_MMAP_THRESHOLD, mmap) == 1)
