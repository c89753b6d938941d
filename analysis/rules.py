"""The folklore, measured: a verdict on each rule of thumb from the rows ``experiments.rules`` wrote.

``RulesData.load(folder)`` reads a rules folder (``python -m experiments rules``, or the ``rules/``
folder of a study); ``verdicts(data, predict)`` is a pure function of those rows: one row per claim
with the claimed effect (a band), the measured effect with its interval, the predicted effect, the
verdict and a one-sentence reason built from the measured numbers. ``section(study)`` is the
report's "Rules of thumb" section; ``python -m analysis rules DIR [--model MODEL.json] [--json]``
writes ``rules.csv`` into DIR and prints the table.

Verdicts (``judge``): an effect "holds" when its median lies in the claimed band, "does not hold"
when its whole interval lies outside it, and is "inconclusive" when the median is outside but the
interval reaches the band (the run's noise decides). Claims with a setting that decides the answer
say "depends" (some worker count helps but not the core count; prefetching helps but the step still
waits; some configurations input-bound and others not). "untestable here" is a platform fact (no
host-to-device bus on CPU); "not measured" a part the run did not include. Ratios of two medians
take the conservative interval lo_a / hi_b … hi_a / lo_b.

Predicted effects: for throughput claims, from a ``predict`` callable (``configs DataFrame ->
DataFrame`` with ``samples_per_s``, one row per input row, same order: the calibrated cost model's
``analysis.costmodel.predict``; ``predictor_from_model(path)`` builds it), given the summarized
measured rows being compared; without one they are NaN and the table says "no calibrated model".
Memory claims take memsim's footprint of the same configurations (``memory.csv``), tier claims
memsim's spec-sheet hierarchy presets (``memsim.machines``); claims memsim does not model are NaN
with the reason in ``predicted_from``.

The study's report reads the rules rows the study measured cheaply (``experiments.rules.study``:
the study's own sweep rows serve claims 1, 3 and 9, its probe rows claim 6, and only the memory
analysis, the device_put and the memmap parts are measured, about 20 s), because ``make demo`` has
no room for the 5-minute quick preset; claims that need training runs of their own (bf16, gradient
accumulation, cold storage) say "not measured" there and name the command that measures them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from analysis.figures import save  # noqa: E402
from analysis.tables import md_table  # noqa: E402
from experiments import results  # noqa: E402
from memsim.knobs import ConfigError, KNOBS  # noqa: E402

__all__ = ["CLAIMS", "COLUMNS", "VERDICTS", "RulesData", "verdicts", "judge", "ratio_interval",
           "predictor_from_model", "section", "workers_figure", "prefetch_figure", "tiers_figure",
           "device_put_figure", "RULES_CSV"]

RULES_CSV = "rules.csv"
MiB = 2**20
VERDICTS = ("holds", "does not hold", "depends", "inconclusive", "untestable here", "not measured")
COLUMNS = ("claim", "statement", "quantity", "claimed", "claimed_lo", "claimed_hi", "measured", "measured_lo",
           "measured_hi", "predicted", "predicted_from", "verdict", "reason")
INF = math.inf

# claim -> (the advice as commonly stated, the quantity measured, the claimed effect, its band)
CLAIMS: dict[str, tuple[str, str, str, float, float]] = {
    "1": ("More loader workers: 20-40% faster; set num_workers to the core count",
          "samples/s, num_workers = cores ÷ num_workers = 0", "×1.2-1.4", 1.2, 1.4),
    "2": ("Pinned host memory: 10-30% faster host-to-device transfer",
          "host-to-device time, pageable ÷ pinned", "×1.1-1.3", 1.1, 1.3),
    "3": ("Prefetching batches ahead keeps the accelerator from idling",
          "samples/s, deepest ÷ shallowest host prefetch", "> ×1.05, no input wait", 1.05, INF),
    "4a": ("Mixed precision: 30-50% faster training (even 2×)",
           "samples/s, bf16 ÷ fp32", "×1.3-1.5", 1.3, 1.5),
    "4b": ("Mixed precision: 2× less memory",
           "device bytes of the step, fp32 ÷ bf16", "×2 (1.8-2.2)", 1.8, 2.2),
    "5": ("Gradient accumulation: a larger effective batch at the same device memory",
          "device bytes, batch B with G micro-batches ÷ batch B/G without", "×1 (0.9-1.1)", 0.9, 1.1),
    "6": ("Tiers: VRAM ~1000 GB/s, RAM ~50 GB/s, SSD ~3 GB/s",
          "read bandwidth, RAM copy ÷ cold storage", "×16.7 (within 2×: 8.3-33)", 50 / 3 / 2, 50 / 3 * 2),
    "7": ("Memory-mapped datasets train on data larger than RAM without loading it",
          "share of a dataset larger than the data limit read under that limit", "1 (all of it)", 1.0, 1.0),
    "8": ("device_put keeps the host copy: memory is allocated on both sides",
          "copies held right after device_put (host + device bytes ÷ array bytes)", "2 (1.8-2.2)", 1.8, 2.2),
    "9": ("Data transfer, not arithmetic, is the bottleneck: accelerators idle if not fed",
          "share of the loop waiting for input (data_wait_frac), baseline", ">= 0.5", 0.5, 1.0),
}

PredictFn = Callable[[pd.DataFrame], pd.DataFrame]


def judge(measured: float, lo: float, hi: float, band_lo: float, band_hi: float) -> str:
    """The verdict of a measured effect (median, interval) against a claimed band.

    >>> judge(1.3, 1.25, 1.35, 1.2, 1.4), judge(0.95, 0.9, 1.0, 1.2, 1.4), judge(1.1, 1.0, 1.25, 1.2, 1.4)
    ('holds', 'does not hold', 'inconclusive')
    >>> judge(float("nan"), float("nan"), float("nan"), 1.2, 1.4)
    'not measured'
    """
    if not np.isfinite(measured):
        return "not measured"
    lo = measured if not np.isfinite(lo) else lo
    hi = measured if not np.isfinite(hi) else hi
    if band_lo <= measured <= band_hi:
        return "holds"
    if hi < band_lo or lo > band_hi:
        return "does not hold"
    return "inconclusive"


def ratio_interval(a: pd.Series, b: pd.Series, col: str = "samples_per_s") -> tuple[float, float, float]:
    """(a ÷ b, low, high) of two summarized rows' ``col`` with its ``_lo``/``_hi`` interval:
    the conservative low a_lo / b_hi and high a_hi / b_lo.

    >>> a = pd.Series({"samples_per_s": 120.0, "samples_per_s_lo": 110.0, "samples_per_s_hi": 130.0})
    >>> b = pd.Series({"samples_per_s": 100.0, "samples_per_s_lo": 95.0, "samples_per_s_hi": 105.0})
    >>> tuple(round(x, 3) for x in ratio_interval(a, b))
    (1.2, 1.048, 1.368)
    """
    m = float(a[col]) / float(b[col])
    alo, ahi = float(a.get(f"{col}_lo", a[col])), float(a.get(f"{col}_hi", a[col]))
    blo, bhi = float(b.get(f"{col}_lo", b[col])), float(b.get(f"{col}_hi", b[col]))
    return m, alo / bhi if bhi else math.nan, ahi / blo if blo else math.nan


def _csv(path: Path) -> pd.DataFrame | None:
    return results.read_csv_rows(path) if path.exists() else None


def _need(df: pd.DataFrame | None, cols: tuple[str, ...], what: str) -> None:
    if df is None:
        return
    missing = [c for c in cols if c not in df]
    if missing:
        raise ConfigError(f"{what} lacks column(s) {missing}; pass a folder written by python -m experiments rules")


@dataclasses.dataclass(frozen=True)
class RulesData:
    """Everything ``verdicts`` reads, loaded from a rules folder.

    Attributes:
        path: the folder.
        runs: ``rows.csv``: training runs, one per (configuration, repeat), with ``claims`` and ``tier``.
        rows: ``experiments.results.summarize(runs)`` with intervals of data_wait_frac too.
        probe, pinned, memory, device_put, mmap: the other parts' tables (None where not measured).
        meta: ``rules.json`` (parts, errors, cpu_count, worker levels, baseline).
    """

    path: Path
    runs: pd.DataFrame
    rows: pd.DataFrame
    probe: pd.DataFrame | None = None
    pinned: pd.DataFrame | None = None
    memory: pd.DataFrame | None = None
    device_put: pd.DataFrame | None = None
    mmap: pd.DataFrame | None = None
    meta: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def load(cls, path) -> "RulesData":
        """Reads a rules folder; ConfigError naming the folder or the missing columns."""
        path = Path(path)
        if not path.is_dir():
            raise ConfigError(f"rules folder {str(path)!r} does not exist or is not a folder; pass the folder "
                              "python -m experiments rules wrote (or a study's rules/ folder)")
        files = ("rows.csv", "probe/rows.csv", "pinned.csv", "memory.csv", "device_put.csv", "mmap.csv")
        if not any((path / f).exists() for f in files):
            raise ConfigError(f"{str(path)!r} holds none of {', '.join(files)}: it is not a rules folder; run "
                              "python -m experiments rules --preset quick")
        runs = _csv(path / "rows.csv")
        runs = pd.DataFrame() if runs is None else runs
        if len(runs):
            _need(runs, ("config_id", "status", "claims", "samples_per_s", "num_workers", "prefetch_buffer_size"),
                  f"{path / 'rows.csv'}")
        rows = results.summarize(runs, metrics=results.SUMMARY_METRICS + ("data_wait_frac",)) if len(runs) else runs
        meta = json.loads((path / "rules.json").read_text()) if (path / "rules.json").exists() else {}
        data = cls(path=path, runs=runs, rows=rows, probe=_csv(path / "probe" / "rows.csv"),
                   pinned=_csv(path / "pinned.csv"), memory=_csv(path / "memory.csv"),
                   device_put=_csv(path / "device_put.csv"), mmap=_csv(path / "mmap.csv"), meta=meta)
        _need(data.memory, ("what", "precision", "batch_size", "grad_accum_steps", "xla_step_bytes",
                            "footprint_device_bytes"), f"{path / 'memory.csv'}")
        _need(data.device_put, ("nbytes", "rss_before", "rss_after_device_put", "rss_host_dropped", "rss_end"),
              f"{path / 'device_put.csv'}")
        _need(data.mmap, ("samples_read", "num_samples", "limit_bytes", "file_bytes", "ram_load"),
              f"{path / 'mmap.csv'}")
        _need(data.pinned, ("status",), f"{path / 'pinned.csv'}")
        _need(data.probe, ("probe", "phase", "status", "size_bytes", "bandwidth_Bps", "repeat"),
              f"{path / 'probe' / 'rows.csv'}")
        return data


# ------------------------------------------------------------------------------------ helpers

def _ok(rows: pd.DataFrame, claim: str) -> pd.DataFrame:
    if not len(rows) or "claims" not in rows:
        return rows.iloc[:0] if len(rows.columns) else pd.DataFrame()
    tagged = rows["claims"].astype(str).str.split(";").map(lambda t: claim in t)
    return rows[tagged & (rows["status"] == "ok")]


def _predicted_ratio(predict: PredictFn | None, a: pd.Series, b: pd.Series) -> tuple[float, str]:
    if predict is None:
        return math.nan, "no calibrated model"
    try:
        out = predict(pd.DataFrame([a, b]).reset_index(drop=True))
        return float(out["samples_per_s"].iloc[0]) / float(out["samples_per_s"].iloc[1]), "calibrated cost model"
    except Exception as e:  # noqa: BLE001 — the table says why there is no prediction
        return math.nan, f"prediction failed: {type(e).__name__}: {e}"


def _row(claim: str, measured=math.nan, lo=math.nan, hi=math.nan, predicted=math.nan, predicted_from="",
         verdict: str | None = None, reason: str = "") -> dict:
    statement, quantity, claimed, band_lo, band_hi = CLAIMS[claim]
    if verdict is None:
        verdict = judge(measured, lo, hi, band_lo, band_hi)
    return {"claim": claim, "statement": statement, "quantity": quantity, "claimed": claimed,
            "claimed_lo": band_lo, "claimed_hi": band_hi, "measured": measured, "measured_lo": lo,
            "measured_hi": hi, "predicted": predicted, "predicted_from": predicted_from, "verdict": verdict,
            "reason": reason}


def _not_measured(claim: str, data: RulesData, what: str) -> dict:
    err = data.meta.get("errors", {})
    failed = [f"{k}: {v}" for k, v in err.items() if k in what.split(",")]
    why = (f"the part failed ({'; '.join(failed)})" if failed else
           f"this run did not measure it (parts: {', '.join(data.meta.get('parts', [])) or 'unknown'})")
    return _row(claim, verdict="not measured", predicted_from="",
                reason=f"{why}; python -m experiments rules --preset quick measures it.")


def _cores(data: RulesData) -> int:
    return int(data.meta.get("cpu_count") or (data.rows["cpu_count"].iloc[0] if "cpu_count" in data.rows else 2))


def _platform(data: RulesData) -> str:
    env = data.meta.get("environment") or {}
    return str(env.get("platform") or (data.rows["platform"].iloc[0] if "platform" in data.rows and len(data.rows)
                                       else "unknown"))


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{x:.0%}"


# ---------------------------------------------------------------------------------- the claims

def claim_workers(data: RulesData, predict: PredictFn | None) -> dict:
    ok = _ok(data.rows, "1")
    if ok["num_workers"].nunique() < 2 if len(ok) else True:
        return _not_measured("1", data, "workers")
    cores = _cores(data)
    by = ok.sort_values("num_workers").drop_duplicates("num_workers").set_index("num_workers", drop=False)
    zero = by.loc[by.index.min()]
    at = by.loc[min(by.index, key=lambda w: (abs(w - cores), -w))]
    m, lo, hi = ratio_interval(at, zero)
    pred, pfrom = _predicted_ratio(predict, at, zero)
    best = by.loc[by["samples_per_s"].idxmax()]
    bm, blo, _ = ratio_interval(best, zero)
    band_lo = CLAIMS["1"][3]
    verdict = judge(m, lo, hi, band_lo, CLAIMS["1"][4])
    if verdict != "holds" and blo >= band_lo and best.num_workers != at.num_workers:
        verdict = "depends"
    step0, stepc = float(zero["compute_time_median_s"]), float(at["compute_time_median_s"])
    wait0, waitc = float(zero["data_wait_frac"]), float(at["data_wait_frac"])
    if stepc > 1.1 * step0:
        why = (f"{cores} cores: the workers compete with the step (its compute {step0 * 1e3:.1f} → "
               f"{stepc * 1e3:.1f} ms per step)")
    elif wait0 < 0.1:
        why = f"the loader was not the bottleneck (input wait {_pct(wait0)} with no workers)"
    else:
        why = f"input wait {_pct(wait0)} with no workers, {_pct(waitc)} with {int(at.num_workers)}"
    reason = (f"{int(at.num_workers)} workers (the nearest level to {cores} cores) ran ×{m:.2f} of 0 workers; "
              f"best {int(best.num_workers)} workers ×{bm:.2f}; {why}.")
    return _row("1", m, lo, hi, pred, pfrom, verdict, reason)


def _preset_for(device_kind: str):
    from memsim import machines
    kind = str(device_kind).lower()
    return machines.h200() if "h200" in kind else machines.h100_sxm() if "h100" in kind else machines.workstation_2020()


def _device_tier(h) -> str:
    return "gpu" if h.has_tier("gpu") else "hbm"


def claim_pinned(data: RulesData, predict: PredictFn | None) -> dict:
    p = data.pinned
    if p is None or not len(p):
        return _not_measured("2", data, "pinned")
    kind = str(p["device_kind"].iloc[0]) if "device_kind" in p else ""
    h = _preset_for(kind)
    dev = _device_tier(h)
    pred = h.link("pinned_host", dev).bandwidth_Bps / h.link("ram", dev).bandwidth_Bps
    pfrom = f"memsim.machines.{h.name} (spec sheet)"
    ok = p[p["status"] == "ok"]
    if not len(ok):
        note = str(p["note"].iloc[0]) if "note" in p else "not measured"
        return _row("2", predicted=pred, predicted_from=pfrom, verdict="untestable here", reason=note + ".")
    per_round = ok.groupby("round")["pinned_speedup"].median() if "round" in ok else ok["pinned_speedup"]
    lo, hi, _ = results.median_interval(per_round.to_numpy(float))
    m = float(per_round.median())
    reason = (f"{int(ok['size_bytes'].iloc[0]) / MiB:.0f} MiB copies on {kind}: pageable "
              f"{float(ok['pageable_Bps'].median()) / 1e9:.1f} GB/s, pinned {float(ok['pinned_Bps'].median()) / 1e9:.1f}"
              f" GB/s; pinning a batch first costs ×{float(ok['staged_speedup'].median()):.2f} overall.")
    return _row("2", m, lo, hi, pred, pfrom, None, reason)


def claim_prefetch(data: RulesData, predict: PredictFn | None) -> dict:
    ok = _ok(data.rows, "3")
    if not len(ok) or ok["prefetch_buffer_size"].nunique() < 2:
        return _not_measured("3", data, "prefetch")
    by = ok.sort_values("prefetch_buffer_size").drop_duplicates("prefetch_buffer_size")
    low, deep = by.iloc[0], by.iloc[-1]
    m, lo, hi = ratio_interval(deep, low)
    pred, pfrom = _predicted_ratio(predict, deep, low)
    verdict = judge(m, lo, hi, CLAIMS["3"][3], CLAIMS["3"][4])
    wait_deep = float(deep["data_wait_frac"])
    if verdict == "holds" and wait_deep >= 0.1:
        verdict = "depends"
    workers = int(deep["num_workers"])
    why = ("the loader cannot keep up, so a deeper buffer only delays the wait" if wait_deep >= 0.1 else
           "the buffer hides the input wait")
    if workers == 0 and m < CLAIMS["3"][3]:
        why += " (no worker processes: the prefetch thread shares the cores and the GIL with the step)"
    reason = (f"prefetch {int(low.prefetch_buffer_size)} → {int(deep.prefetch_buffer_size)} with {workers} workers: "
              f"×{m:.2f}, input wait {_pct(float(low.data_wait_frac))} → {_pct(wait_deep)}; {why}.")
    return _row("3", m, lo, hi, pred, pfrom, verdict, reason)


def claim_precision_speed(data: RulesData, predict: PredictFn | None) -> dict:
    ok = _ok(data.rows, "4a")
    if not len(ok) or set(ok["precision"]) < {"fp32", "bf16"}:
        return _not_measured("4a", data, "precision")
    fp32 = ok[ok["precision"] == "fp32"].iloc[0]
    bf16 = ok[ok["precision"] == "bf16"].iloc[0]
    m, lo, hi = ratio_interval(bf16, fp32)
    pred, pfrom = _predicted_ratio(predict, bf16, fp32)
    step, _, _ = ratio_interval(bf16, fp32, "device_resident_samples_per_s")
    reason = (f"the step alone (device-resident) ran ×{step:.2f} in bf16 on {_platform(data)}; input wait "
              f"{_pct(float(fp32.data_wait_frac))} (fp32) and {_pct(float(bf16.data_wait_frac))} (bf16).")
    return _row("4a", m, lo, hi, pred, pfrom, None, reason)


def _memory_pair(mem: pd.DataFrame, what_a: str, a: dict, what_b: str, b: dict) -> tuple[pd.Series, pd.Series] | None:
    def pick(what, sel):
        m = mem[mem["what"] == what]
        for k, v in sel.items():
            m = m[m[k] == v]
        return m.iloc[0] if len(m) else None
    pa, pb = pick(what_a, a), pick(what_b, b)
    return None if pa is None or pb is None else (pa, pb)


def _measured_peak(data: RulesData, claim: str, **sel) -> float:
    """A training run's measured device peak (platforms with allocator statistics), else NaN."""
    ok = _ok(data.rows, claim)
    for k, v in sel.items():
        ok = ok[ok[k] == v] if k in ok else ok.iloc[:0]
    if not len(ok) or "device_peak_bytes" not in ok:
        return math.nan
    v = pd.to_numeric(ok["device_peak_bytes"], errors="coerce").dropna()
    return float(v.iloc[0]) if len(v) else math.nan


def claim_precision_memory(data: RulesData, predict: PredictFn | None) -> dict:
    mem = data.memory
    pair = None if mem is None else _memory_pair(mem, "precision", {"precision": "fp32"}, "precision",
                                                 {"precision": "bf16"})
    if pair is None:
        return _not_measured("4b", data, "memory")
    f, b = pair
    peak_f, peak_b = _measured_peak(data, "4a", precision="fp32"), _measured_peak(data, "4a", precision="bf16")
    if np.isfinite(peak_f) and np.isfinite(peak_b):
        m, src = peak_f / peak_b, "the training runs' measured device peak"
    else:
        m, src = float(f.xla_step_bytes) / float(b.xla_step_bytes), "XLA's memory analysis of the compiled step"
    pred = float(f.footprint_device_bytes) / float(b.footprint_device_bytes)
    reason = (f"{src}: {float(f.xla_step_bytes) / MiB:.2f} → {float(b.xla_step_bytes) / MiB:.2f} MiB; the parameters "
              f"and optimizer state stay float32 ({float(f.param_bytes) / MiB:.2f} MiB of parameters in both), and "
              f"XLA's scratch went {float(f.xla_temp_bytes) / MiB:.2f} → {float(b.xla_temp_bytes) / MiB:.2f} MiB.")
    return _row("4b", m, m, m, pred, "memsim.footprint (activations from XLA)", None, reason)


def claim_grad_accum(data: RulesData, predict: PredictFn | None) -> dict:
    mem = data.memory
    if mem is None or not len(mem[mem["what"] == "micro_batch"]):
        return _not_measured("5", data, "memory")
    acc = mem[mem["what"] == "grad_accum"]
    g = int(acc["grad_accum_steps"].max())
    big = acc[acc["grad_accum_steps"] == g].iloc[0]
    one = acc[acc["grad_accum_steps"] == 1].iloc[0]
    micro = mem[(mem["what"] == "micro_batch") & (mem["batch_size"] == int(big.batch_size) // g)].iloc[0]
    m = float(big.xla_step_bytes) / float(micro.xla_step_bytes)
    pred = float(big.footprint_device_bytes) / float(micro.footprint_device_bytes)
    cost = ""
    ok = _ok(data.rows, "5")
    if len(ok) and ok["grad_accum_steps"].nunique() > 1:
        by = ok.set_index("grad_accum_steps", drop=False)
        if g in by.index and 1 in by.index:
            t, tlo, thi = ratio_interval(by.loc[g], by.loc[1])
            cost = f"; it ran at ×{t:.2f} [{tlo:.2f}, {thi:.2f}] the samples/s of G=1"
    reason = (f"XLA's memory analysis: batch {int(big.batch_size)} in {g} micro-batches takes ×{m:.2f} the bytes of batch "
              f"{int(micro.batch_size)} (the gradient accumulator adds the parameters' {float(big.param_bytes) / MiB:.2f} MiB)"
              f" and ×{float(big.xla_step_bytes) / float(one.xla_step_bytes):.2f} those of batch {int(one.batch_size)} "
              f"without accumulation{cost}.")
    return _row("5", m, m, m, pred, "memsim.footprint (activations from XLA)", None, reason)


def _probe_at_largest(probe: pd.DataFrame, name: str) -> pd.DataFrame:
    p = probe[(probe["probe"] == name) & (probe["phase"] == "measure") & (probe["status"] == "ok")]
    return p[p["size_bytes"] == p["size_bytes"].max()] if len(p) else p


def claim_tiers(data: RulesData, predict: PredictFn | None) -> dict:
    probe = data.probe
    if probe is None:
        return _not_measured("6", data, "probes")
    ram, cold = _probe_at_largest(probe, "ram_copy"), _probe_at_largest(probe, "file_read_cold")
    if not len(ram) or not len(cold):
        return _not_measured("6", data, "probes")
    r = ram.groupby("repeat")["bandwidth_Bps"].median()
    c = cold.groupby("repeat")["bandwidth_Bps"].median()
    ratios = (r / c).dropna()
    lo, hi, _ = results.median_interval(ratios.to_numpy(float))
    m = float(ratios.median())
    h = _preset_for(str(probe["device_kind"].iloc[0]) if "device_kind" in probe else "")
    src = "ssd" if h.has_tier("ssd") else "nvme"
    pred = h.link("ram", "ram").bandwidth_Bps / h.link(src, "page_cache").bandwidth_Bps
    bw = {n: float(_probe_at_largest(probe, n)["bandwidth_Bps"].median()) / 1e9 if len(_probe_at_largest(probe, n))
          else math.nan for n in ("ram_copy", "file_read_warm", "file_read_cold", "device_copy")}
    platform = str(probe["platform"].iloc[0]) if "platform" in probe else _platform(data)
    reason = (f"RAM copy {bw['ram_copy']:.1f} GB/s, page cache {bw['file_read_warm']:.1f} GB/s, cold file "
              f"{bw['file_read_cold']:.2f} GB/s, device copy {bw['device_copy']:.1f} GB/s"
              + (" (platform cpu: the device is host RAM)" if platform == "cpu" else ""))
    tiers = _ok(data.rows, "6")
    if "tier" in tiers and {"ram", "cold"} <= set(tiers["tier"]):
        t = tiers.set_index("tier", drop=False)
        tm, tlo, thi = ratio_interval(t.loc["cold"], t.loc["ram"])
        reason += f"; training read from cold storage at ×{tm:.2f} [{tlo:.2f}, {thi:.2f}] of the RAM source's samples/s"
    return _row("6", m, lo, hi, pred, f"memsim.machines.{h.name} (spec sheet: RAM memcpy ÷ {src})", None,
                reason + ".")


def claim_mmap(data: RulesData, predict: PredictFn | None) -> dict:
    mm = data.mmap
    if mm is None or not len(mm):
        return _not_measured("7", data, "mmap")
    r = mm.iloc[-1]
    share = min(1.0, float(r.samples_read) / float(r.num_samples))
    err = r.get("read_error", "")
    if isinstance(err, str) and err:
        share = 0.0
    refused = str(r.ram_load).startswith("MemoryError")
    big = float(r.file_bytes) >= float(r.limit_bytes)
    verdict = judge(share, share, share, 1.0, 1.0)
    if verdict == "holds" and not (refused and big):
        verdict = "inconclusive"
    grow = (float(r.rss_anon_after) - float(r.rss_anon_before)) / MiB
    reason = (f"{r.limit_kind} {float(r.limit_bytes) / MiB:.0f} MiB, dataset {float(r.file_bytes) / MiB:.0f} MiB: "
              f"{share:.0%} of an epoch read in {float(r.read_s):.1f} s with {grow:.1f} MiB more private memory; "
              f"loading it into RAM {'was refused (MemoryError)' if refused else 'succeeded: the limit did not bind'}.")
    return _row("7", share, share, share, math.nan, "not modelled (memsim has no address-space limits)", verdict,
                reason)


def claim_device_put(data: RulesData, predict: PredictFn | None) -> dict:
    d = data.device_put
    if d is None or not len(d):
        return _not_measured("8", data, "device_put")
    n = d["nbytes"].astype(float)
    cpu = str(d["platform"].iloc[0]) == "cpu" if "platform" in d else True

    def dev(col):
        if cpu or col not in d:
            return 0.0
        return (pd.to_numeric(d[col], errors="coerce") - pd.to_numeric(d["device_bytes_before"], errors="coerce")).fillna(0)

    during = (d["rss_after_device_put"] - d["rss_before"] + dev("device_bytes_after_device_put")) / n
    after = (d["rss_host_dropped"] - d["rss_before"] + dev("device_bytes_host_dropped")) / n
    end = (d["rss_end"] - d["rss_before"] + dev("device_bytes_end")) / n
    lo, hi, _ = results.median_interval(during.to_numpy(float))
    m = float(during.median())
    aliased = bool(d["aliased"].fillna(False).astype(bool).any()) if "aliased" in d else False
    reason = (f"{float(n.iloc[0]) / MiB:.0f} MiB arrays: {m:.2f} copies right after device_put"
              + (" (platform cpu: the device copy is in host RAM too)" if cpu else "")
              + f", {float(after.median()):.2f} once the numpy array is dropped (the host copy is the caller's, not "
              f"JAX's), {float(end.median()):.2f} after the device array is dropped"
              + ("; device_put aliased the numpy buffer (zero-copy)" if aliased else "") + ".")
    return _row("8", m, lo, hi, math.nan, "not modelled (memsim's footprint has no transfer copies)", None, reason)


def _baseline(data: RulesData, ok: pd.DataFrame) -> pd.Series:
    base = data.meta.get("baseline") or {}
    sel = ok
    for k in KNOBS:
        if k in base and k in sel and len(sel[sel[k] == base[k]]):
            sel = sel[sel[k] == base[k]]
    if len(sel) == len(ok) and len(ok) > 1:  # no baseline recorded: the median configuration
        return ok.iloc[(ok["data_wait_frac"] - ok["data_wait_frac"].median()).abs().argsort().iloc[0]]
    return sel.iloc[0]


def claim_input_bound(data: RulesData, predict: PredictFn | None) -> dict:
    ok = _ok(data.rows, "9")
    if not len(ok):
        return _not_measured("9", data, "workers,prefetch,precision,grad_accum,tiers")
    lo_col = ok.get("data_wait_frac_lo", ok["data_wait_frac"])
    hi_col = ok.get("data_wait_frac_hi", ok["data_wait_frac"])
    n_in, n_out, n = int((lo_col > 0.5).sum()), int((hi_col < 0.5).sum()), len(ok)
    base = _baseline(data, ok)
    m = float(base["data_wait_frac"])
    lo, hi = float(base.get("data_wait_frac_lo", m)), float(base.get("data_wait_frac_hi", m))
    verdict = judge(m, lo, hi, 0.5, 1.0)
    if n_in and n_out:
        verdict = "depends"
    elif n_in == n:
        verdict = "holds"
    elif n_out == n:
        verdict = "does not hold"
    pred, pfrom = math.nan, "no calibrated model"
    if predict is not None:
        try:
            out = predict(pd.DataFrame([base]).reset_index(drop=True))
            if "data_wait_frac" in out:
                pred, pfrom = float(out["data_wait_frac"].iloc[0]), "calibrated cost model"
            else:
                b = out["bottleneck"].iloc[0] if "bottleneck" in out else "?"
                pfrom = f"calibrated cost model: no data_wait_frac (predicted bottleneck: {b})"
        except Exception as e:  # noqa: BLE001
            pfrom = f"prediction failed: {type(e).__name__}: {e}"
    transfer = ""
    if data.probe is not None and "device_resident_step_median_s" in base:
        h2d = data.probe[(data.probe["probe"] == "h2d_pageable") & (data.probe["phase"] == "measure")
                         & (data.probe["status"] == "ok")]
        if len(h2d):
            batch_bytes = float(base["batch_size"]) * float(base["image_size"]) ** 2 * 3 * 4
            near = h2d.iloc[(h2d["size_bytes"] - batch_bytes).abs().argsort()]
            near = near[near["size_bytes"] == near["size_bytes"].iloc[0]]
            t = batch_bytes / float(near["bandwidth_Bps"].median())
            wait = m * float(base["step_time_median_s"])
            transfer = (f"; of the baseline's {wait * 1e3:.1f} ms input wait per step, the host-to-device copy of "
                        f"its batch ({batch_bytes / MiB:.1f} MiB) takes {t * 1e3:.2f} ms (probe), the rest is the "
                        f"loader's; the step itself takes {float(base['device_resident_step_median_s']) * 1e3:.1f} ms")
    reason = (f"{n_in} of {n} configurations wait for input more than half the time beyond noise, "
              f"{n_out} less{transfer}.")
    return _row("9", m, lo, hi, pred, pfrom, verdict, reason)


CLAIM_FUNCTIONS = {"1": claim_workers, "2": claim_pinned, "3": claim_prefetch, "4a": claim_precision_speed,
                   "4b": claim_precision_memory, "5": claim_grad_accum, "6": claim_tiers, "7": claim_mmap,
                   "8": claim_device_put, "9": claim_input_bound}


def verdicts(data: RulesData, predict: PredictFn | None = None) -> pd.DataFrame:
    """One row per claim (``COLUMNS``), from this folder's measurements and intervals only.

    Args:
        data: a loaded rules folder (or one built by hand: only the tables a claim reads matter).
        predict: ``configs -> DataFrame`` with ``samples_per_s`` (the calibrated cost model), or
            None: the throughput claims' predicted effect is NaN, "no calibrated model".

    Returns:
        A DataFrame with one row per claim of ``CLAIMS``, in order.

    >>> empty = RulesData(path=Path("."), runs=pd.DataFrame(), rows=pd.DataFrame())
    >>> verdicts(empty).verdict.unique().tolist()
    ['not measured']
    """
    return pd.DataFrame([CLAIM_FUNCTIONS[c](data, predict) for c in CLAIMS], columns=list(COLUMNS))


def predictor_from_model(path) -> PredictFn:
    """The calibrated cost model in ``path`` as a ``predict`` callable (``analysis.costmodel``)."""
    try:
        from analysis import costmodel
    except ImportError:
        raise ConfigError(f"--model={str(path)!r}: analysis.costmodel is not in this version of the toolkit; "
                          "leave --model out (predicted effects are then NaN)") from None
    if not Path(path).exists():
        raise ConfigError(f"--model={str(path)!r}: no such file; pass a model file analysis.costmodel wrote")
    model = costmodel.load(path)
    return lambda configs: costmodel.predict(model, configs)


# ------------------------------------------------------------------------------------ figures

def workers_figure(rows: pd.DataFrame, cores: int, band: tuple[float, float] = (1.2, 1.4)) -> Figure:
    """samples/s against num_workers (median and interval), the claimed band over 0 workers shaded,
    the core count marked.

    >>> rows = pd.DataFrame({"num_workers": [0, 1, 2], "samples_per_s": [100.0, 130.0, 120.0]})
    >>> ax = workers_figure(rows, cores=2).axes[0]
    >>> ax.get_xlabel(), len(ax.patches) > 0
    ('num_workers', True)
    """
    r = rows.sort_values("num_workers")
    fig, ax = plt.subplots(figsize=(5, 3.4))
    y = r["samples_per_s"].to_numpy(float)
    lo = r.get("samples_per_s_lo", r["samples_per_s"]).to_numpy(float)
    hi = r.get("samples_per_s_hi", r["samples_per_s"]).to_numpy(float)
    ax.errorbar(r["num_workers"], y, yerr=[y - lo, hi - y], marker="o", capsize=3, label="measured (median, interval)")
    base = float(r["samples_per_s"].iloc[0])
    ax.axhspan(base * band[0], base * band[1], color="tab:green", alpha=0.15, label=f"claimed ×{band[0]}-{band[1]}")
    ax.axvline(cores, color="grey", ls="--", lw=1, label=f"{cores} cores")
    ax.set_xlabel("num_workers")
    ax.set_ylabel("samples/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def prefetch_figure(rows: pd.DataFrame) -> Figure:
    """samples/s and the input-wait share against prefetch_buffer_size.

    >>> rows = pd.DataFrame({"prefetch_buffer_size": [0, 2], "samples_per_s": [100.0, 110.0],
    ...                      "data_wait_frac": [0.5, 0.3]})
    >>> [ax.get_ylabel() for ax in prefetch_figure(rows).axes]
    ['samples/s', 'input wait (share of the loop)']
    """
    r = rows.sort_values("prefetch_buffer_size")
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.plot(r["prefetch_buffer_size"], r["samples_per_s"], marker="o", color="tab:blue")
    ax.set_xlabel("prefetch_buffer_size (batches)")
    ax.set_ylabel("samples/s")
    ax2 = ax.twinx()
    ax2.plot(r["prefetch_buffer_size"], r["data_wait_frac"], marker="s", color="tab:red", ls="--")
    ax2.set_ylabel("input wait (share of the loop)")
    ax2.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def tiers_figure(probe: pd.DataFrame) -> Figure:
    """Measured bandwidth of each tier (largest size, median) beside the quoted folklore numbers.

    >>> probe = pd.DataFrame({"probe": ["ram_copy", "file_read_cold"], "phase": "measure", "status": "ok",
    ...                       "size_bytes": 1e6, "bandwidth_Bps": [5e9, 1e9], "repeat": 0})
    >>> tiers_figure(probe).axes[0].get_yscale()
    'log'
    """
    names = {"device_copy": "device", "ram_copy": "RAM", "file_read_warm": "page cache", "file_read_cold": "cold file"}
    quoted = {"device_copy": 1000e9, "ram_copy": 50e9, "file_read_cold": 3e9}
    labels, meas, claim = [], [], []
    for k, lab in names.items():
        p = _probe_at_largest(probe, k)
        labels.append(lab)
        meas.append(float(p["bandwidth_Bps"].median()) if len(p) else np.nan)
        claim.append(quoted.get(k, np.nan))
    x = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ax.bar(x - 0.2, np.array(meas) / 1e9, 0.4, label="measured here")
    ax.bar(x + 0.2, np.array(claim) / 1e9, 0.4, label="folklore", color="tab:grey", alpha=0.6)
    ax.set_xticks(x, labels)
    ax.set_yscale("log")
    ax.set_ylabel("GB/s")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def device_put_figure(d: pd.DataFrame) -> Figure:
    """Host RSS (MiB above the start) at each step around ``jax.device_put``, median over repeats.

    >>> d = pd.DataFrame({"rss_before": [0], "rss_host_array": [1 << 20], "rss_after_device_put": [2 << 20],
    ...                   "rss_host_dropped": [1 << 20], "rss_end": [0]})
    >>> len(device_put_figure(d).axes[0].patches)
    5
    """
    steps = [("rss_before", "start"), ("rss_host_array", "numpy array"), ("rss_after_device_put", "device_put"),
             ("rss_host_dropped", "numpy dropped"), ("rss_end", "device dropped")]
    vals = [float((d[c] - d["rss_before"]).median()) / MiB for c, _ in steps]
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    ax.bar([lab for _, lab in steps], vals, color="tab:purple")
    ax.set_ylabel("host RSS above start (MiB)")
    ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------ section

def _fmt(v: float) -> str:
    if v != v:
        return ""
    return f"{v:.3g}"


def table(df: pd.DataFrame) -> str:
    """The verdict table as Markdown (claim, quantity, claimed, measured [interval], predicted, verdict, reason)."""
    shown = pd.DataFrame({
        "claim": df["claim"] + ". " + df["statement"],
        "quantity": df["quantity"],
        "claimed": df["claimed"],
        "measured [interval]": [("" if m != m else f"{_fmt(m)} [{_fmt(lo)}, {_fmt(hi)}]")
                                for m, lo, hi in zip(df["measured"], df["measured_lo"], df["measured_hi"])],
        "predicted": [_fmt(p) if p == p else f"— ({src})" if src else "—"
                      for p, src in zip(df["predicted"], df["predicted_from"])],
        "verdict": "**" + df["verdict"] + "**",
        "reason": df["reason"],
    })
    return md_table(shown)


def figures(data: RulesData, out: Path) -> list[Path]:
    """The section's figures, written into ``out``; one per claim that a picture says better."""
    paths = []
    w = _ok(data.rows, "1")
    if len(w) and w["num_workers"].nunique() > 1:
        paths.append(save(workers_figure(w.drop_duplicates("num_workers"), _cores(data)), out / "rules_workers.png"))
    p = _ok(data.rows, "3")
    if len(p) and p["prefetch_buffer_size"].nunique() > 1:
        paths.append(save(prefetch_figure(p.drop_duplicates("prefetch_buffer_size")), out / "rules_prefetch.png"))
    if data.probe is not None and len(data.probe):
        paths.append(save(tiers_figure(data.probe), out / "rules_tiers.png"))
    if data.device_put is not None and len(data.device_put):
        paths.append(save(device_put_figure(data.device_put), out / "rules_device_put.png"))
    return paths


def section(study) -> str:
    """The report's "## Rules of thumb" section, from the study folder's ``rules/`` subfolder (its
    figures are written there); without it, how to produce it."""
    d = Path(study.path) / "rules"
    lines = ["## Rules of thumb", ""]
    err = (study.meta.get("errors") or {}).get("rules")
    if err:
        lines += [f"The rules stage of this study failed: `{err}`.", ""]
    if not d.is_dir():
        return "\n".join(lines + [
            "This study folder has no `rules/` folder. The study measures it (a cheap preset reusing the "
            "sweep's and probes' rows); for a folder written before, or for every claim measured on its own, run "
            "`python -m experiments rules --preset quick` and then `python -m analysis rules results/rules/<run_id>`."]) + "\n"
    data = RulesData.load(d)
    from analysis import costmodel
    from analysis.costmodel.section import calibrated_model
    model = calibrated_model(study)
    df = verdicts(data, None if model is None else (lambda configs: costmodel.predict(model, configs)))
    df.to_csv(d / RULES_CSV, index=False)
    counts = df["verdict"].value_counts()
    lines += [f"Popular advice about input pipelines, tested on this machine ({_platform(data)}, {_cores(data)} cores). "
              "Each claim's measured effect has the interval of its median over repeats; the verdict compares it "
              "with the claimed band (holds: the median is in the band; does not hold: the whole interval is "
              "outside it; inconclusive: the interval reaches the band but the median does not). "
              + ("Predicted effects come from the cost model calibrated on this study's sweep (its held-out error "
               "is in \"Predicted vs measured\")." if model is not None else
               "Predicted effects need a calibrated cost model (`python -m analysis rules DIR --model MODEL.json`)."),
              "", "Verdicts: " + ", ".join(f"{k} {v}" for k, v in counts.items()) + ".", "", table(df), ""]
    if data.meta.get("study_dir"):
        lines += ["Claims 1, 3 and 9 are read from this study's own sweep (its grid's controlled comparisons), "
                  "claim 6 from its probes; `python -m experiments rules --preset quick` measures every claim with "
                  "training runs of its own.", ""]
    figs = figures(data, d)
    if figs:
        lines += ["### Figures", ""] + [f"![{p.stem}](rules/{p.name})" for p in figs]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------ python -m analysis rules

HELP = "the rules-of-thumb verdicts of a rules folder: writes rules.csv there and prints the table"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("results_dir", metavar="DIR", help="a folder python -m experiments rules wrote (or a study's rules/)")
    p.add_argument("--model", default=None, metavar="MODEL.json",
                   help="a calibrated cost model (analysis.costmodel) for the predicted effects")
    p.add_argument("--json", action="store_true", help="also print one JSON object as the last line")


def run(args: argparse.Namespace) -> int:
    try:
        data = RulesData.load(args.results_dir)
        predict = predictor_from_model(args.model) if args.model else None
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    df = verdicts(data, predict)
    df.to_csv(data.path / RULES_CSV, index=False)
    print(table(df))
    print(f"\n{data.path / RULES_CSV}")
    if args.json:
        recs = json.loads(df.to_json(orient="records"))
        print(json.dumps({"rules": recs, "path": str(data.path / RULES_CSV)}))
    return 0
