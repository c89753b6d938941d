"""The step probe against the runs' own device-resident step, at the shapes both measured, per pair
(``pair174``–``pair222``): log(probe's median step / the runs' median ``device_resident_step_median_s``),
the study's runs and the second sweep's. From the repository root:

    .venv/bin/python results/cpu-2core/holdout/forms/v22/probe_vs_runs.py > results/cpu-2core/holdout/forms/v22/probe_vs_runs.txt
"""
import numpy as np, pandas as pd

H = "results/cpu-2core/holdout/"
KEY = ["model", "precision", "grad_accum_steps", "batch_size", "image_size"]
s = pd.read_csv(H + "summary.csv")
s = s[s.pair.str.match(r"^pair\d+$")]
cpu = dict(zip(s.pair.str[4:].astype(int), s.cpu_model.str[:14]))
out = []
for n in range(174, 223):
    b = f"{H}pair{n}/"
    sp = pd.read_csv(b + "study/step_probe/rows.csv")
    probe = (sp.batch_size / sp.device_resident_samples_per_s).groupby([sp[k] for k in KEY]).median()
    for which in ("study", "second"):
        r = pd.read_csv(b + which + "/rows.csv")
        r = r[r.status == "ok"]
        runs = r.groupby(KEY).device_resident_step_median_s.median()
        j = pd.concat([probe.rename("probe"), runs.rename("runs")], axis=1).dropna()
        out += [{"pair": n, "cpu": cpu.get(n), "sweep": which, "shape": " ".join(map(str, k)),
                 "log_probe_over_runs": float(np.log(v.probe / v.runs))} for k, v in j.iterrows()]
d = pd.DataFrame(out)
pd.set_option("display.width", 200)
print("per CPU, sweep and shape: median [pairs]")
print(d.groupby(["cpu", "sweep", "shape"]).log_probe_over_runs.agg(["median", "count"]).round(3).to_string())
per = d[d.sweep == "study"].groupby("pair").log_probe_over_runs.median()
print(f"\nper pair, the study's shapes' median: {int((per > 0).sum())} of {len(per)} pairs above 0 (the probe slower); "
      f"median {per.median():.3f}, range {per.min():.3f} to {per.max():.3f}")
print(per.round(3).to_string())
