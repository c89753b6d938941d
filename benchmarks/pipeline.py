"""Benchmark: the vectorised pipeline simulator on one device and on a mesh of devices, against a
pure-Python event-by-event simulator.

``python -m benchmarks.pipeline`` sweeps 100,000 configurations × 2,000 items with
``memsim.pipeline.sweep`` twice in each timed repeat: on one device
(``mesh=memsim.config_mesh(jax.devices()[:1])``) and on a mesh of ``--devices`` devices (the
configurations sharded over the mesh's ``configs`` axis), interleaved, compilation excluded (one
untimed run of each first; each timed run ends when the DataFrame exists). It checks that the
two give the same rows (``mesh_rows_equal``: every column identical; ``mesh_max_abs_diff`` over
the numeric columns) and reports both rates in configuration-items per second and their ratio
(``mesh_speedup``). It also runs the pure-Python simulator of the same model
(``memsim.pipeline_reference``) on a sample of the same configurations in the same process; the
headline ``ratio`` is the mesh's rate over the pure-Python rate, as before. ``--json`` prints
one JSON object as the last line.

On a CPU the devices are XLA host devices (``--xla_force_host_platform_device_count=N``, set
before JAX starts; by default one per core). They share the machine's cores, so the mesh can
gain at most the number of cores over one device: on a 2-core machine ``--devices 4`` gives at
most 2×, less when other processes use the cores, and less again because the sweep's host-side
work (building the grid, summarising the sums into rows) is not split (measured on the 2-vCPU
development VM, 20,000 configurations × 1,000 items: 1.2–1.35×). On an accelerator machine the
devices are the accelerators JAX sees (``--devices`` then only caps how many are used).
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
                    help="devices of the mesh compared with one device; on a CPU, the XLA host devices "
                         "to create (only if JAX has not started yet)")
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
    import pandas as pd

    from memsim import pipeline as P
    from memsim.maxplus import config_mesh
    from memsim.pipeline_reference import simulate_reference

    grid = benchmark_grid(args.configs)
    base = P.PipelineConfig()
    n_cfg = 1
    for v in grid.values():
        n_cfg *= len(v)
    devices = jax.devices()[:args.devices]
    meshes = {"one": config_mesh(devices[:1]), "mesh": config_mesh(devices)}

    def run(which):
        return P.sweep(grid, base, n_items=args.items, mesh=meshes[which])

    first, compile_and_run_s = {}, {}
    for which in meshes:
        t0 = time.perf_counter()
        first[which] = run(which)
        compile_and_run_s[which] = time.perf_counter() - t0
    times = {k: [] for k in meshes}
    cpu = {k: [] for k in meshes}
    out = {}
    for i in range(args.repeats):  # interleaved, the order alternating, so drift hits both alike
        for which in (("one", "mesh") if i % 2 == 0 else ("mesh", "one")):
            c0, t0 = time.process_time(), time.perf_counter()
            out[which] = run(which)
            times[which].append(time.perf_counter() - t0)
            cpu[which].append(time.process_time() - c0)
    df, df_one = out["mesh"], out["one"]
    sweep_s = statistics.median(times["mesh"])
    one_s = statistics.median(times["one"])
    cpu_s = statistics.median(cpu["mesh"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    sim_items = int(df["sim_items"].iloc[0])
    rate = n_cfg * sim_items / sweep_s
    one_rate = n_cfg * sim_items / one_s
    rows_equal = bool(df.equals(df_one))
    numeric = [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])]
    a, b = df[numeric].to_numpy(np.float64), df_one[numeric].to_numpy(np.float64)
    same = (a == b) | (np.isnan(a) & np.isnan(b))  # equal infinite bounds and NaNs count as equal
    with np.errstate(invalid="ignore"):
        max_abs_diff = float(np.where(same, 0.0, np.nan_to_num(np.abs(a - b), nan=np.inf)).max())

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
    for which, again in (("one", df_one), ("mesh", df)):
        assert first[which].equals(again), f"sweep on {which} is not deterministic"

    result = {
        "benchmark": "pipeline",
        "configs": n_cfg,
        "items": sim_items,
        "config_items": n_cfg * sim_items,
        "sweep_s_median": sweep_s,
        "sweep_s_repeats": times["mesh"],
        "first_call_s_incl_compile": compile_and_run_s["mesh"],
        "config_items_per_s": rate,
        "mesh_devices": len(devices),
        "one_device_sweep_s_median": one_s,
        "one_device_sweep_s_repeats": times["one"],
        "one_device_first_call_s_incl_compile": compile_and_run_s["one"],
        "one_device_config_items_per_s": one_rate,
        "mesh_speedup": rate / one_rate,
        "mesh_rows_equal": rows_equal,
        "mesh_max_abs_diff": max_abs_diff,
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
        f"{'sweep on 1 device':36s}{n_cfg * sim_items:>14,d}{one_s:>10.3f}{one_rate:>16.3e}",
        f"{f'sweep on a mesh of {len(devices)} device(s)':36s}{n_cfg * sim_items:>14,d}{sweep_s:>10.3f}{rate:>16.3e}",
        f"{'pure-Python event simulator':36s}{py_items:>14,d}{py_s:>10.3f}{py_rate:>16.3e}",
        f"mesh / 1 device: {rate / one_rate:.2f}x on {os.cpu_count()} CPUs; rows "
        + ("identical" if rows_equal else f"DIFFER (max abs difference {max_abs_diff:.3g})"),
        f"ratio JAX (mesh) / Python: {rate / py_rate:,.0f}x    goal >= 1e8 config-items/s: "
        f"{'met' if rate >= 1e8 else 'NOT met'}",
        f"CPU time of the sweep: {cpu_s:.2f} s over {sweep_s:.2f} s wall ({n_cfg * sim_items / cpu_s:.3e} "
        f"config-items per CPU-second; 1-min load average {load:.1f} on {os.cpu_count()} CPUs)",
        f"first sweep call incl. compilation: {compile_and_run_s['one']:.2f} s (1 device), "
        f"{compile_and_run_s['mesh']:.2f} s (mesh); timed repeats: 1 device "
        + ", ".join(f"{t:.3f}" for t in times["one"]) + " s, mesh "
        + ", ".join(f"{t:.3f}" for t in times["mesh"]) + " s",
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
