"""Each thread's CPU in a run's worker processes: runs the command given (an ``experiments train``
run), reads every thread's user + system ticks of the command's child processes every 0.5 s from
``/proc/<pid>/task/<tid>/stat``, and prints, per thread that used 0.05 s or more, its CPU per wall
second over the 0.5 s windows (median, 90th percentile) and in all. The holdout README's "A worker's
CPU beyond its period" ran, from the repository root:

    .venv/bin/python results/cpu-2core/holdout/worker-side/threads.py .venv/bin/python -m experiments train \\
        --preset quick --model=mlp --precision=fp32 --batch_size=128 --image_size=16 --source=arrayrecord \\
        --augment_cost=0 --grad_accum_steps=2 --num_workers=1 --prefetch_buffer_size=1 --feed=none --min_measure_s=6
"""
import collections, os, subprocess, sys, time

TICK = os.sysconf("SC_CLK_TCK")


def children(pid):
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:  # the process is gone
        pass
    return out


def threads(pid):
    d = {}
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                s = f.read()
            fields = s[s.rindex(")") + 2:].split()
            d[t] = (int(fields[11]) + int(fields[12])) / TICK  # utime + stime
    except (OSError, ValueError):
        pass
    return d


if __name__ == "__main__":
    p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    hist = []
    try:
        while p.poll() is None:
            hist.append((time.time(), {(c, t): v for c in children(p.pid) for t, v in threads(c).items()}))
            time.sleep(0.5)
    finally:
        if p.poll() is None:
            p.kill()
    print(p.stdout.read()[-1500:])
    util = collections.defaultdict(list)
    for (t0, a), (t1, b) in zip(hist, hist[1:]):
        for k, v in b.items():
            if k in a:
                util[k].append((v - a[k]) / (t1 - t0))
    for (pid, tid), v in sorted(util.items(), key=lambda kv: -sum(kv[1])):
        if sum(v) * 0.5 < 0.05:
            continue
        v = sorted(v)
        print(f"process {pid} thread {tid}{' (main)' if pid == int(tid) else ''}: {len(v)} windows, "
              f"median {v[len(v) // 2]:.2f} cores, p90 {v[int(len(v) * 0.9)]:.2f}, {sum(v) * 0.5:.2f} s in all")
    sys.exit(p.returncode)
