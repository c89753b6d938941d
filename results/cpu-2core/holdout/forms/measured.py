"""The measured tables of the holdout README's section "The workers' coupling from the step probe's
cores, and a worker's CPU while it waits", from the committed rows of ``pairLO``–``pairHI``. From the
repository root:

    .venv/bin/python results/cpu-2core/holdout/forms/measured.py 79 151   # coupling, idle CPU, no-worker rest
    .venv/bin/python results/cpu-2core/holdout/forms/measured.py 52 78    # the AMD EPYC 25/17/1 (its idle-CPU fit)
    .venv/bin/python results/cpu-2core/holdout/forms/measured.py 2 51     # the earliest pairs (their idle-CPU fit)

- ``coupling``: runs with workers; ``c = (Sc/S − 1)/u`` (the step beside the workers over the step alone,
  less 1, per unit of the workers' CPU over the cycle) and the cell's parallel share ``s`` from the
  step probe's ``resident_cpu_cores``; then least-squares fits of ``log c``.
- ``idle``: a worker's CPU per sample beyond its stamped stages against the wall time it spends on
  each sample it makes (``num_workers / samples_per_s``).
- ``steps``: the configurations' CV between repeats, each run's throughput from its own steps.
- ``rest``: runs without workers, the loader's work per sample beyond its stamps,
  ``(T − o − γ·Sc)/B − stage_main_scale · stamps``, at each pair's fitted ``o``, ``γ``.
"""
import json, os, sys
import numpy as np, pandas as pd
sys.path.insert(0, ".")
from analysis.costmodel.model import _cpu_stamped
H = "results/cpu-2core/holdout/"
CFG = ["part", "model", "precision", "grad_accum_steps", "batch_size", "image_size", "source", "augment_cost"]


def runs(lo, hi):
    out = []
    for n in range(lo, hi + 1):
        for part in ("study", "second"):
            f = f"{H}pair{n}/{part}/rows.csv"
            if os.path.exists(f):
                r = pd.read_csv(f)
                out.append(r[r.status == "ok"].assign(pair=n, part=part, st=lambda x: _cpu_stamped(x)))
    return pd.concat(out, ignore_index=True)


def cell_cores(n):
    sp = pd.read_csv(f"{H}pair{n}/study/step_probe/rows.csv")
    if "resident_cpu_cores" not in sp:
        return {}
    return sp[sp.status == "ok"].groupby(["model", "precision", "grad_accum_steps"]).resident_cpu_cores.median().to_dict()


def fit(y, *xs):
    X = np.column_stack([np.ones(len(y)), *xs])
    b = np.linalg.lstsq(X, y, rcond=None)[0]
    return b, float(np.sqrt(np.mean((y - X @ b) ** 2)))


def coupling(r):
    w = r[r.num_workers > 0].copy()
    T = w.batch_size / w.samples_per_s
    S = w.device_resident_step_median_s
    u = w.batch_size * w.worker_cpu_s_per_sample / T
    cores = {n: cell_cores(n) for n in w.pair.unique()}
    rc = [cores[n].get((m, q, a), np.nan) for n, m, q, a in zip(w.pair, w.model, w.precision, w.grad_accum_steps)]
    w = w.assign(S_ms=1e3 * S, s=(np.asarray(rc) - 1).clip(0.05, 1), u=u, c=(T * (1 - w.data_wait_frac) / S - 1) / u)
    w = w[np.isfinite(w.c) & (w.c > 0) & np.isfinite(w.s)]
    g = w.groupby(CFG[1:] + ["num_workers"])[["S_ms", "s", "u", "c"]].median()
    g["c/s"] = g.c / g.s
    print(g.round(3).to_string())
    y = np.log(w.c.to_numpy())
    for name, xs in (("s", [np.log(w.s)]), ("step", [np.log(w.S_ms)]), ("s, step, u", [np.log(w.s), np.log(w.S_ms), np.log(w.u)])):
        b, rms = fit(y, *xs)
        print(f"log c on log {name}: coefficients {np.round(b, 3)}, rms {rms:.3f}")


def idle(r):
    w = r[r.num_workers > 0]
    w = w.assign(rest_us=1e6 * (w.worker_cpu_s_per_sample - w.st), wall_us=1e6 * w.num_workers / w.samples_per_s)
    w = w[np.isfinite(w.rest_us) & np.isfinite(w.wall_us)]
    print(w.groupby(CFG + ["num_workers"])[["wall_us", "rest_us"]].median().round(1).to_string())
    b, _ = fit(w.rest_us.to_numpy(), w.wall_us.to_numpy())
    print(f"rest = {b[0]:.1f} µs + {b[1]:.4f} × wall; correlation {np.corrcoef(w.wall_us, w.rest_us)[0, 1]:.3f}")


def steps(lo, hi):
    stats = {"mean": np.mean, "median": np.median, "p25": lambda z: np.quantile(z, 0.25), "p10": lambda z: np.quantile(z, 0.10)}
    out = []
    for n in range(lo, hi + 1):
        for part in ("study", "second"):
            d = f"{H}pair{n}/{part}/"
            if not os.path.exists(d + "steps.csv"):
                continue
            s = pd.read_csv(d + "steps.csv")
            s = s[(s.phase == "fed") & ~s.warmup.astype(bool)].groupby(["config_id", "repeat"]).step_time_s
            r = pd.read_csv(d + "rows.csv")
            t = r[r.status == "ok"].groupby("config_id").samples_per_s
            row = {"part": part, "samples/s": (t.std() / t.mean()).median()}
            for k, f in stats.items():
                x = 1 / s.apply(f).unstack().dropna()
                row[k] = (x.std(axis=1, ddof=1) / x.mean(axis=1)).median()
            out.append(row)
    print(pd.DataFrame(out).groupby("part").median().round(4).to_string())


def rest(r):
    out = []
    for n, x in r[r.num_workers == 0].groupby("pair"):
        p = json.load(open(f"{H}pair{n}/model.json"))["params"]
        T = x.batch_size / x.samples_per_s
        L = T - p["batch_overhead_s"] - p["main_overlap_loss"] * T * (1 - x.data_wait_frac)
        out.append(x.assign(rest_us=1e6 * (L / x.batch_size - p["stage_main_scale"] * x.st),
                            sample_base_us=1e6 * p["sample_base_s"]))
    d = pd.concat(out)
    print(d.groupby(CFG + ["feed", "prefetch_buffer_size"])[["rest_us", "sample_base_us", "data_wait_frac"]]
          .median().round(1).to_string())


if __name__ == "__main__":
    lo, hi = (int(a) for a in sys.argv[1:3])
    pd.set_option("display.width", 250)
    r = runs(lo, hi)
    for name, f in (("coupling", lambda: coupling(r)), ("idle", lambda: idle(r)), ("steps", lambda: steps(lo, hi)),
                    ("rest", lambda: rest(r))):
        print(f"== {name}")
        f()
