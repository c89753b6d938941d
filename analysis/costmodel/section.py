"""The study report's "Predicted vs measured" and "What if" sections, the calibrated part of its
"Simulation" section, and their figures.

"Predicted vs measured" calibrates the cost model on part of the study's own sweep and predicts
the rest (random K-fold over configurations), so every number in it is a held-out prediction of
this run's measurements; it also fits on everything and prints the parameter table. "What if"
predicts the fastest measured configuration with workers changed and with the step moved to an
accelerator preset, each beside the calibrated baseline, extrapolation flagged. The Simulation
section's "Calibrated" part (:func:`calibrated_simulation`) sets the simulator calibrated on the whole
sweep beside the uncalibrated one, configuration by configuration and along the measured worker curve.
"""

from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from analysis.costmodel.evaluate import (compare, cross_validate, heldout_record, noise_floor, noise_verdict, summary,  # noqa: E402
                                         whatif, worst)
from analysis.costmodel.features import CostModelError  # noqa: E402
from analysis.costmodel.model import (INTERVAL_LEVEL, components, fit, interval_halfwidth, interval_rank,  # noqa: E402
                                      measured_configs, predict, transfer_from_probes)
from analysis.figures import save  # noqa: E402
from experiments.results import repeatability  # noqa: E402
from analysis.tables import md_table  # noqa: E402

PRED_FILE = "costmodel_predicted_vs_measured.png"
PARTS_FILE = "costmodel_step_parts.png"
WORKERS_FILE = "simulation_calibrated_workers.png"
FOLDS = 5


def predicted_figure(cmp: pd.DataFrame) -> Figure:
    """Predicted against measured samples/s, log-log, y = x with a ±10% band, measured intervals
    as error bars, coloured by the predicted bottleneck."""
    fig, ax = plt.subplots(figsize=(5.5, 5))
    lo = float(min(cmp.measured_lo.min(), cmp.predicted.min())) * 0.8
    hi = float(max(cmp.measured_hi.max(), cmp.predicted.max())) * 1.25
    xs = np.geomspace(lo, hi, 50)
    ax.fill_between(xs, xs * 0.9, xs * 1.1, color="0.9", label="±10%")
    ax.plot(xs, xs, color="0.5", lw=1)
    for i, (b, g) in enumerate(cmp.groupby("bottleneck")):
        ax.errorbar(g.measured, g.predicted, xerr=[g.measured - g.measured_lo, g.measured_hi - g.measured],
                    fmt="o", color=f"C{i}", label=str(b), capsize=2)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured samples/s (median, interval)",
           ylabel="predicted samples/s (held out)", title="Cost model: held-out predictions")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def parts_figure(comp: pd.DataFrame, labels: list[str]) -> Figure:
    """Stacked bars: where each configuration's cycle goes (step, its slow-down by the workers,
    main-thread work, loader time not hidden behind the step)."""
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(comp) + 2), 4))
    T = comp.cycle_s.to_numpy() * 1e3
    step = comp.step_s.to_numpy() * 1e3
    slow = (comp.step_contended_s - comp.step_s).to_numpy() * 1e3
    over = np.full(len(comp), comp.overhead_s.iloc[0] * 1e3)
    rest = np.clip(T - step - slow - over, 0, None)
    x = np.arange(len(comp))
    bottom = np.zeros(len(comp))
    for vals, name in ((step, "step alone"), (slow, "step slowed by workers"), (over, "main-thread work"),
                       (rest, "waiting for input / CPU sharing")):
        ax.bar(x, vals, bottom=bottom, label=name)
        bottom += vals
    ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=7)
    ax.set(ylabel="ms per step (predicted)", title="Where each step's time goes (calibrated model)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _inputs(study):
    """(rows, probe rows, steps, step probe, stage probe, worker probe) of an
    ``analysis.report.StudyResults``. The loader probe is not read: see
    :func:`analysis.costmodel.model.fit`."""
    from experiments.results import read_csv_rows

    def opt(rel):
        f = study.path / rel
        return read_csv_rows(f) if f.is_file() else None
    return (study.runs, study.probe_raw, opt("steps.csv"), opt("step_probe/rows.csv"), opt("stage_probe/rows.csv"),
            opt("worker_probe/rows.csv"))


#: the last study calibrated: (its runs frame, its calibration). Both sections read one calibration
#: of a report rebuild; each calibration is FOLDS + 1 fits (about 9 s for the quick study).
_LAST: list = [None, None]


def _calibration(study) -> dict:
    """``{"meas", "model", "cmp", "folds"}`` of ``study`` (fitted once per loaded study), or
    ``{"message": why not}`` when it has no rows or cannot be calibrated."""
    if study.runs is None or not len(study.runs):
        return {"message": "No measured rows: nothing to calibrate on."}
    if _LAST[0] is study.runs:
        return _LAST[1]
    rows, probes, steps, step_probe, stage_probe, worker_probe = _inputs(study)
    try:
        meas = measured_configs(rows)
        folds = min(FOLDS, len(meas))
        transfer = transfer_from_probes(probes)
        model = fit(rows, steps=steps, transfer=transfer, sources=[str(study.path)], step_probe=step_probe,
                    stage_probe=stage_probe, worker_probe=worker_probe)
        both = cross_validate(rows, kind="kfold", folds=folds, steps=steps, transfer=transfer,
                              step_probe=step_probe, stage_probe=stage_probe, step="both",
                              worker_probe=worker_probe)
        cmp = both[both.step == "predicted"].drop(columns="step").reset_index(drop=True)
        cmp_step = both[both.step == "measured"].drop(columns="step").reset_index(drop=True)
        # the calibration's prediction intervals, sized by these held-out errors as 'costmodel fit' sizes them
        model.heldout = heldout_record(cmp, folds=folds)
        out = {"meas": meas, "model": model, "cmp": cmp, "cmp_step": cmp_step, "folds": folds,
               "floor": noise_floor(rows, cmp.config_id, observed=summary(cmp)),
               "probed": step_probe is not None, "stage_probed": stage_probe is not None,
               "worker_probed": model.stats.get("worker_probe_shapes", 0) > 0}
    except CostModelError as e:
        out = {"message": f"The cost model could not be calibrated on this study: {e}"}
    _LAST[:] = [study.runs, out]
    return out


def calibrated_model(study):
    """The cost model calibrated on all of ``study``'s measured rows (the one "Predicted vs measured"
    prints), or None when the study cannot be calibrated."""
    return _calibration(study).get("model")


def _label(r) -> str:
    return f"{r.model} b{r.batch_size} i{r.image_size} w{r.num_workers} {r.feed}"


def predicted_section(study) -> str:
    lines = ["## Predicted vs measured", ""]
    c = _calibration(study)
    if "message" in c:
        return "\n".join(lines + [c["message"]])
    meas, model, cmp, folds = c["meas"], c["model"], c["cmp"], c["folds"]
    s, s2 = summary(cmp), summary(c["cmp_step"])
    goal = s["median_abs_rel_error"] <= 0.05 and s["max_abs_rel_error"] <= 0.15 and s["kendall_tau"] >= 0.8
    probed = ("The step probe (`step_probe/`: the step alone, per model, precision and accumulation) enters the "
              "calibration and anchors the step: a shape it measured is predicted at its own measured step, "
              "another at the fitted form corrected by its probed neighbours; a held-out configuration's own "
              "step shape is held out of it."
              if c["probed"] else "This study has no step probe (`step_probe/`); the step is calibrated on the "
              "sweep's rows alone.")
    probed += (" The stage probe (`stage_probe/`: the loader's read, decode and augmentation alone, per source, "
               "image size and augmentation cost) gives the stages' shape, and the rows how the pipeline inflates "
               "them; a held-out configuration's own combination is held out of it."
               if c.get("stage_probed") else "")
    probed += (" The worker probe (`worker_probe/`: one loader worker feeding a step too small to wait for, at the "
               "sweep's smallest and largest batch and image sizes) gives the worker's CPU outside its stamped "
               "stages; a held-out configuration's own loader shape and batch size are held out of it."
               if c.get("worker_probed") else "")
    lines += [f"The cost model (`analysis.costmodel`) was calibrated on part of this sweep and predicted the "
              f"rest: {folds}-fold cross-validation over its {s['n']} configurations, each prediction made by a "
              f"model that never saw that configuration. Held-out **median |rel error| "
              f"{s['median_abs_rel_error']:.1%}, max {s['max_abs_rel_error']:.1%}, Kendall τ "
              f"{s['kendall_tau']:.2f}**; {s['within_noise']} of {s['n']} predictions fall inside the measured "
              f"interval. The goal (median ≤ 5%, max ≤ 15%, τ ≥ 0.8) is "
              + ("met." if goal else "**not met**.") + " " + probed, "",
              f"With each held-out configuration's own measured step (its device-resident bound, a "
              f"step-alone measurement of seconds) in place of the step model, so that only the pipeline "
              f"around the step is predicted: median {s2['median_abs_rel_error']:.1%}, max "
              f"{s2['max_abs_rel_error']:.1%}, τ {s2['kendall_tau']:.2f}"
              + (f"; what the step model adds to each held-out error on top of that (the ratio of the two "
                 f"predictions): median {s['median_abs_step_part']:.1%}, max {s['max_abs_step_part']:.1%}"
                 if "median_abs_step_part" in s else "")
              + f". For scale: the sweep's own repeats "
              f"vary by a median CV of {repeatability(meas):.1%} (samples/s), and no prediction can be "
              f"checked more tightly than its measurement."
              + (f" A model that predicted every configuration exactly would score a median "
                 f"{c['floor']['median_abs_rel_error']:.1%}, max {c['floor']['max_abs_rel_error']:.1%}, τ "
                 f"{c['floor']['kendall_tau']:.2f} against these measurements, and meet the goal in "
                 f"{c['floor']['p_goal']:.0%} of {c['floor']['draws']} draws of their noise (one run's: "
                 f"{c['floor']['noise_sd']:.1%} rms of log samples/s, pooled from the repeats; "
                 f"`analysis.costmodel.evaluate.noise_floor`): the check's noise floor. The exact model errs "
                 f"as much as this model's held-out median in {c['floor']['p_median']:.0%} of the draws and as "
                 f"much as its max in {c['floor']['p_max']:.0%}: the model's median error is "
                 f"{noise_verdict(c['floor']['p_median'])} the measurements' noise, its max "
                 f"{noise_verdict(c['floor']['p_max'])} it."
                 if c.get("floor") else ""), "",
              _interval_text(model), "",
              f"Reproduce: `python -m analysis costmodel cv {study.path} --json` (add `--step measured` for "
              f"the second).", "",
              f"![predicted vs measured]({PRED_FILE})", ""]
    save(predicted_figure(cmp), study.path / PRED_FILE)
    w = worst(cmp)
    lines += ["Worst held-out predictions:", "",
              md_table(pd.DataFrame({"configuration": [_label(r) for _, r in w.iterrows()],
                                     "measured": [f"{r.measured:.0f} [{r.measured_lo:.0f}, {r.measured_hi:.0f}]"
                                                  for _, r in w.iterrows()],
                                     "predicted": [f"{v:.0f}" for v in w.predicted],
                                     "rel error": [f"{v:+.1%}" for v in w.rel_error],
                                     "bottleneck": w.bottleneck, "reason": [r or "–" for r in w.reason]})), ""]
    t = model.table
    lines += [f"Fitted on all {model.stats['n_configs']} configurations (in-sample median |rel error| "
              f"{model.stats['median_abs_rel_error']:.1%}, R² of log samples/s "
              f"{model.stats['r2_log_samples_per_s']:.3f}):", "",
              md_table(pd.DataFrame({"param": t.param, "value": [f"{v:.4g}" for v in t.value],
                                     "stderr": [f"{v:.2g}" if np.isfinite(v) else "–" for v in t.stderr],
                                     "95% interval": [f"[{a:.3g}, {b:.3g}]" if np.isfinite(a) else (n or "–")
                                                      for a, b, n in zip(t.lo, t.hi, t.note)],
                                     "meaning": t.description})), ""]
    comp = components(model, meas)
    save(parts_figure(comp, [_label(r) for _, r in comp.iterrows()]), study.path / PARTS_FILE)
    lines += [f"![where the step's time goes]({PARTS_FILE})", ""]
    return "\n".join(lines)


def _interval_text(model) -> str:
    """A sentence on the prediction intervals the held-out errors size (``What if`` prints them)."""
    e = model.heldout.get("abs_log_errors") or []
    if not len(e):
        return ""
    q = interval_halfwidth(e, INTERVAL_LEVEL)
    if not np.isfinite(q):
        return (f"With {len(e)} configurations held out, no {INTERVAL_LEVEL:.0%} prediction interval can be "
                f"sized from them.")
    return (f"These held-out errors size the model's prediction intervals (split-conformal, "
            f"`analysis.costmodel.model.interval_halfwidth`): a configuration like the held-out ones, not measured, "
            f"lies within ×/÷ {np.exp(q):.3f} of its prediction with probability about {INTERVAL_LEVEL:.0%} (the "
            f"{interval_rank(len(e), INTERVAL_LEVEL)}th smallest of the {len(e)} held-out "
            f"errors). On the second sweeps of the 2-core CPU's held-out pairs the measured medians fell inside "
            f"such intervals about as often as the level says (`results/cpu-2core/holdout/README.md`, \"Prediction "
            f"intervals\").")


def _span(row, table) -> str:
    """`` [lo, hi]`` of a predicted row where it has a prediction interval, else ''."""
    return (f" [{row.samples_per_s_lo:.0f}, {row.samples_per_s_hi:.0f}]"
            if "samples_per_s_lo" in table and np.isfinite(row.samples_per_s_lo) else "")


def whatif_section(study) -> str:
    lines = ["## What if", ""]
    c = _calibration(study)
    if "message" in c:
        return "\n".join(lines + [c["message"]])
    meas, model = c["meas"], c["model"]
    base = meas.sort_values("samples_per_s", ascending=False).head(1).reset_index(drop=True)
    cases = [({"num_workers": n}, None, None) for n in (0, 1, 2, 4)]
    cases += [({}, "h100_sxm", None), ({"num_workers": 8}, "h100_sxm", 16)]
    recs = []
    for changes, hier, cores in cases:
        t = whatif(model, base, changes, hierarchy=hier, cpu_count=cores)
        w = t.iloc[1]
        what = ", ".join([f"{k}={v}" for k, v in changes.items()] + ([f"hierarchy={hier}"] if hier else [])
                         + ([f"cpu_count={cores}"] if cores else []))
        recs.append({"what if": what, "samples/s": f"{w.samples_per_s:.0f}{_span(w, t)}", "× baseline": f"{w.speedup:.2f}",
                     "stall": f"{w.stall_frac:.0%}", "grade": w.input_bound, "bottleneck": w.bottleneck,
                     "extrapolated": w.extrapolated or "–"})
    b = t.iloc[0]
    lines += [f"Baseline: the fastest measured configuration ({_label(base.iloc[0])}), measured "
              f"{base.samples_per_s.iloc[0]:.0f} samples/s, predicted {b.samples_per_s:.0f}{_span(b, t)}"
              + f" (bottleneck {b.bottleneck}, {b.input_bound}). Each row changes the baseline as named; "
              f"anything outside the measured range is flagged, never hidden"
              + (f"; [lo, hi] is the {INTERVAL_LEVEL:.0%} prediction interval (\"Predicted vs measured\"), none for "
                 f"an extrapolated row" if "samples_per_s_lo" in t else "") + ". Reproduce: "
              f"`python -m analysis costmodel fit {study.path} --out MODEL.json` then "
              f"`python -m analysis whatif MODEL.json --set hierarchy=h100_sxm`.", "",
              md_table(pd.DataFrame(recs)), ""]
    return "\n".join(lines)


def _full_label(r) -> str:
    """Every knob the sweep varies: model, source, precision, batch × micro-batches, image, augmentation
    passes, workers, prefetch, feed."""
    return (f"{r.model} {r.source} {r.precision} b{r.batch_size}×{r.grad_accum_steps} i{r.image_size} "
            f"a{r.augment_cost} w{r.num_workers} p{r.prefetch_buffer_size} {r.feed}")


def worker_curve(meas: pd.DataFrame) -> tuple[dict, pd.DataFrame] | None:
    """The measured configurations that differ only in ``num_workers``, the longest such run (ties:
    the fastest): (the knobs they share, their rows sorted by workers); None when no two
    configurations differ only in their workers."""
    knobs = [k for k in ("model", "batch_size", "image_size", "augment_cost", "source", "precision",
                         "grad_accum_steps", "prefetch_buffer_size", "feed") if k in meas]
    if "num_workers" not in meas or not knobs:
        return None
    best = None
    for key, g in meas.groupby(knobs, dropna=False, sort=False):
        if g.num_workers.nunique() < 2:
            continue
        rank = (g.num_workers.nunique(), float(g.samples_per_s.max()))
        if best is None or rank > best[0]:
            best = (rank, dict(zip(knobs, key if isinstance(key, tuple) else (key,))), g)
    return None if best is None else (best[1], best[2].sort_values("num_workers").reset_index(drop=True))


def workers_figure(curve: pd.DataFrame, measured: pd.DataFrame, title: str) -> Figure:
    """samples/s against num_workers: measured (median, interval), the calibrated simulator's
    prediction (extrapolated worker counts hollow) and the uncalibrated simulation where it exists."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.errorbar(measured.num_workers, measured.samples_per_s,
                yerr=[measured.samples_per_s - measured.samples_per_s_lo,
                      measured.samples_per_s_hi - measured.samples_per_s],
                fmt="o", color="k", capsize=3, label="measured (median, interval over repeats)")
    ax.plot(curve.num_workers, curve.samples_per_s, "-", color="C0", label="calibrated simulator")
    inside = curve.extrapolated.astype(str) == ""
    ax.plot(curve.num_workers[inside], curve.samples_per_s[inside], "o", color="C0")
    ax.plot(curve.num_workers[~inside], curve.samples_per_s[~inside], "o", mfc="white", color="C0",
            label="calibrated, outside the measured range")
    unc = measured.dropna(subset=["uncalibrated"])
    if len(unc):
        ax.plot(unc.num_workers, unc.uncalibrated, "x", color="C3", ms=8, mew=2, label="uncalibrated simulator")
    ax.set(xlabel="num_workers", ylabel="samples/s", ylim=(0, None))
    ax.set_title("\n".join(textwrap.wrap(title, 70)), fontsize=8)
    ax.set_xticks(curve.num_workers)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def calibrated_simulation(study, uncalibrated: pd.DataFrame | None) -> str:
    """The "### Calibrated" part of the Simulation section: the simulator with the parameters the
    cost model fitted on every configuration of the sweep, beside the uncalibrated simulation.

    Args:
        study: an ``analysis.report.StudyResults``.
        uncalibrated: per measured row, ``config_id`` and ``simulated samples/s`` and ``bottleneck`` of
            the uncalibrated simulation (``analysis.simulation.measured_vs_simulated``), or None.

    Returns:
        Markdown: a summary of the three errors (uncalibrated, calibrated in-sample, held out), a table
        per configuration, and the measured worker curve against both simulators (figure
        ``simulation_calibrated_workers.png``).
    """
    lines = ["### Calibrated", ""]
    c = _calibration(study)
    if "message" in c:
        return "\n".join(lines + [c["message"], ""])
    meas, model, held = c["meas"], c["model"], c["cmp"]
    fitted = compare(meas, predict(model, meas))
    table = pd.DataFrame({"configuration": [_full_label(r) for _, r in meas.iterrows()],
                          "measured": [f"{r.samples_per_s:.0f} [{r.samples_per_s_lo:.0f}, {r.samples_per_s_hi:.0f}]"
                                       for _, r in meas.iterrows()]})
    unc_err = None
    meas = meas.assign(uncalibrated=np.nan, uncalibrated_bottleneck="")
    if uncalibrated is not None and len(uncalibrated) and "config_id" in uncalibrated:
        g = uncalibrated.groupby("config_id")
        sim = g["simulated samples/s"].median()
        meas["uncalibrated"] = meas.config_id.map(sim).to_numpy(float)
        meas["uncalibrated_bottleneck"] = meas.config_id.map(g["bottleneck"].agg(lambda b: b.mode().iloc[0])).fillna("")
        unc_err = (meas.uncalibrated / meas.samples_per_s - 1).to_numpy(float)
        table["uncalibrated"] = [f"{v:.0f} ({e:+.0%})" if np.isfinite(v) else "–"
                                 for v, e in zip(meas.uncalibrated, unc_err)]
    held = held.set_index("config_id").reindex(meas.config_id)
    table["calibrated on all"] = [f"{v:.0f} ({e:+.0%})" for v, e in zip(fitted.predicted, fitted.rel_error)]
    table["held out"] = [f"{v:.0f} ({e:+.0%})" for v, e in zip(held.predicted, held.rel_error)]
    table["bottleneck"] = [f"{u} → {b}" if u else str(b)
                           for u, b in zip(meas.uncalibrated_bottleneck, fitted.bottleneck)]
    s_fit, s_held = summary(fitted), summary(held.reset_index())
    text = ("The same simulator with the parameters the cost model (`analysis.costmodel`) fitted on every "
            "configuration of this sweep: the loader's CPU time per sample and per augmentation pass, the "
            "read cost of each source, the step's FLOP rate per model and precision, the main thread's work "
            "per batch, and the CPU contention between the loader's workers and the step (processor "
            "sharing over the host's cores), with the measured step-time jitter. ")
    if unc_err is not None and np.isfinite(unc_err).any():
        e = np.abs(unc_err[np.isfinite(unc_err)])
        text += (f"Uncalibrated, each configuration simulated with its own measured service times: median "
                 f"|rel error| {np.median(e):.1%}, max {e.max():.1%}. ")
    text += (f"Calibrated: **{s_fit['median_abs_rel_error']:.1%}** median, max {s_fit['max_abs_rel_error']:.1%}, "
             f"Kendall τ {s_fit['kendall_tau']:.2f} on the configurations it was fitted on; on configurations "
             f"held out of the fit ({c['folds']}-fold, \"Predicted vs measured\") {s_held['median_abs_rel_error']:.1%} "
             f"median, max {s_held['max_abs_rel_error']:.1%}: the held-out number is the one to trust for a "
             f"configuration not measured. Bottlenecks are the uncalibrated simulator's → the calibrated one's.")
    lines += [text, "", md_table(table), ""]
    wc = worker_curve(meas)
    if wc is None:
        lines += ["No two measured configurations differ only in `num_workers`: no worker curve to check.", ""]
        return "\n".join(lines)
    fixed, pts = wc
    grid = pd.DataFrame([{**pts.iloc[0].to_dict(), "num_workers": n}
                         for n in range(0, max(int(pts.num_workers.max()) + 2, 2 * model.cpu_count) + 1)])
    curve = predict(model, grid)
    name = ", ".join(f"{k}={v}" for k, v in fixed.items())
    save(workers_figure(curve, pts, f"Worker curve: {name}"), study.path / WORKERS_FILE)
    at = curve.set_index("num_workers").samples_per_s
    desc = []
    for a, b in zip(pts.itertuples(), pts.iloc[1:].itertuples()):
        overlap = not (a.samples_per_s_hi < b.samples_per_s_lo or b.samples_per_s_hi < a.samples_per_s_lo)
        m_dir = "within noise" if overlap else ("faster" if b.samples_per_s > a.samples_per_s else "slower")
        p_dir = "faster" if at[b.num_workers] > at[a.num_workers] else "slower"
        u_dir = ("–" if not (np.isfinite(a.uncalibrated) and np.isfinite(b.uncalibrated))
                 else "faster" if b.uncalibrated > a.uncalibrated else "slower")
        desc.append(f"{a.num_workers} → {b.num_workers} workers: measured {m_dir} "
                    f"({a.samples_per_s:.0f} → {b.samples_per_s:.0f}), calibrated {p_dir} "
                    f"({at[a.num_workers]:.0f} → {at[b.num_workers]:.0f}), uncalibrated {u_dir}")
    lines += [f"The measured worker curve ({name}) against both simulators; the calibrated one continues to "
              f"{int(curve.num_workers.max())} workers (past {int(pts.num_workers.max())} it is outside the "
              f"measured range, flagged hollow). " + "; ".join(desc) + ".", "",
              f"![worker curve]({WORKERS_FILE})", ""]
    return "\n".join(lines)

