"""3 000 steps of the fp32 MLP 32/16 x2 in one fresh process, the median of each 250: how steady a
step is on this machine over seconds. Modes: sync, async, and either with _pause (0.3 s idle every 500
steps). From the repository root:

    .venv/bin/python results/cpu-2core/holdout/forms/v23/trace.py sync
"""
import sys, time, json
import numpy as np
mode = sys.argv[1]
import jax
jax.config.update("jax_cpu_enable_async_dispatch", mode != "sync")
sys.path.insert(0, ".")
from experiments import components, sweep, heap
cfg = components.for_sweep(sweep.quick(), loader=False)
tcs = cfg.step_configs()
tgt = [tc for tc in tcs if (tc.model, tc.precision, tc.grad_accum_steps, tc.batch_size, tc.image_size) == ("mlp", "fp32", 2, 32, 16)][0]
step, batch, *_ = components._compiled_step(tgt)
if "trim" in mode: heap.release_free()
ts = []
for i in range(3000):
    t = time.perf_counter(); jax.block_until_ready(step(batch)); ts.append(time.perf_counter() - t)
    if "pause" in mode and i % 500 == 499: time.sleep(0.3)
ts = np.array(ts) * 1e3
print(mode, " ".join(f"{np.median(ts[i:i+250]):.2f}" for i in range(0, 3000, 250)))
