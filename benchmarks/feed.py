"""Device-feed benchmark: samples/s with feed none, double_buffer and grain_device_put, against the
device-resident bound, all measured in one run on one configuration where the loader alone
delivers batches at least twice as fast as the step consumes them.

    python -m benchmarks.feed [--json] [--repeats N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

FEEDS = ("none", "double_buffer", "grain_device_put")


def bench_config():
    from experiments.train import TrainConfig
    # A compute-bound MLP step (~5M params, batch 128) fed by a light in-RAM loader.
    return TrainConfig(model="mlp", width=1024, depth=3, batch_size=128, num_samples=4096, source="ram",
                       num_workers=0, prefetch_buffer_size=2, device_buffer_size=2, cpu_buffer_size=4,
                       steps=40, warmup_steps=5, resident_steps=40)


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
    args = ap.parse_args(argv)
    from experiments import env, train

    cfg = bench_config()
    loader_bps = loader_alone_batches_per_s(cfg)
    sps = {k: [] for k in FEEDS}
    resident, step_s = [], []
    for _ in range(args.repeats):
        for kind in FEEDS:
            r = train.run(dataclasses.replace(cfg, feed=kind)).iloc[0]
            sps[kind].append(float(r.samples_per_s))
            resident.append(float(r.device_resident_samples_per_s))
            step_s.append(float(r.device_resident_step_median_s))
    med = {k: statistics.median(v) for k, v in sps.items()}
    res = statistics.median(resident)
    consume_bps = 1.0 / statistics.median(step_s)
    out = {
        "benchmark": "feed",
        "config": {k: getattr(cfg, k) for k in ("model", "width", "depth", "batch_size", "source", "num_workers",
                                                "prefetch_buffer_size", "device_buffer_size", "cpu_buffer_size")},
        "device_kind": env.environment()["device_kind"], "platform": env.environment()["platform"],
        "repeats": args.repeats,
        "loader_alone_batches_per_s": loader_bps,
        "step_consumes_batches_per_s": consume_bps,
        "loader_over_step": loader_bps / consume_bps,
        "none_samples_per_s": med["none"],
        "double_buffer_samples_per_s": med["double_buffer"],
        "grain_device_put_samples_per_s": med["grain_device_put"],
        "device_resident_samples_per_s": res,
        "double_buffer/none": med["double_buffer"] / med["none"],
        "double_buffer/device_resident": med["double_buffer"] / res,
        "grain_device_put/device_resident": med["grain_device_put"] / res,
    }
    print(f"feed benchmark on {out['platform']} ({out['device_kind']}), {args.repeats} interleaved repeats, medians")
    print(f"  loader alone {loader_bps:8.1f} batches/s; step consumes {consume_bps:.1f} batches/s "
          f"(loader/step = {out['loader_over_step']:.1f}×)")
    print(f"  {'feed':18s} {'samples/s':>10s} {'/ resident':>11s}")
    for k in FEEDS:
        print(f"  {k:18s} {med[k]:10.1f} {med[k] / res:11.3f}")
    print(f"  {'device_resident':18s} {res:10.1f} {1.0:11.3f}")
    print(f"  double_buffer/none = {out['double_buffer/none']:.3f}")
    if out["loader_over_step"] < 2:
        print("  WARNING: the loader is not 2× faster than the step here; the comparison is not the intended one")
    if args.json:
        print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
