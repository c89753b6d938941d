"""The fp32 MLP 32/16 x2 measured by the probe's measure_step in fresh child processes, three times each,
variants alternated: base (as the probe), long (the runs' window rules), noheap (no heap release or
hold), async (asynchronous dispatch), freeze (gc.freeze first). Timing: nothing else running. From the
repository root:

    .venv/bin/python results/cpu-2core/holdout/forms/v23/probe_variants.py base,long,noheap,async
    .venv/bin/python results/cpu-2core/holdout/forms/v23/probe_variants.py base,freeze
"""
import json, subprocess, sys, dataclasses
import numpy as np
PY = sys.executable
if len(sys.argv) > 1 and sys.argv[1] == "child":
    var = sys.argv[2]
    import jax
    jax.config.update("jax_cpu_enable_async_dispatch", "async" in var)
    sys.path.insert(0, ".")
    from experiments import components, sweep, heap
    cfg = components.for_sweep(sweep.quick(), loader=False)
    tcs = cfg.step_configs()
    tgt = [tc for tc in tcs if (tc.model, tc.precision, tc.grad_accum_steps, tc.batch_size, tc.image_size) == ("mlp", "fp32", 2, 32, 16)][0]
    if "noheap" in var:
        heap.release_free = lambda: 0
        heap.hold_large_free = lambda: []
    if "long" in var:
        tgt = dataclasses.replace(tgt, warmup_steps=3, max_warmup_s=1.0, min_measure_s=0.5)
    cache = {}
    if "others" in var:  # the probe's 40 shapes compiled and stepped once before
        for tc in tcs:
            if tc != tgt:
                components.measure_step(tc, cache)
    out = [components.measure_step(tgt, cache)["device_resident_step_median_s"] for _ in range(3)]
    print(json.dumps(out)); sys.exit(0)
V = sys.argv[1].split(",")
res = {v: [] for v in V}
for k in range(3):
    for v in (V if k % 2 == 0 else V[::-1]):
        o = subprocess.run([PY, __file__, "child", v], capture_output=True, text=True, cwd=".")
        try:
            d = json.loads(o.stdout.strip().splitlines()[-1])
        except Exception:
            print(o.stderr[-2000:]); raise
        res[v].append(d)
        print(v, k, [round(x * 1e3, 3) for x in d], flush=True)
for v in V:
    a = np.array(res[v]) * 1e3
    print(f"{v:20s} first-round median {np.median(a[:, 0]):.3f}  later {np.median(a[:, 1:]):.3f}  all {np.median(a):.3f}")
