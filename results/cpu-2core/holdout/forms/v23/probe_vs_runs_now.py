"""The step probe (a fresh child, three rounds) against one-configuration sweeps of the same shapes (the
runs' device-resident bound), interleaved three times on one machine. Timing: nothing else running.
From the repository root:

    .venv/bin/python results/cpu-2core/holdout/forms/v23/probe_vs_runs_now.py
"""
import json, subprocess, sys, glob
import pandas as pd, numpy as np
sys.argv = [sys.argv[0]]
PY = sys.executable
res = []
for k in range(3):
    o = subprocess.run([PY, "results/cpu-2core/holdout/forms/v23/dispatch.py", "child", "sync", str(k)], capture_output=True, text=True, cwd=".")
    d = json.loads(o.stdout.strip().splitlines()[-1])
    for s, v in d.items(): res.append({"k": k, "what": "probe", "shape": s, "ms": v * 1e3})
    for shape in [("fp32", 2, 32, 16), ("fp32", 1, 128, 16), ("fp32", 2, 128, 16), ("bf16", 1, 128, 16)]:
        q, a, b, i = shape
        root = f"/tmp/memsim-probe-vs-runs/{k}_{q}_{a}_{b}_{i}"
        subprocess.run([PY, "-m", "experiments", "sweep", "--preset", "quick", "--model=mlp", f"--precision={q}", f"--grad_accum_steps={a}",
                        f"--batch_size={b}", f"--image_size={i}", "--num_workers=0", "--prefetch_buffer_size=1", "--feed=none",
                        "--source=ram", "--augment_cost=0", "--sample_size=0", "--repeats=1", f"--results_root={root}"],
                       capture_output=True, text=True, cwd=".")
        f = glob.glob(f"{root}/**/rows.csv", recursive=True)
        r = pd.read_csv(f[0])
        res.append({"k": k, "what": "run", "shape": str(("mlp", q, a, b, i)), "ms": r.device_resident_step_median_s.median() * 1e3})
    print(pd.DataFrame(res).tail(11).to_string(), flush=True)
d = pd.DataFrame(res)
t = d.pivot_table(index="shape", columns="what", values="ms", aggfunc="median")
t["probe/run"] = t.probe / t.run
print(t.round(3).to_string())
