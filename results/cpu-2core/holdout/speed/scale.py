"""Would one number for the host's speed during the second sweep carry a study's model to it?

For each held-out pair the model is fitted on the study (as ``costmodel fit``, without intervals) and
predicts the second sweep (as ``costmodel compare``) six ways:

- ``base``: as ``compare`` does;
- ``oracle``: ``--set cpu_scale=R`` with ``R`` the second sweep's median, over its configurations,
  of the stamped stages' CPU per sample over the model's, divided by the same median over the
  study's configurations (an oracle: every configuration's own stamps are in it);
- ``loo_stage``: the same ``R`` computed without the configuration being predicted (the median over
  the second sweep's other eleven): what a reference that tracked the sweep's speed as well as its
  runs' own stamps do could give at best, without the configuration's answer in it;
- ``loo_step``: the model's step ``S`` and its loader CPU both times ``R_step``, the same
  leave-one-out median of the runs' device-resident step over the model's ``S`` (the compute side's
  speed, measured in each run's own process);
- ``loo_both``: ``S`` times ``R_step``, the loader CPU times ``R``;
- ``loo_stage_all``: ``S`` and the loader CPU both times ``R``.

It also records, per pair, the median log error of the second sweep's six grid configurations
(batch 128, 16×16, memmap, 4 passes: one loader workload) and of its six sampled ones, beside the
median log ratio of their stamped stages over the model's.

    .venv/bin/python results/cpu-2core/holdout/speed/scale.py 2 220 > results/cpu-2core/holdout/speed/scale.jsonl
    .venv/bin/python results/cpu-2core/holdout/speed/scale.py --score results/cpu-2core/holdout/speed/scale.jsonl

(two worker processes; 8 min 37 s for the 219 pairs on the 2-core AMD EPYC 25/17/1.)
"""

import json
import sys
import warnings
from multiprocessing import Pool
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.costmodel.cli import read_dir
from analysis.costmodel.evaluate import compare, summary
from analysis.costmodel.holdout import GOAL, meets
from analysis.costmodel.model import components, fit, measured_configs, predict

HOLDOUT = Path(__file__).resolve().parents[1]
WAYS = ("base", "oracle", "loo_stage", "loo_step", "loo_both", "loo_stage_all")
KEYS = ("median_abs_rel_error", "max_abs_rel_error", "kendall_tau", "n")
#: the quiet pairs: an exact model meets cross-validation's goal in more than 80% of its draws,
#: from ``intervals/summary.csv``
SUMMARY = HOLDOUT / "intervals" / "summary.csv"


def log_ratios(model, meas: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per configuration: log(measured device-resident step / the model's S) and log(stamped stages'
    CPU per sample / the model's)."""
    comp = components(model, meas)
    step = meas.batch_size.to_numpy(float) / meas.device_resident_samples_per_s.to_numpy(float)
    return (np.log(step / comp.step_s.to_numpy(float)),
            np.log(meas.cpu_stamped_s_per_sample.to_numpy(float) / comp.stage_s_per_sample.to_numpy(float)))


def leave_one_out_median(v: np.ndarray) -> np.ndarray:
    return np.array([np.median(np.delete(v, i)) for i in range(len(v))])


def scores(cmp: pd.DataFrame) -> dict:
    s = summary(cmp)
    return {k: s[k] for k in KEYS}


def one(n: int) -> dict:
    warnings.filterwarnings("ignore")
    study, second = HOLDOUT / f"pair{n}" / "study", HOLDOUT / f"pair{n}" / "second"
    if not (study / "rows.csv").is_file() or not (second / "rows.csv").is_file():
        return {"pair": n, "missing": True}
    d, s2 = read_dir(str(study)), read_dir(str(second))
    model = fit(d["rows"], d["probes"], d["steps"], d["step_probe"], sources=[str(study)],
                stage_probe=d["stage_probe"], worker_probe=d["worker_probe"])
    m1, m2 = measured_configs(d["rows"]), measured_configs(s2["rows"])
    step1, stage1 = log_ratios(model, m1)
    step2, stage2 = log_ratios(model, m2)
    r_stage = np.exp(leave_one_out_median(stage2) - np.median(stage1))
    r_step = np.exp(leave_one_out_median(step2) - np.median(step1))
    r_oracle = np.full(len(m2), np.exp(np.median(stage2) - np.median(stage1)))
    S = components(model, m2).step_s.to_numpy(float)
    ways = {"oracle": (None, r_oracle), "loo_stage": (None, r_stage), "loo_step": (r_step, r_step),
            "loo_both": (r_step, r_stage), "loo_stage_all": (r_stage, r_stage)}
    out = {"pair": n}
    base = predict(model, m2, level=None)
    base["config_id"] = m2.config_id.to_numpy()
    cmp = compare(s2["rows"], base)
    out["base"] = scores(cmp)
    for name, (step_r, cpu_r) in ways.items():
        preds = [predict(model, m2.iloc[[i]], level=None, cpu_scale=float(cpu_r[i]),
                         step_s=None if step_r is None else [S[i] * step_r[i]]) for i in range(len(m2))]
        p = pd.concat(preds, ignore_index=True)
        p["config_id"] = m2.config_id.to_numpy()
        out[name] = scores(compare(s2["rows"], p))
    grid = ((m2.batch_size == 128) & (m2.image_size == 16) & (m2.source == "memmap")
            & (m2.augment_cost == 4)).to_numpy()
    err = np.log(cmp.predicted.to_numpy(float) / cmp.measured.to_numpy(float))
    out["grid"] = {"error": float(np.median(err[grid])), "stage": float(np.median(stage2[grid])),
                   "sampled_error": float(np.median(err[~grid])), "sampled_stage": float(np.median(stage2[~grid])),
                   "R_oracle": float(r_oracle[0]), "R_step": float(np.median(r_step))}
    return out


def score(path: str) -> None:
    rs = [json.loads(line) for line in open(path)]
    rs = [r for r in rs if "base" in r]
    quiet = set()
    if SUMMARY.is_file():
        s = pd.read_csv(SUMMARY)
        quiet = {int(p[len("pair"):]) for p in s[s.cv_floor_p_goal > 0.8].pair if str(p).startswith("pair")}
    spans = [(2, 78), (79, 151), (152, 10**6)]
    print(f"pairs meeting the comparison's goal ({GOAL}), of {len(rs)}; quiet: of those an exact model "
          f"meets cross-validation in more than 80% of draws")
    head = "| way | all | quiet | " + " | ".join(f"pair{a}–{b if b < 10**6 else 'last'}" for a, b in spans) + \
        " | medians over pairs: median / max |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for w in WAYS:
        ok = {r["pair"]: meets(r[w]) for r in rs}
        q = [ok[p] for p in ok if p in quiet]
        per = [sum(ok[p] for p in ok if a <= p <= b) for a, b in spans]
        med = np.median([r[w]["median_abs_rel_error"] for r in rs])
        mx = np.median([r[w]["max_abs_rel_error"] for r in rs])
        print(f"| {w} | {sum(ok.values())} | {sum(q)} of {len(q)} | " + " | ".join(map(str, per))
              + f" | {med:.1%} / {mx:.1%} |")
    g = pd.DataFrame([r["grid"] for r in rs])
    print(f"\nper pair (sd over {len(g)} pairs): the grid's median log error {g.error.std():.3f}, the sampled "
          f"configurations' {g.sampled_error.std():.3f}; correlation of the grid's error with its own stamped "
          f"stages over the model's {np.corrcoef(g.error, g.stage)[0, 1]:.2f}, with the sampled configurations' "
          f"stamped stages {np.corrcoef(g.error, g.sampled_stage)[0, 1]:.2f}; the grid's stages with the "
          f"sampled ones' {np.corrcoef(g.stage, g.sampled_stage)[0, 1]:.2f}; R_oracle p10–p90 "
          f"{g.R_oracle.quantile(0.1):.3f}–{g.R_oracle.quantile(0.9):.3f}")


if __name__ == "__main__":
    if sys.argv[1] == "--score":
        score(sys.argv[2])
        sys.exit(0)
    lo, hi = int(sys.argv[1]), int(sys.argv[2])
    with Pool(2) as pool:
        for r in pool.imap(one, range(lo, hi + 1)):
            if not r.get("missing"):
                print(json.dumps(r), flush=True)
