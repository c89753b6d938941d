"""The step probe's measure_step in fresh child processes with JAX's CPU dispatch synchronous (as the
probe) or asynchronous (as the runs), alternated, seven of the quick study's shapes, three rounds each
("Version 23" in the holdout README). Timing: run it with nothing else running. From the repository root:

    .venv/bin/python results/cpu-2core/holdout/forms/v23/dispatch.py 4
"""
import json, subprocess, sys, os, time
import numpy as np
MODES = ["sync", "async", "sync", "async"]
SHAPES = [("mlp","fp32",2,32,16), ("mlp","fp32",1,128,16), ("mlp","fp32",2,128,16), ("mlp","fp32",1,64,32), ("mlp","bf16",1,128,16), ("cnn","fp32",1,32,48), ("mlp","bf16",2,32,48)]
if len(sys.argv) > 1 and sys.argv[1] == "child":
    mode = sys.argv[2]
    import jax
    jax.config.update("jax_cpu_enable_async_dispatch", mode != "sync")
    sys.path.insert(0, ".")
    from experiments import components, sweep
    cfg = components.for_sweep(sweep.quick(), loader=False)
    tcs = [tc for tc in cfg.step_configs() if (tc.model, tc.precision, tc.grad_accum_steps, tc.batch_size, tc.image_size) in SHAPES]
    cache = {}
    out = {}
    rng = np.random.default_rng(int(sys.argv[3]))
    for rep in range(3):
        for i in rng.permutation(len(tcs)):
            tc = tcs[i]
            r = components.measure_step(tc, cache)
            out.setdefault(str((tc.model, tc.precision, tc.grad_accum_steps, tc.batch_size, tc.image_size)), []).append(r["device_resident_step_median_s"])
    print(json.dumps({k: float(np.median(v)) for k, v in out.items()}))
    sys.exit(0)
res = []
for k in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    for j, m in enumerate(MODES[:2] if k % 2 == 0 else MODES[:2][::-1]):
        o = subprocess.run([sys.executable, __file__, "child", m, str(k)], capture_output=True, text=True, cwd=".")
        d = json.loads(o.stdout.strip().splitlines()[-1])
        res.append({"mode": m, "k": k, **d})
        print(m, k, {kk: round(v * 1e3, 3) for kk, v in d.items()}, flush=True)
import pandas as pd
df = pd.DataFrame(res)
pd.set_option("display.width", 250)
med = df.groupby("mode").median(numeric_only=True).drop(columns="k").T * 1e3
med["async/sync"] = med["async"] / med["sync"]
print(med.round(3).to_string())
