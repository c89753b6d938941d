"""One process: a fixed numpy workload (four passes of a 3-neighbour mean, new arrays each pass)
timed in thread CPU per iteration, first in a 0.3 s reference window, then, after ``GAP`` seconds
idle, in two consecutive 0.5 s windows (what a run's measured window would be).

    python proc.py GAP {batch,sample}

``batch`` works on a 64×32×32×3 float32 array (786 KiB: above glibc's default mmap threshold, so
every new array is fresh pages), ``sample`` on one 32×32×3 image (12 KiB). Prints one line:
``cpu/wall`` µs per iteration of the three windows. ``analyse.py`` reads the lines of many processes.
"""
import sys
import time

import numpy as np

gap, kind = float(sys.argv[1]), sys.argv[2]
x = np.random.default_rng(0).random((64, 32, 32, 3) if kind == "batch" else (32, 32, 3), dtype=np.float32)


def work():
    y = x
    for _ in range(4):
        y = (y + np.roll(y, 1, axis=-3) + np.roll(y, 1, axis=-2)) / 3.0
    return y


def window(sec):
    t0, w0, n = time.thread_time(), time.perf_counter(), 0
    while time.perf_counter() - w0 < sec:
        work()
        n += 1
    return (time.thread_time() - t0) / n * 1e6, (time.perf_counter() - w0) / n * 1e6


res = [window(0.3)]
time.sleep(gap)
res += [window(0.5), window(0.5)]
print(" ".join(f"{c:.1f}/{w:.1f}" for c, w in res), flush=True)
