"""Device-feed benchmark: samples/s with feed none, double_buffer and grain_device_put, against
two baselines and the device-resident bound, all measured in one run on one configuration where
the loader alone delivers batches at least twice as fast as the step consumes them.

    python -m benchmarks.feed [--json] [--repeats N] [--device-cores one|shared]

What each is, all on the same loader, model and batch, interleaved in every repeat:

- ``none``: no overlap at all. The loader has no thread of its own (no Grain read-ahead, no host
  prefetch) and the step loop transfers each batch after the previous step, so load, transfer
  and step run in series. The floor: what any prefetching is measured from.
- ``grain_prefetch``: Grain's own host prefetch and no device feed: feed ``none`` with
  ``prefetch_buffer_size`` = :data:`GRAIN_PREFETCH_BUFFER` (the loader's default), i.e. Grain's
  ``ThreadPrefetchIterDataset`` loading batches in a thread while the step runs; the transfer
  stays in series. This is what a Grain user has without a device feed, so
  ``double_buffer/grain_prefetch`` is the fair measure of what the device feed adds (and
  ``double_buffer/none`` what it adds over no prefetch at all).
- ``double_buffer`` and ``grain_device_put``: the device feeds (no host prefetch of their own,
  ``prefetch_buffer_size`` = 0: the feed's thread is the only overlap).
- ``device_resident``: the same step on a batch already on the device, the bound no feed beats.

On a machine without an accelerator the "device" is the CPU itself, and XLA's thread pool spans
every core, so the step and the host loader fight for the same cores: hiding the loader behind the
step then helps little, because the loader's CPU time comes out of the step's. An accelerator
computes apart from the host's cores. ``--device-cores one`` (the default when there are at least
two cores) models that: XLA's thread pool is started while the process is pinned to the first core
and stays there; everything started afterwards (the loader's threads, the feed's producer, the
training loop) is pinned to the other cores. (XLA_FLAGS' ``intra_op_parallelism_threads`` does not
limit the CPU client's pool in jax 0.10.2; CPU affinity does.) The device-resident bound is measured
under the same split in the same run, so every ratio compares like with like. ``--device-cores
shared`` measures the shared-core case instead.

With an accelerator (JAX's default backend is not the CPU, found out in a child process before this
one starts XLA) the step runs on the device and nothing is pinned: mode ``accelerator``. The JSON's
``device_cores_mode`` says which mode ran (``one``, ``shared`` or ``accelerator``) and ``pinned``
whether cores were split.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time

from memsim.knobs import FEEDS  # plain Python: starts no XLA thread pool before the pinning


def reserve_device_core() -> tuple[set, set]:
    """Starts XLA's CPU thread pool pinned to the first core, then pins this thread (and so every
    thread it starts later) to the other cores. Returns (device cores, host cores)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit(f"--device-cores one needs at least 2 cores; this process may use {cores}: "
                         "use --device-cores shared")
    os.sched_setaffinity(0, {cores[0]})
    import jax
    import jax.numpy as jnp
    jax.block_until_ready(jax.jit(lambda a: a @ a)(jnp.ones((256, 256))))  # the pool starts here
    os.sched_setaffinity(0, set(cores[1:]))
    return {cores[0]}, set(cores[1:])


def default_platform(timeout_s: float = 300.0) -> str:
    """JAX's default backend ('cpu', 'gpu', 'tpu'), asked in a child process so that this one has
    not started XLA (and its CPU thread pool) before the cores are split."""
    proc = subprocess.run([sys.executable, "-c", "import jax; print(jax.default_backend())"],
                          capture_output=True, text=True, timeout=timeout_s)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"could not start JAX to find the platform (exit {proc.returncode}): "
                         f"{proc.stderr.strip().splitlines()[-1:] or proc.stdout.strip()}")
    return lines[-1].strip()


def choose_mode(platform: str, requested: str | None, n_cores: int) -> str:
    """The core mode: ``accelerator`` (no pinning) off the CPU; on the CPU the requested one, else
    ``one`` with at least 2 cores and ``shared`` otherwise."""
    if platform != "cpu":
        if requested is not None:
            raise SystemExit(f"--device-cores {requested}: the step runs on the {platform} here, so no cores are "
                             "split; leave --device-cores out (mode accelerator)")
        return "accelerator"
    if requested is not None:
        return requested
    return "one" if n_cores >= 2 else "shared"


#: Host prefetch depth of the ``grain_prefetch`` baseline: the loader's default (LoaderConfig, TrainConfig).
GRAIN_PREFETCH_BUFFER = 2


def bench_config():
    from experiments.train import TrainConfig
    # A compute-bound MLP step (~10.5M params, batch 128: ~8 GFLOP per step) fed by an in-RAM loader
    # (random crop, flip, normalise: ~0.2 ms of host CPU per sample) that alone is about 5x faster.
    # No loader thread at all (no Grain read-ahead, read_buffer_size=0; no host prefetch,
    # prefetch_buffer_size=0): the feed is the only thing that overlaps loading with the step, so
    # `none` pays load + transfer + step in series, as the comparison intends.
    return TrainConfig(model="mlp", width=2048, depth=2, batch_size=128, num_samples=4096, source="ram",
                       num_workers=0, read_buffer_size=0, prefetch_buffer_size=0, device_buffer_size=2,
                       cpu_buffer_size=4,
                       min_steps=30, min_measure_s=1.0, warmup_steps=5)


def variants(cfg) -> dict:
    """The configurations measured, by name: one per feed, and ``grain_prefetch`` (feed none over
    Grain's thread prefetch)."""
    out = {kind: dataclasses.replace(cfg, feed=kind) for kind in FEEDS}
    out["grain_prefetch"] = dataclasses.replace(cfg, feed="none", prefetch_buffer_size=GRAIN_PREFETCH_BUFFER)
    return out


def loader_alone_batches_per_s(cfg, n: int = 60) -> float:
    from experiments.loader import build_dataset
    it = iter(build_dataset(cfg.loader_config(), stage_timing=False))
    try:
        for _ in range(5):
            next(it)
        t0 = time.perf_counter()
        for _ in range(n):
            next(it)
        return n / (time.perf_counter() - t0)
    finally:
        it.close()


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats of each feed (median kept)")
    ap.add_argument("--device-cores", choices=("one", "shared"), default=None,
                    help="CPU-only machines: one: XLA on the first core, the host pipeline on the others, as with "
                         "an accelerator (default with >= 2 cores); shared: XLA's pool spans every core. "
                         "With an accelerator nothing is pinned (mode accelerator)")
    args = ap.parse_args(argv)
    platform = sys.modules["jax"].default_backend() if "jax" in sys.modules else default_platform()
    args.device_cores = choose_mode(platform, args.device_cores, len(os.sched_getaffinity(0)))
    if args.device_cores == "one":
        if "jax" in sys.modules:
            raise RuntimeError("--device-cores one must start XLA itself: run python -m benchmarks.feed as its own process")
        device_cores, host_cores = reserve_device_core()
    else:
        device_cores = host_cores = set(os.sched_getaffinity(0))
    from experiments import env, train

    cfg = bench_config()
    loader_bps = loader_alone_batches_per_s(cfg)
    runs = variants(cfg)
    sps = {k: [] for k in runs}
    resident, step_s = [], []
    for _ in range(args.repeats):
        for kind, run_cfg in runs.items():
            r = train.run(run_cfg).iloc[0]
            sps[kind].append(float(r.samples_per_s))
            resident.append(float(r.device_resident_samples_per_s))
            step_s.append(float(r.device_resident_step_median_s))
    med = {k: statistics.median(v) for k, v in sps.items()}
    res = statistics.median(resident)
    consume_bps = 1.0 / statistics.median(step_s)
    out = {
        "benchmark": "feed",
        "config": {k: getattr(cfg, k) for k in ("model", "width", "depth", "batch_size", "source", "num_workers",
                                                "read_buffer_size", "prefetch_buffer_size", "device_buffer_size",
                                                "cpu_buffer_size")},
        "device_kind": env.environment()["device_kind"], "platform": env.environment()["platform"],
        "repeats": args.repeats, "device_cores_mode": args.device_cores, "pinned": args.device_cores == "one",
        "cpu_count": os.cpu_count(),
        "device_cores": sorted(device_cores), "host_cores": sorted(host_cores),
        "loader_alone_batches_per_s": loader_bps,
        "step_consumes_batches_per_s": consume_bps,
        "loader_over_step": loader_bps / consume_bps,
        "grain_prefetch_buffer_size": GRAIN_PREFETCH_BUFFER,
        "none_samples_per_s": med["none"],
        "grain_prefetch_samples_per_s": med["grain_prefetch"],
        "double_buffer_samples_per_s": med["double_buffer"],
        "grain_device_put_samples_per_s": med["grain_device_put"],
        "device_resident_samples_per_s": res,
        "double_buffer/none": med["double_buffer"] / med["none"],
        "double_buffer/grain_prefetch": med["double_buffer"] / med["grain_prefetch"],
        "grain_device_put/grain_prefetch": med["grain_device_put"] / med["grain_prefetch"],
        "grain_prefetch/none": med["grain_prefetch"] / med["none"],
        "grain_prefetch/device_resident": med["grain_prefetch"] / res,
        "double_buffer/device_resident": med["double_buffer"] / res,
        "grain_device_put/device_resident": med["grain_device_put"] / res,
    }
    cores = (f"XLA on cores {sorted(device_cores)}, host pipeline on cores {sorted(host_cores)}"
             if args.device_cores == "one" else f"no core pinning (mode {args.device_cores})")
    print(f"feed benchmark on {out['platform']} ({out['device_kind']}), {args.repeats} interleaved repeats, medians; "
          f"{cores}")
    print(f"  loader alone {loader_bps:8.1f} batches/s; step consumes {consume_bps:.1f} batches/s "
          f"(loader/step = {out['loader_over_step']:.1f}×)")
    print(f"  {'feed':18s} {'samples/s':>10s} {'/ resident':>11s}")
    for k in runs:
        print(f"  {k:18s} {med[k]:10.1f} {med[k] / res:11.3f}")
    print(f"  {'device_resident':18s} {res:10.1f} {1.0:11.3f}")
    print(f"  double_buffer/none = {out['double_buffer/none']:.3f}; "
          f"double_buffer/grain_prefetch = {out['double_buffer/grain_prefetch']:.3f} "
          f"(grain_prefetch: feed none over Grain's thread prefetch of {GRAIN_PREFETCH_BUFFER} batches)")
    if out["loader_over_step"] < 2:
        print("  WARNING: the loader is not 2× faster than the step here; the comparison is not the intended one")
    if args.json:
        print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
