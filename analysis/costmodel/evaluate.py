"""How wrong the cost model is: predicted against measured, cross-validation, what-if.

``compare(measured_rows, predicted)`` joins a model's predictions with the measured medians and
intervals; ``summary`` states median and max |relative error| and Kendall's τ between predicted
and measured rankings; ``cross_validate`` holds configurations out (random K-fold, or every
configuration with one value of one knob: leave-one-knob-value-out), calibrates on the rest and
predicts them; ``whatif`` predicts a configuration with knobs changed beside its calibrated baseline.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.costmodel.features import CostModelError
from analysis.costmodel.model import (WORKER_SHAPE, CostModel, fit, measured_configs, predict,
                                      transfer_from_probes)

#: the knobs leave-one-knob-value-out cycles through (those with at least two measured values)
LOKVO_KNOBS = ("num_workers", "batch_size", "image_size", "augment_cost", "source", "precision",
               "grad_accum_steps", "model", "prefetch_buffer_size", "feed")


def compare(measured_rows: pd.DataFrame, predicted: pd.DataFrame,
            step_measured_prediction: pd.DataFrame | None = None) -> pd.DataFrame:
    """Predicted against measured, one row per configuration.

    Args:
        measured_rows: tidy measured rows (one per configuration and repeat).
        predicted: :func:`analysis.costmodel.predict` of the same configurations, in the order of
            ``measured_configs(measured_rows)`` (one row per configuration, in order of first appearance),
            or with a ``config_id`` column to join on.
        step_measured_prediction: the same model's prediction of the same configurations with
            each one's own measured step (:func:`with_measured_step`), to split the error in two: then
            ``pipeline_part`` (that prediction / measured − 1: the error with the step right, i.e.
            the loader, feed and contention) and ``step_part`` (the rest, ``(1 + rel_error) / (1 +
            pipeline_part) − 1``: what the step model adds).

    Returns:
        ``config_id``, the knobs, ``measured`` (median samples/s), ``measured_lo``/``_hi`` (its
        interval over repeats), ``predicted``, ``rel_error`` (predicted / measured − 1),
        ``within_noise`` (the prediction lies inside the measured interval), ``bottleneck``,
        ``input_bound`` and ``extrapolated``; where the prediction has an interval (a model that kept
        its study's held-out errors: ``analysis.costmodel.model.interval_halfwidth``),
        ``predicted_lo``/``_hi``, ``interval_level`` and ``covered`` (the measured median inside
        the prediction's interval; NaN where the prediction has none).
    """
    meas = measured_configs(measured_rows)
    pred = predicted.reset_index(drop=True)
    if "config_id" in pred:
        pred = pred.set_index("config_id").reindex(meas.config_id).reset_index()
    if len(pred) != len(meas):
        raise CostModelError(f"predicted: {len(pred)} rows for {len(meas)} measured configurations; "
                             f"predict the measured configurations (same order) or give config_id")
    out = pd.DataFrame({"config_id": meas.config_id})
    for k in ("model", "batch_size", "image_size", "augment_cost", "source", "precision", "grad_accum_steps",
              "num_workers", "prefetch_buffer_size", "feed"):
        if k in meas:
            out[k] = meas[k].to_numpy()
    out["measured"] = meas.samples_per_s.to_numpy(float)
    out["measured_lo"] = meas.get("samples_per_s_lo", meas.samples_per_s).to_numpy(float)
    out["measured_hi"] = meas.get("samples_per_s_hi", meas.samples_per_s).to_numpy(float)
    out["repeats"] = meas.get("repeats", pd.Series(1, index=meas.index)).to_numpy()
    out["predicted"] = pred.samples_per_s.to_numpy(float)
    out["rel_error"] = out.predicted / out.measured - 1
    out["within_noise"] = (out.predicted >= out.measured_lo) & (out.predicted <= out.measured_hi)
    if {"samples_per_s_lo", "samples_per_s_hi"} <= set(pred.columns):
        lo, hi = pred.samples_per_s_lo.to_numpy(float), pred.samples_per_s_hi.to_numpy(float)
        out["predicted_lo"], out["predicted_hi"] = lo, hi
        out["interval_level"] = pred["interval_level"].to_numpy(float)
        m = out.measured.to_numpy(float)
        out["covered"] = np.where(np.isfinite(lo), ((m >= lo) & (m <= hi)).astype(float), np.nan)
    for c in ("bottleneck", "input_bound", "stall_frac", "stage_to_fix", "extrapolated", "fold", "fault_s"):
        if c in pred:
            out[c] = pred[c].to_numpy()
    ok = measured_rows[measured_rows.status == "ok"] if "status" in measured_rows else measured_rows
    ok = ok.assign(config_id=ok.config_id.astype(str))
    by = ok.groupby("config_id")
    ids = out.config_id.astype(str)
    # the machine's company in the fed windows (rows since MachineWindow): the most of any repeat
    for c in ("steal_frac", "foreign_cpu_cores", "written_mib"):
        if c in ok:
            out[f"max_{c}"] = by[c].max().reindex(ids).to_numpy(float)
    # the step's fresh pages: a step whose temporaries glibc maps afresh each call pays a page fault
    # per 4 KiB, whose cost on a VM varies from call to call (experiments.heap.release_free)
    if "resident_minor_faults_per_step" in ok:
        out["step_faults"] = by["resident_minor_faults_per_step"].median().reindex(ids).to_numpy(float)
    # the machine's own steadiness: the stamped augmentation is the same numpy passes over the same
    # seeded samples in every repeat, so its CPU per sample should not differ between them; where it
    # does, the machine did the same work at another speed (10-20% between repeats on one 2-core VM of
    # 2026-11-25, about 2% on another: results/cpu-2core/holdout/README.md, "pair7")
    if "augment_cpu_s_per_sample" in ok:
        g = ok.augment_cpu_s_per_sample.where(ok.augment_cpu_s_per_sample > 0).groupby(ok.config_id)
        spread = (g.max() / g.min() - 1).where(g.count() >= 2)
        out["work_spread"] = spread.reindex(ids).to_numpy(float)
    # the machine against the calibrated one, from work whose cost the model states apart from the
    # throughput: the stamped stages' CPU per sample over the model's for them, and the step alone on
    # the device over the step model's. Medians of these across configurations far from 1 say the
    # machine ran at another speed than during calibration (a shared VM drifts by 10% within
    # minutes: results/cpu-2core/holdout/README.md, "pair14"), which moves every prediction alike.
    # (NaN where a row stamped no stages: 0 when the loader did not time them; and where the
    # prediction's step was the measured one, which says nothing of the step model)
    if "stage_s_per_sample" in pred and "cpu_stamped_s_per_sample" in meas:
        st = meas.cpu_stamped_s_per_sample.to_numpy(float)
        out["stage_ratio"] = np.where(st > 0, st, np.nan) / pred.stage_s_per_sample.to_numpy(float)
    if "step_s" in pred and "device_resident_samples_per_s" in meas:
        given = meas.batch_size.to_numpy(float) / meas.device_resident_samples_per_s.to_numpy(float)
        modelled = ~pred.step_given.to_numpy(bool) if "step_given" in pred else np.ones(len(pred), bool)
        out["step_ratio"] = np.where(modelled, given / pred.step_s.to_numpy(float), np.nan)
    if step_measured_prediction is not None:
        ms = step_measured_prediction.reset_index(drop=True)
        if "config_id" in ms:
            ms = ms.set_index("config_id").reindex(meas.config_id).reset_index()
        if len(ms) != len(meas):
            raise CostModelError(f"step_measured_prediction: {len(ms)} rows for {len(meas)} measured "
                                 f"configurations; predict the measured configurations (with_measured_step)")
        out["pipeline_part"] = ms.samples_per_s.to_numpy(float) / out.measured - 1
        out["step_part"] = (1 + out.rel_error) / (1 + out.pipeline_part) - 1
        if "step_s" in pred and "step_s" in ms:
            out["step_predicted_s"], out["step_measured_s"] = pred.step_s.to_numpy(float), ms.step_s.to_numpy(float)
    return out


def self_consistent_rows(model: CostModel, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with each ``ok`` run's samples/s replaced by ``model``'s prediction for its
    configuration; every other column as measured, the other rows as they are. A world in which the
    model's form is exactly right and its runs noise-free: cross-validated as the measured rows are
    (``costmodel cv --self_check``), it says what the check can show at best for this design and
    this model. A configuration held out takes with it the rows that pinned its parameters, and
    what is left must predict it from the other configurations and the probes.

    Why it exists: version 17 fitted on a quick study and cross-validated on its own noise-free
    predictions missed the goal's 15% max in 50 of the 79 pairs pair52-pair130 (7-33%:
    results/cpu-2core/holdout/README.md, "Self-consistency"), on the configurations whose cell or
    pipeline the designed sample holds once. It is not a fixed point: the model refitted on all of
    these rows does not return exactly its own predictions (median 0-2%, max 3-9% on those pairs),
    because the fit also reads the rows' measured steps, stamps and CPU times, which stay as
    measured."""
    meas = measured_configs(rows)
    pred = predict(model, meas)
    value = dict(zip(meas.config_id.astype(str), pred.samples_per_s.to_numpy(float)))
    out = rows.copy()
    ok = (out["status"].astype(str) == "ok").to_numpy() if "status" in out else np.ones(len(out), bool)
    out.loc[ok, "samples_per_s"] = out.loc[ok, "config_id"].astype(str).map(value).to_numpy(float)
    return out


def with_measured_step(model: CostModel, meas: pd.DataFrame, **kw) -> pd.DataFrame:
    """``predict(model, meas, **kw)`` with each configuration's own measured device-resident step."""
    given = meas.batch_size.to_numpy(float) / meas.device_resident_samples_per_s.to_numpy(float)
    pred = predict(model, meas, step_s=given, **kw)
    pred["config_id"] = meas.config_id.to_numpy()
    return pred


def predicted_vs_measured(model: CostModel, rows: pd.DataFrame, meas: pd.DataFrame | None = None,
                          step: str = "predicted", **kw) -> pd.DataFrame:
    """:func:`compare` of ``rows`` with the model's prediction of their configurations (``meas``:
    ``measured_configs(rows)``, when the caller has it), each step from the step model (``step=
    'predicted'``) or its own measured device-resident bound (``'measured'``), the error split in two
    either way. ``kw`` (``hierarchy``, ``cpu_count``, ``cpu_scale``) goes to :func:`predict`."""
    meas = measured_configs(rows) if meas is None else meas
    ms = with_measured_step(model, meas, **kw)
    if step == "measured":
        pred = ms
    else:
        pred = predict(model, meas, **kw)
        pred["config_id"] = meas.config_id.to_numpy()
    return compare(rows, pred, ms)


#: a JAX device kind -> the ``memsim.machines`` preset that describes it
DEVICE_HIERARCHY = {"NVIDIA H100 80GB HBM3": "h100_sxm", "NVIDIA H100": "h100_sxm", "NVIDIA H200": "h200"}


def other_platform(model: CostModel, meas: pd.DataFrame, hierarchy: str | None) -> None:
    """Raises CostModelError when the rows ran on an accelerator, the model was fitted on CPU rows
    and no ``hierarchy`` says which accelerator to predict (the prediction would put the step on
    the host's CPU; the message names the preset and the rows' cores to pass), and when a model
    fitted on an accelerator's rows meets a CPU's (it would keep the step off the host).

    >>> m = CostModel(params={}, table=None, stats={}, ranges={}, cpu_count=2, transfer={},
    ...               environment={"platform": "cpu"})
    >>> rows = pd.DataFrame({"platform": ["gpu"], "device_kind": ["NVIDIA H200"], "cpu_count": [16]})
    >>> other_platform(m, rows, "h200")
    >>> other_platform(m, rows, None)
    Traceback (most recent call last):
    ...
    analysis.costmodel.features.CostModelError: these rows ran on NVIDIA H200 (gpu) and the model was fitted on cpu rows: compare the what-if, --set hierarchy=h200 --set cpu_count=16
    >>> m.environment = {"platform": "gpu", "device_kind": "NVIDIA H200"}
    >>> other_platform(m, rows.assign(platform="cpu"), None)
    Traceback (most recent call last):
    ...
    analysis.costmodel.features.CostModelError: these rows ran on the CPU and the model was fitted on NVIDIA H200 (gpu) rows, with the step off the host: fit a model on these rows ('costmodel fit')
    """
    fitted = model.environment.get("platform")
    plats = sorted({str(v) for v in meas.get("platform", pd.Series(dtype=object)).dropna()})
    if fitted not in (None, "cpu") and plats == ["cpu"]:
        raise CostModelError(f"these rows ran on the CPU and the model was fitted on "
                             f"{model.environment.get('device_kind', '?')} ({fitted}) rows, with the step off the "
                             f"host: fit a model on these rows ('costmodel fit')")
    if hierarchy is not None or fitted != "cpu" or not plats or plats == ["cpu"]:
        return
    kinds = sorted({str(v) for v in meas.get("device_kind", pd.Series(dtype=object)).dropna()})
    preset = DEVICE_HIERARCHY.get(kinds[0]) if len(kinds) == 1 else None
    cores = pd.to_numeric(meas.get("cpu_count", pd.Series(dtype=float)), errors="coerce").dropna()
    hint = (f"--set hierarchy={preset}" if preset else "--set hierarchy=h100_sxm|h200 (the nearest)") + \
        (f" --set cpu_count={int(cores.mode().iloc[0])}" if len(cores) else "")
    raise CostModelError(f"these rows ran on {', '.join(kinds) or '?'} ({', '.join(plats)}) and the model was fitted "
                         f"on cpu rows: compare the what-if, {hint}")


def host_stage_ratio(calibrated: pd.DataFrame | None, target: pd.DataFrame | None) -> dict | None:
    """How much more CPU the target host's stage probe spent than the calibrated host's on the same
    stages: per source × image size × augmentation cost measured by both, the ratio of the median
    stamped CPU per sample; returns {'median', 'min', 'max', 'n'} over those combinations, or None
    when either has no stage probe or they share no combination. Its median is what
    ``--set cpu_scale=`` takes to carry a model's loader costs to the target host: measured on the
    stages alone, independently of the rows the prediction is compared with.

    It is ten seconds of one thread on a shared host, and a host's pipeline need not follow it.
    Checked with the 2-core studies' models predicting two GPU hosts' quick studies (median |rel
    error|, without → with the ratio): on an H200 host, whose runs were slow as its probe said,
    19–32% → 9–15% (``results/nvidia-h200``); on an H100 host whose probe said 1.18–1.27× but whose
    runs were not slower, 11.5–12.4% → 12.4–23.1% (``results/nvidia-h100``).

    >>> a = pd.DataFrame({"source": ["ram", "ram"], "image_size": [16, 32], "augment_cost": [0, 0],
    ...                   "read_cpu_s_per_sample": [1e-4, 2e-4], "decode_cpu_s_per_sample": [0.0, 0.0],
    ...                   "augment_cpu_s_per_sample": [0.0, 0.0], "status": ["ok", "ok"]})
    >>> b = a.assign(read_cpu_s_per_sample=[1.2e-4, 2.6e-4])
    >>> r = host_stage_ratio(a, b)
    >>> round(r["median"], 3), round(r["min"], 3), round(r["max"], 3), r["n"]
    (1.25, 1.2, 1.3, 2)
    """
    from analysis.costmodel.model import _stage_probe_rows
    a, b = _stage_probe_rows(calibrated), _stage_probe_rows(target)
    if a is None or b is None:
        return None
    keys = ["source", "image_size", "augment_cost"]
    ratio = (b.groupby(keys).cpu_stamped_s_per_sample.median()
             / a.groupby(keys).cpu_stamped_s_per_sample.median()).dropna()
    if not len(ratio):
        return None
    return {"median": float(ratio.median()), "min": float(ratio.min()), "max": float(ratio.max()), "n": int(len(ratio))}


def other_cpu(model: CostModel, meas: pd.DataFrame) -> str:
    """'' when the rows ran on the CPU the model was fitted on (or either does not say), else a
    sentence naming both: a model's step and loader costs are the measured CPU's, and on the 2-core
    machines of 2026-11-25 the same step took 2.5 ms on one CPU and 7.5 ms on another."""
    fitted = model.environment.get("cpu_model")
    seen = sorted({str(v) for v in meas.get("cpu_model", pd.Series(dtype=object)).dropna()})
    if not fitted or not seen or seen == [fitted]:
        return ""
    return (f"the model was fitted on CPU {fitted!r}; these rows ran on {', '.join(map(repr, seen))}: the "
            f"predictions are for another machine (refit on these rows' machine to compare like with like)")


def summary(cmp: pd.DataFrame) -> dict:
    """Median and max |rel error|, Kendall's τ of predicted vs measured, and n.

    >>> cmp = pd.DataFrame({"measured": [100.0, 200, 300], "predicted": [110.0, 190, 300],
    ...                     "rel_error": [0.1, -0.05, 0.0]})
    >>> s = summary(cmp)
    >>> s["median_abs_rel_error"], s["max_abs_rel_error"], s["kendall_tau"], s["n"]
    (0.05, 0.1, 1.0, 3)

    With the measured intervals (``measured_lo``/``_hi``), how wide they are relative to the median:

    >>> cmp["measured_lo"], cmp["measured_hi"] = [95.0, 150, 297], [105.0, 250, 303]
    >>> s = summary(cmp)
    >>> round(s["median_interval_width"], 3), round(s["max_interval_width"], 3), s["n_interval_under_15pct"]
    (0.1, 0.5, 2)

    With each configuration's spread of identical work between its repeats (``work_spread``, see
    :func:`compare`), how steady the machine itself was:

    >>> cmp["work_spread"] = [0.02, float("nan"), 0.2]
    >>> s = summary(cmp)
    >>> round(s["median_work_spread"], 3), round(s["max_work_spread"], 3)
    (0.11, 0.2)
    """
    from scipy.stats import kendalltau
    err = np.abs(cmp.rel_error.to_numpy(float))
    if not len(err):
        raise CostModelError("compare: no configurations to summarise")
    tau = float(kendalltau(cmp.predicted, cmp.measured).statistic) if len(err) > 1 else math.nan
    out = {"median_abs_rel_error": float(np.median(err)), "max_abs_rel_error": float(err.max()),
           "kendall_tau": tau, "n": int(len(err))}
    if "within_noise" in cmp:
        out["within_noise"] = int(cmp.within_noise.sum())
    if {"measured_lo", "measured_hi"} <= set(cmp.columns):
        # how tightly the measurements themselves pin each configuration: an error can only be judged
        # against a measurement whose interval is narrower than it
        width = ((cmp.measured_hi - cmp.measured_lo) / cmp.measured).to_numpy(float)
        if np.isfinite(width).any():
            out["median_interval_width"] = float(np.nanmedian(width))
            out["max_interval_width"] = float(np.nanmax(width))
            out["n_interval_under_15pct"] = int((width < 0.15).sum())
    if "work_spread" in cmp and np.isfinite(cmp.work_spread.to_numpy(float)).any():
        out["median_work_spread"] = float(np.nanmedian(cmp.work_spread.to_numpy(float)))
        out["max_work_spread"] = float(np.nanmax(cmp.work_spread.to_numpy(float)))
    if "extrapolated" in cmp:
        out["extrapolated"] = int((cmp.extrapolated.astype(str) != "").sum())
    if "covered" in cmp and np.isfinite(cmp.covered.to_numpy(float)).any():
        # the prediction intervals against the measured medians: a share near the level says the
        # intervals are honest here, one far below it that these predictions err more than the
        # study's own held-out configurations did
        cov = cmp.covered.to_numpy(float)
        out["interval_level"] = float(np.nanmedian(cmp.interval_level.to_numpy(float)))
        out["n_in_interval"] = int(np.nansum(cov))
        out["n_with_interval"] = int(np.isfinite(cov).sum())
        out["interval_coverage"] = out["n_in_interval"] / out["n_with_interval"]
    for r in ("stage_ratio", "step_ratio"):  # the machine against the calibrated one (see compare)
        v = cmp[r].to_numpy(float) if r in cmp else np.zeros(0)
        if np.isfinite(v).any():
            out[f"median_{r}"] = float(np.nanmedian(v))
    for part in ("step_part", "pipeline_part"):  # the error's split (see compare), when it was made
        if part in cmp:
            v = np.abs(cmp[part].to_numpy(float))
            out[f"median_abs_{part}"], out[f"max_abs_{part}"] = float(np.median(v)), float(v.max())
    return out


#: draws of :func:`noise_floor`'s simulation (its medians move by well under 0.1 points between seeds)
FLOOR_DRAWS = 2000
#: an exact model's share of draws at least as bad as a model (``p_median``, ``p_max`` of
#: :func:`noise_floor`) under which the model's error is beyond what the measurements' noise explains
BEYOND_NOISE = 0.05


def noise_verdict(p: float) -> str:
    """'within' or 'beyond' the noise, for one of :func:`noise_floor`'s ``p_median`` or ``p_max``.

    >>> noise_verdict(0.3), noise_verdict(0.01)
    ('within', 'beyond')
    """
    return "beyond" if p < BEYOND_NOISE else "within"


def _kendall_tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's τ-b of ``x`` (n,) against each row of ``y`` (draws, n), as ``scipy.stats.kendalltau``
    computes it for one: vectorised over the draws, which one scipy call per draw is not."""
    i, j = np.triu_indices(len(x), 1)
    sx = np.sign(x[i] - x[j])
    sy = np.sign(y[:, i] - y[:, j])
    den = np.sqrt((sx != 0).sum() * (sy != 0).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (sx * sy).sum(axis=1) / den, np.nan)


def noise_floor(rows: pd.DataFrame, config_ids=None, goal: dict | None = None, draws: int = FLOOR_DRAWS,
                seed: int = 0, observed: dict | None = None) -> dict | None:
    """What a model that predicted every configuration *exactly* would score against these measured
    rows: a check's noise floor, from the spread of the rows' own repeats.

    Each configuration's measured value is the median of its repeats (as :func:`compare` takes it);
    each repeat is the true throughput times the machine's noise. The noise of one run is the
    configurations' repeats about their own means in log samples/s, pooled over the configurations
    with two or more repeats (one configuration's two repeats are one degree of freedom: too few to
    stand alone) and scaled by √(n/(n−1)) to the spread of one run. Each draw gives every
    configuration as many runs as it has, drawn from that pool with random signs, and scores the exact
    prediction against their median: median and max |rel error| and Kendall's τ (against the measured
    medians as the true order), and whether ``goal`` (default: the holdout's, 5% / 15% / 0.8) is met.
    With Gaussian noise and two repeats the draw of a configuration's error has exactly the
    distribution of its two repeats' half difference.

    Returns the medians over ``draws`` draws of the three, ``p_goal`` (the share of draws meeting the
    goal), ``noise_sd`` (one run's noise, rms of log samples/s), ``n`` and ``draws``; None when no
    two configurations have two repeats each. With ``observed`` (a model's :func:`summary` on the
    same configurations), also how often the exact model does as badly: ``p_median`` and ``p_max``,
    the shares of draws whose median or max |rel error| is at least the observed one. A share under
    :data:`BEYOND_NOISE` says the model's error is beyond what these measurements' noise explains;
    above, within it (:func:`noise_verdict`).

    It is a lower bound on any model's error on these rows: a model is also fitted on noisy rows,
    and a cross-validated one on fewer of them. Why this exists: over the 130 held-out pairs of
    2026-11-25 to 12-01 (results/cpu-2core/holdout/README.md, "The noise floor"), an exact model
    would have met both checks in about 11 of the 29 pairs on the AMD EPYC 25/17/1 and 44 of the 50
    on the Intel Xeon 6/167/1: on the first machine the goal is below what its measurements can show.

    >>> rng = np.random.default_rng(0)
    >>> true = np.repeat(np.linspace(1000, 3000, 200), 2)
    >>> rows = pd.DataFrame({"config_id": np.repeat(np.arange(200), 2), "status": "ok",
    ...                      "samples_per_s": true * np.exp(rng.normal(0, 0.04, 400))})
    >>> f = noise_floor(rows)
    >>> round(f["noise_sd"], 2), f["n"]  # one run's noise, as drawn
    (0.04, 200)
    >>> abs(f["median_abs_rel_error"] - 0.6745 * 0.04 / 2 ** 0.5) < 0.002  # the median of |N(0, 0.04²/2)|
    True
    >>> noise_floor(rows.assign(samples_per_s=true))["max_abs_rel_error"]  # no noise, no floor
    0.0
    >>> f = noise_floor(rows, observed={"median_abs_rel_error": 0.05, "max_abs_rel_error": 0.05})
    >>> f["p_median"], f["p_max"] > 0.99  # a median of 5% is beyond this noise; a max of 5% within it
    (0.0, True)
    """
    from analysis.costmodel.holdout import GOAL, meets
    goal = GOAL if goal is None else goal
    ok = rows[rows["status"].astype(str) == "ok"] if "status" in rows else rows
    v = pd.to_numeric(ok["samples_per_s"], errors="coerce").to_numpy(float)
    keep = np.isfinite(v) & (v > 0)
    ids = ok["config_id"].astype(str).to_numpy()[keep]
    v = v[keep]
    if config_ids is not None:
        sel = np.isin(ids, np.asarray([str(c) for c in config_ids]))
        ids, v = ids[sel], v[sel]
    frame = pd.DataFrame({"config_id": ids, "log": np.log(v), "value": v})
    g = frame.groupby("config_id", sort=True)
    counts = g.log.count()
    if (counts >= 2).sum() < 2:
        return None
    k = frame.config_id.map(counts).to_numpy(float)
    dev = (frame.log - g.log.transform("mean")).to_numpy(float)
    pool = (dev * np.sqrt(k / np.maximum(k - 1, 1)))[k >= 2]
    truth = g.value.median().to_numpy(float)
    n_c, most = len(counts), int(counts.max())
    rng = np.random.default_rng(seed)
    runs = np.exp(rng.choice(pool, size=(draws, n_c, most)) * rng.choice([-1.0, 1.0], size=(draws, n_c, most)))
    runs[:, np.arange(most)[None, :] >= counts.to_numpy()[:, None]] = np.nan
    measured = np.nanmedian(runs, axis=2)  # each configuration's measured median, relative to the truth
    err = np.abs(1.0 / measured - 1.0)  # the exact prediction against it
    med, mx = np.median(err, axis=1), err.max(axis=1)
    tau = _kendall_tau_b(truth, truth[None, :] * measured)
    met = [meets({"median_abs_rel_error": a, "max_abs_rel_error": b, "kendall_tau": t}, goal)
           for a, b, t in zip(med, mx, tau)]
    out = {"median_abs_rel_error": float(np.median(med)), "max_abs_rel_error": float(np.median(mx)),
           "kendall_tau": float(np.nanmedian(tau)), "p_goal": float(np.mean(met)),
           "noise_sd": float(np.sqrt(np.mean(pool ** 2))), "n": int(n_c), "draws": int(draws)}
    if observed is not None:
        out["p_median"] = float(np.mean(med >= observed["median_abs_rel_error"]))
        out["p_max"] = float(np.mean(mx >= observed["max_abs_rel_error"]))
    return out


#: a measured window's company worth naming in ``reason``: the hypervisor's steal as a share of the CPU,
#: and the cores other processes kept busy (both a few ticks above the counters' resolution, ~1%)
STEAL_NOTE = 0.02
FOREIGN_NOTE = 0.1
#: MiB written back to disk inside a measured window worth naming (experiments.train.MachineWindow):
#: a few MiB are the rows and logs of the run itself; the demo's install left 57-86 MiB in one window of
#: pair137 and pair138, runs no slower than their other repeats, so this is company, not a verdict
WRITTEN_NOTE = 16.0
#: a step's minor page faults per call worth naming: 1 000 pages (4 MB). In pair24's quick study on the
#: 2-core VM (results/cpu-2core/holdout/README.md) the steps faulted under 250 times a call but for
#: the bf16 MLP at 48×48 in micro-batches of 16 (8 643-8 676) and the CNN at 48×48 or batch 128
#: (8 856-19 913); the first measured 26.6-36.0 ms in the runs, the probe and by hand that day
FAULTS_NOTE = 1000


def reason(row: pd.Series) -> str:
    """Why a prediction may be off, from what the comparison knows (or '').

    >>> reason(pd.Series({"measured": 100.0, "measured_lo": 80.0, "measured_hi": 120.0, "max_steal_frac": 0.05,
    ...                   "max_foreign_cpu_cores": 0.0}))
    'noisy measurement (interval 40% of the median); the hypervisor took 5% of the CPU in a measured window'
    >>> reason(pd.Series({"measured": 100.0, "measured_lo": 99.0, "measured_hi": 101.0, "max_written_mib": 700.0}))
    'the kernel wrote 700 MiB back to disk in a measured window'
    >>> reason(pd.Series({"measured": 100.0, "measured_lo": 99.0, "measured_hi": 101.0, "step_faults": 8643.0}))
    'its step faulted in 35 MB of fresh pages a step, whose cost varies'
    >>> reason(pd.Series({"measured": 100.0, "measured_lo": 99.0, "measured_hi": 101.0, "step_faults": 8643.0,
    ...                   "fault_s": 0.0144}))
    'its step faulted in 35 MB of fresh pages a step, whose cost varies (predicted 14.4 ms of its step)'
    """
    why = []
    if isinstance(row.get("extrapolated"), str) and row["extrapolated"]:
        why.append("extrapolated: " + row["extrapolated"])
    lo, hi, m = row.get("measured_lo"), row.get("measured_hi"), row.get("measured")
    if m and np.isfinite(lo) and np.isfinite(hi) and (hi - lo) / m > 0.1:
        why.append(f"noisy measurement (interval {100 * (hi - lo) / m:.0f}% of the median)")
    steal, other = row.get("max_steal_frac", np.nan), row.get("max_foreign_cpu_cores", np.nan)
    if np.isfinite(steal) and steal > STEAL_NOTE:
        why.append(f"the hypervisor took {steal:.0%} of the CPU in a measured window")
    if np.isfinite(other) and other > FOREIGN_NOTE:
        why.append(f"other processes kept {other:.2f} cores busy in a measured window")
    written = row.get("max_written_mib", np.nan)
    if np.isfinite(written) and written > WRITTEN_NOTE:
        why.append(f"the kernel wrote {written:.0f} MiB back to disk in a measured window")
    faults = row.get("step_faults", np.nan)
    if np.isfinite(faults) and faults >= FAULTS_NOTE:
        fs = row.get("fault_s", np.nan)  # what the model's fault term (version 14) put on the step
        why.append(f"its step faulted in {faults * 4096 / 1e6:.0f} MB of fresh pages a step, whose cost varies"
                   + (f" (predicted {1e3 * fs:.1f} ms of its step)" if np.isfinite(fs) and fs > 0 else ""))
    sp, pp = row.get("step_part"), row.get("pipeline_part")
    if sp is not None and pp is not None and np.isfinite(sp) and np.isfinite(pp):
        parts = []
        if abs(sp) > 0.05:
            shown = (f" (step alone predicted {1e3 * row['step_predicted_s']:.3g} ms, measured "
                     f"{1e3 * row['step_measured_s']:.3g} ms)" if np.isfinite(row.get("step_predicted_s", np.nan)) else "")
            parts.append(f"{sp:+.0%} from the step model{shown}")
        if abs(pp) > 0.05:
            parts.append(f"{pp:+.0%} with the step measured (loader, feed and contention)")
        if parts:
            why.append("; ".join(parts))
    elif row.get("bottleneck") == "step" and abs(row.get("rel_error", 0)) > 0.1:
        why.append("step-bound: the step-time fit (FLOPs × rate per model and precision) misses this shape")
    return "; ".join(why)


def worst(cmp: pd.DataFrame, n: int = 3) -> pd.DataFrame:
    """The ``n`` largest |rel error| rows with a reason each."""
    w = cmp.reindex(cmp.rel_error.abs().sort_values(ascending=False).index).head(n).copy()
    w["reason"] = [reason(r) for _, r in w.iterrows()]
    return w


#: the knobs that make a step probe's shape and a loader probe's shape
STEP_SHAPE = ("model", "precision", "grad_accum_steps", "batch_size", "image_size", "width", "depth")
LOADER_SHAPE = ("source", "image_size", "augment_cost")


def without_held_out(probe: pd.DataFrame | None, held: pd.DataFrame, shape: tuple, knob: str | None = None,
                     shapes: bool = True):
    """``probe``'s rows minus those that measured a held-out configuration's part: with ``shapes``,
    the same ``shape`` (knob values) as a configuration of ``held``; and, when ``knob`` names the knob
    a leave-one-knob-value-out set holds out, any row with a held-out value of it. Without the shape
    rule a held-out configuration keeps the probe rows a study measures whichever configurations it
    runs; with it, its step (or loader) is predicted from other shapes, as for a shape the probe
    never measured.

    >>> p = pd.DataFrame({"source": ["ram", "ram", "memmap"], "image_size": [16, 32, 16], "augment_cost": [0, 0, 0]})
    >>> held = pd.DataFrame({"source": ["ram"], "image_size": [16], "augment_cost": [0]})
    >>> without_held_out(p, held, LOADER_SHAPE).source.tolist()
    ['ram', 'memmap']
    >>> without_held_out(p, held, LOADER_SHAPE, knob="source").source.tolist()
    ['memmap']
    >>> len(without_held_out(p, held, LOADER_SHAPE, shapes=False)), without_held_out(p, held, LOADER_SHAPE, knob="source", shapes=False).source.tolist()
    (3, ['memmap'])
    """
    if probe is None or not len(probe):
        return probe
    from analysis.costmodel.features import knob_frame
    pk, hk = knob_frame(probe), knob_frame(held)
    keys = [k for k in shape if k in pk]
    drop = np.zeros(len(probe), bool)
    if shapes:
        drop |= pd.MultiIndex.from_frame(pk[keys].astype(str)).isin(pd.MultiIndex.from_frame(hk[keys].astype(str)))
    if knob is not None and knob in keys:
        drop |= pk[knob].astype(str).isin(hk[knob].astype(str)).to_numpy()
    return probe[~drop]


def cross_validate(rows: pd.DataFrame, *, kind: str = "kfold", folds: int = 5, seed: int = 0,
                   probes: pd.DataFrame | None = None, steps: pd.DataFrame | None = None,
                   step_probe: pd.DataFrame | None = None, knobs=LOKVO_KNOBS,
                   transfer: dict | None = None, loader_probe: pd.DataFrame | None = None,
                   stage_probe: pd.DataFrame | None = None, step: str = "predicted",
                   worker_probe: pd.DataFrame | None = None, hold_out_probes: bool = True) -> pd.DataFrame:
    """Held-out predictions: calibrate without some configurations, predict them.

    Args:
        rows: tidy measured rows.
        kind: ``"kfold"`` (configurations shuffled with ``seed`` into ``folds`` folds) or
            ``"lokvo"`` (leave one knob value out: for each knob of ``knobs`` with at least two
            measured values, and each value, hold out every configuration with that value).
        folds: the number of folds of ``kfold`` (at most the number of configurations).
        probes, steps, step_probe, stage_probe, loader_probe, worker_probe: passed to :func:`fit`.
            Under ``lokvo`` every component-probe row with the held-out knob value is held out too
            (:func:`without_held_out`): the value was never measured.
        hold_out_probes: also hold out the component probes' rows of each held-out configuration's
            own step and loader shapes (the worker probe's: its loader shape and batch size), so that
            its step and stages are predicted from other shapes (default). False keeps them (see below).
        transfer: the probes' copy fit (:func:`transfer_from_probes`) when the caller has it.
        step: ``"predicted"`` (a held-out configuration's step comes from the step model),
            ``"measured"`` (its step is its own measured
            device-resident bound, a step-alone measurement a user makes in seconds; what is held
            out and predicted is the pipeline around it: loader, feed, and how they share the cores),
            or ``"both"`` (each fold's model predicts both ways; a ``step`` column tells them apart).

    Returns:
        :func:`compare` rows of the held-out predictions with ``fold`` naming the held-out set
        (under ``lokvo`` a configuration appears once per knob).

    What is held out. A fold holds out configurations: their runs, and by default the probes' rows of
    their own shapes. A study's component probes are grids over the knobs' levels, not over the
    configurations it ran: the step probe every model × precision × accumulation at five (batch,
    image) pairs, the four corners of the levels and the middle one; the stage probe every source ×
    image size × augmentation; the worker probe the smallest and largest batch and image
    (``experiments.components.for_sweep``). A configuration the study did not run has the same probe
    rows, and the comparison with a second sweep fits on all of them. ``hold_out_probes=False``
    therefore estimates the error of predicting a configuration the study did not run inside its
    levels (five of the quick study's nine sampled configurations have a probed step shape, as five
    of the nine (batch, image) pairs of its levels do); the default is the stricter estimate for a
    configuration whose shapes no probe measured. Neither is reliably the smaller. Medians over the
    quick studies of ``results/cpu-2core/holdout`` (model version 16) of median / max |rel error| /
    τ, held out → kept, and how many meet the goal (5 / 15% / 0.8):
    - ``pair79``–``pair98`` (Intel Xeon of model 167): 4.0 / 17.3% / 0.87 → 3.8 / 14.9% / 0.87, 4 → 11 of 20;
    - ``pair99``–``pair104`` (the same CPU, measured after the option was chosen, a slower day):
      4.7 / 15.8% / 0.82 → 5.1 / 16.1% / 0.84, 2 → 1 of 6;
    - ``pair8``–``pair30`` (an Intel Xeon of model 207): 4.8 / 19.9% → 4.9 / 23.9%, 5 → 5 of 23.
    """
    meas = measured_configs(rows)
    ids = meas.config_id.astype(str).to_numpy()
    n = len(ids)
    if kind == "kfold":
        if not 2 <= folds <= n:
            raise CostModelError(f"folds={folds}: must be between 2 and the number of configurations ({n})")
        perm = np.random.default_rng(seed).permutation(n)
        sets = [(f"fold {k}", set(ids[perm[k::folds]]), None) for k in range(folds)]
    elif kind == "lokvo":
        sets = []
        for k in knobs:
            if k not in meas:
                continue
            vals = meas[k].astype(str)
            if vals.nunique() < 2:
                continue
            for v in sorted(vals.unique()):
                sets.append((f"{k}={v}", set(ids[(vals == v).to_numpy()]), k))
    else:
        raise CostModelError(f"kind={kind!r}: expected 'kfold' or 'lokvo'")
    if step not in ("predicted", "measured", "both"):
        raise CostModelError(f"step={step!r}: expected 'predicted', 'measured' or 'both'")
    modes = ("predicted", "measured") if step == "both" else (step,)
    if transfer is None:  # the probes do not change between folds: fitted once
        transfer = transfer_from_probes(probes)
    out = []
    for name, held, knob in sets:
        out_of = meas.config_id.astype(str).isin(held)
        train, test = meas[~out_of], meas[out_of]  # summarized once: a configuration's own rows alone
        try:
            model = fit(train, probes, steps, without_held_out(step_probe, test, STEP_SHAPE, knob, hold_out_probes),
                        transfer=transfer,
                        loader_probe=without_held_out(loader_probe, test, LOADER_SHAPE, knob, hold_out_probes),
                        stage_probe=without_held_out(stage_probe, test, LOADER_SHAPE, knob, hold_out_probes),
                        worker_probe=without_held_out(worker_probe, test, WORKER_SHAPE, knob, hold_out_probes))
        except CostModelError as e:
            print(f"cross-validation: {name} skipped: {e}")
            continue
        ms = with_measured_step(model, test)
        for mode in modes:
            if mode == "measured":
                pred = ms
            else:
                pred = predict(model, test)
                pred["config_id"] = test.config_id.to_numpy()
            c = compare(test, pred, ms)
            c["fold"] = name
            if step == "both":
                c["step"] = mode
            out.append(c)
    if not out:
        raise CostModelError("cross-validation: no held-out set could be calibrated without; measure more configurations")
    return pd.concat(out, ignore_index=True)


def heldout_record(cmp: pd.DataFrame, kind: str = "kfold", folds: int = 5, seed: int = 0) -> dict:
    """What a model keeps of its study's cross-validation (:func:`cross_validate`'s frame, ``cmp``)
    to size its prediction intervals (``CostModel.heldout``): the held-out configurations'
    ``|log(predicted / measured)|``, sorted, and how they were held out.

    >>> [round(e, 4) for e in heldout_record(pd.DataFrame({"rel_error": [0.1, -0.05, float("nan")]}))["abs_log_errors"]]
    [0.0513, 0.0953]
    """
    e = np.abs(np.log1p(cmp.rel_error.to_numpy(float)))
    return {"kind": kind, "folds": int(folds), "seed": int(seed),
            "abs_log_errors": [float(v) for v in np.sort(e[np.isfinite(e)])]}


def whatif(model: CostModel, base: pd.DataFrame, changes: dict, hierarchy: str | None = None,
           cpu_count: int | None = None, cpu_scale: float | None = None) -> pd.DataFrame:
    """The baseline configuration and the same with ``changes``, predicted side by side.

    Args:
        model: a fitted model.
        base: one configuration (one row with knob columns).
        changes: knob -> new value.
        hierarchy, cpu_count, cpu_scale: as in :func:`predict` (apply to the changed configuration only).

    Returns:
        Two rows (``baseline``, ``what if``): samples/s (with its prediction interval,
        ``samples_per_s_lo``/``_hi``, where the model has one; NaN for an extrapolated row), stall
        fraction, input-bound grade, bottleneck, stage to fix and extrapolation flags.
    """
    if len(base) != 1:
        raise CostModelError(f"base: {len(base)} rows; give exactly one baseline configuration")
    changed = base.copy()
    for k, v in changes.items():
        changed[k] = v
    b = predict(model, base)
    w = predict(model, changed, hierarchy=hierarchy, cpu_count=cpu_count, cpu_scale=cpu_scale)
    cols = ["samples_per_s", "bound_samples_per_s", "stall_frac", "input_bound", "bottleneck", "stage_to_fix",
            "extrapolated", "num_workers", "batch_size", "precision", "feed"]
    if "samples_per_s_lo" in b:  # the model kept its study's held-out errors: prediction intervals
        cols[1:1] = ["samples_per_s_lo", "samples_per_s_hi"]
    out = pd.concat([b[cols], w[cols]], ignore_index=True)
    out.insert(0, "case", ["baseline", "what if"])
    out["speedup"] = out.samples_per_s / out.samples_per_s.iloc[0]
    return out
