"""Benchmark: the vectorised pipeline simulator against a pure-Python event-by-event simulator.

``python -m benchmarks.pipeline`` sweeps 100,000 configurations × 2,000 items with
``memsim.pipeline.sweep`` (compilation excluded: one untimed run first, then timed repeats, each
ending when the DataFrame exists) and runs the pure-Python simulator of the same model
(``memsim.pipeline_reference``) on a sample of the same configurations in the same process.
It reports configuration-items per second for both and their ratio, plus how closely the two
agree on the sample's throughput. ``--json`` prints one JSON object as the last line.

The CPU is split into one XLA host device per core (``--xla_force_host_platform_device_count``,
set before JAX starts) so that blocks of configurations run on every core.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time


def _set_host_devices(n: int) -> None:
    flag = f"--xla_force_host_platform_device_count={n}"
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " " + flag).strip()


def benchmark_grid(n_configs: int) -> dict:
    """A Cartesian grid of the shared knobs and service times with ``n_configs`` rows (100,000:
    10 worker counts × 10 prefetch depths × 5 device buffers × 4 batch sizes × 5 transform times
    × 2 feeds × 5 compute times); smaller sizes trim the grid."""
    grid = {
        "num_workers": [0, 1, 2, 3, 4, 6, 8, 12, 16, 32],
        "prefetch_buffer_size": list(range(10)),
        "device_buffer_size": [0, 1, 2, 3, 4],
        "batch_size": [16, 32, 64, 128],
        "transform_s": [2e-5, 5e-5, 1e-4, 2e-4, 5e-4],
        "feed": ["double_buffer", "grain_device_put"],
        "compute_s": [0.002, 0.005, 0.01, 0.02, 0.05],
    }
    size = 1
    for v in grid.values():
        size *= len(v)
    # trim the longest lists until the grid fits
    while size > n_configs:
        k = max(grid, key=lambda key: len(grid[key]))
        if len(grid[k]) == 1:
            break
        size = size // len(grid[k]) * (len(grid[k]) - 1)
        grid[k] = grid[k][:-1]
    return grid


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.pipeline", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", type=int, default=100_000, help="configurations in the sweep")
    ap.add_argument("--items", type=int, default=2000, help="loader batches per configuration")
    ap.add_argument("--repeats", type=int, default=2, help="timed repeats of the sweep (median)")
    ap.add_argument("--python-configs", type=int, default=10,
                    help="configurations (sampled from the grid) run by the pure-Python simulator")
    ap.add_argument("--devices", type=int, default=os.cpu_count() or 1,
                    help="XLA host devices (one per core); only if JAX has not started yet")
    ap.add_argument("--quick", action="store_true", help="10,000 configurations × 1,000 items")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = ap.parse_args(argv)
    if args.quick:
        args.configs, args.items, args.python_configs = 10_000, 1000, 4
    for name in ("configs", "items", "repeats", "python_configs", "devices"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')}={getattr(args, name)}: must be >= 1")

    jax_started = "jax" in sys.modules
    if not jax_started:
        _set_host_devices(args.devices)
    import jax
    import numpy as np

    from memsim import pipeline as P
    from memsim.pipeline_reference import simulate_reference

    grid = benchmark_grid(args.configs)
    base = P.PipelineConfig()
    n_cfg = 1
    for v in grid.values():
        n_cfg *= len(v)

    t0 = time.perf_counter()
    first = P.sweep(grid, base, n_items=args.items)
    compile_and_run_s = time.perf_counter() - t0
    times, cpu = [], []
    for _ in range(args.repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        df = P.sweep(grid, base, n_items=args.items)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    sweep_s = statistics.median(times)
    cpu_s = statistics.median(cpu)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    sim_items = int(df["sim_items"].iloc[0])
    rate = n_cfg * sim_items / sweep_s

    # pure-Python event-by-event simulator on a sample of the same configurations
    rng = np.random.default_rng(0)
    rows = np.sort(rng.choice(n_cfg, size=min(args.python_configs, n_cfg), replace=False))
    configs = [P.PipelineConfig(**{k: v for k, v in df.iloc[int(r)][list(P.FIELDS)].items()}) for r in rows]
    py_items = 0
    py_rates, py_se = [], []
    t0 = time.perf_counter()
    for cfg in configs:
        out = simulate_reference(cfg, sim_items, seed=1, warmup_frac=int(df["sim_warmup_items"].iloc[0]) / sim_items)
        py_items += sim_items
        py_rates.append(out["samples_per_s"])
        py_se.append(out["samples_per_s_stderr"])
    py_s = time.perf_counter() - t0
    py_rate = py_items / py_s
    sim = df["samples_per_s"].to_numpy()[rows]
    se = df["samples_per_s_stderr"].to_numpy()[rows]
    z = (np.asarray(py_rates) - sim) / np.hypot(se, np.asarray(py_se))
    rel = np.abs(np.asarray(py_rates) / sim - 1)
    assert np.allclose(first["samples_per_s"], df["samples_per_s"]), "sweep is not deterministic"

    result = {
        "benchmark": "pipeline",
        "configs": n_cfg,
        "items": sim_items,
        "config_items": n_cfg * sim_items,
        "sweep_s_median": sweep_s,
        "sweep_s_repeats": times,
        "first_call_s_incl_compile": compile_and_run_s,
        "config_items_per_s": rate,
        "sweep_cpu_s_median": cpu_s,
        "config_items_per_cpu_s": n_cfg * sim_items / cpu_s,
        "load_average_1min": load,
        "python_configs": len(configs),
        "python_s": py_s,
        "python_config_items_per_s": py_rate,
        "ratio": rate / py_rate,
        "goal_config_items_per_s": 1e8,
        "goal_met": bool(rate >= 1e8),
        "python_vs_jax_median_rel_diff": float(np.median(rel)),
        "python_vs_jax_max_abs_z": float(np.max(np.abs(z))),
        "python_vs_jax_within_3se_frac": float(np.mean(np.abs(z) < 3)),
        "devices": len(jax.devices()),
        "device_kind": jax.devices()[0].device_kind,
        "platform": jax.devices()[0].platform,
        "cpu_count": os.cpu_count(),
        "jax_started_before_benchmark": jax_started,
        "jax": jax.__version__,
        "python": platform.python_version(),
    }
    lines = [
        f"pipeline simulator benchmark ({result['platform']}, {result['devices']} host device(s), "
        f"{result['cpu_count']} CPUs)",
        f"{'':36s}{'config-items':>14s}{'seconds':>10s}{'config-items/s':>16s}",
        f"{'memsim.pipeline.sweep (JAX)':36s}{n_cfg * sim_items:>14,d}{sweep_s:>10.3f}{rate:>16.3e}",
        f"{'pure-Python event simulator':36s}{py_items:>14,d}{py_s:>10.3f}{py_rate:>16.3e}",
        f"ratio JAX / Python: {rate / py_rate:,.0f}x    goal >= 1e8 config-items/s: "
        f"{'met' if rate >= 1e8 else 'NOT met'}",
        f"CPU time of the sweep: {cpu_s:.2f} s over {sweep_s:.2f} s wall ({n_cfg * sim_items / cpu_s:.3e} "
        f"config-items per CPU-second; 1-min load average {load:.1f} on {os.cpu_count()} CPUs)",
        f"first sweep call incl. compilation: {compile_and_run_s:.2f} s; timed repeats: "
        + ", ".join(f"{t:.3f}" for t in times) + " s",
        f"agreement on {len(configs)} sampled configs (independent random draws): median |rel diff| "
        f"{result['python_vs_jax_median_rel_diff']:.2%}; within 3 combined batch-means errors: "
        f"{result['python_vs_jax_within_3se_frac']:.0%} (max |z| {result['python_vs_jax_max_abs_z']:.1f}; "
        f"8-batch error estimates are themselves ±25%)",
    ]
    print("\n".join(lines))
    if args.json:
        print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
