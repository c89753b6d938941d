"""The step's slow-down per busy worker core as the runs measured it, beside version 18's, per
configuration with workers (medians over the pairs given; each pair's own model, ``model.json``,
fitted on its study). From the rows: the step beside the loader ``T·(1 − data_wait_frac)`` (ms),
the cores the workers kept busy ``ρ = B · worker_cpu_s_per_sample / T``, and the measured coupling
``keff = (step beside the loader / S − 1) / ρ`` with ``S`` the model's step alone; ``kmod`` is the
model's own (its contended step over its step, less one, over its worker activity). ``err``: the
measured samples/s over the in-sample prediction, less one. Also each configuration's worker CPU a
sample as the model has it and as measured (µs). From the repository root:

    .venv/bin/python results/cpu-2core/holdout/design/coupling.py 174 178
"""
import sys
import warnings

import numpy as np
import pandas as pd

sys.path.insert(0, ".")
from analysis.costmodel import model as M  # noqa: E402
from analysis.costmodel.cli import read_dir  # noqa: E402

KEY = ["model", "precision", "batch_size", "image_size", "grad_accum_steps", "source", "num_workers",
       "prefetch_buffer_size", "feed", "augment_cost"]


def main(first: int, last: int):
    warnings.simplefilter("ignore")
    out = []
    for n in range(first, last + 1):
        h = f"results/cpu-2core/holdout/pair{n}/"
        m = M.load(h + "model.json")
        for part in ("study", "second"):
            r = read_dir(h + part)["rows"]
            r = r[r.status == "ok"]
            comp = M.components(m, M.measured_configs(r))
            g = r.groupby(KEY).agg(sps=("samples_per_s", "median"), wait=("data_wait_frac", "median"),
                                   wc=("worker_cpu_s_per_sample", "median")).reset_index()
            c = comp.merge(g, on=KEY)
            T = c.batch_size / c.sps
            c["part"], c["S_ms"], c["T_ms"], c["pred_T_ms"] = part, c.step_s * 1e3, T * 1e3, c.cycle_s * 1e3
            c["Sc_ms"] = T * (1 - c.wait) * 1e3
            c["rho"] = np.where(c.num_workers > 0, c.batch_size * c.wc / T, np.nan)
            c["keff"] = (c.Sc_ms / c.S_ms - 1) / c.rho
            c["kmod"] = (c.step_contended_s / c.step_s - 1) / c.worker_activity
            c["worker_us_model"] = c.loader_s_per_batch / c.batch_size * 1e6
            c["worker_us"] = c.wc * 1e6
            c["err"] = c.sps * c.cycle_s / c.batch_size - 1
            out.append(c)
    d = pd.concat(out)
    d = d[d.num_workers > 0]
    d["config"] = (d.model + " " + d.precision + " " + d.batch_size.astype(str) + "/" + d.image_size.astype(str)
                   + " x" + d.grad_accum_steps.astype(str) + " " + d.source + " nw" + d.num_workers.astype(str)
                   + " pb" + d.prefetch_buffer_size.astype(str) + " " + d.feed)
    cols = ["S_ms", "Sc_ms", "T_ms", "pred_T_ms", "rho", "keff", "kmod", "worker_us_model", "worker_us", "err"]
    pd.set_option("display.width", 250)
    print(d.groupby(["part", "config"])[cols].median().round(3).sort_values("err").to_string())


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
