"""Links of the memory hierarchy fitted from the probes' raw rows: t = α + n / B per probe.

``experiments.probes`` measures and appends raw rows (``<probe dir>/rows.csv``); this module fits
them. ``fit_links`` fits Hockney's α-β model per probe with a robust method (Theil-Sen slope,
latency from the small sizes, bootstrap intervals; see ``FIT_METHOD``); its table is what
``memsim.hierarchy.Hierarchy.from_probes`` reads. ``medians`` gives the median time per probe and
size; ``format_fits`` prints the fits as text.

    python -m analysis links PROBE_DIR [--csv FITS.csv]

prints the fitted links of a probe folder (and with ``--csv`` writes the table).
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys

import numpy as np
import pandas as pd
from scipy.stats import theilslopes

from experiments.probes import ENV_COLUMNS, PROBE_LINKS, PROBES, link_name
from experiments.results import read_csv_rows
from memsim.knobs import ConfigError

FIT_METHOD = ("Theil-Sen slope (scipy.stats.theilslopes) of seconds vs size over all measured "
              "repeats gives 1/B; alpha = median(t - n/B) over the smallest sizes up to the first "
              "with n/B > 0.8 median t, floored at 0; stderr and 95% CI by bootstrap "
              "(200 resamples, seed 0)")
FIT_COLUMNS = ("probe", "src", "dst", "link", "x_unit", "status", "alpha_s", "alpha_stderr_s",
               "alpha_ci_low_s", "alpha_ci_high_s", "beta_Bps", "beta_stderr_Bps", "beta_ci_low_Bps",
               "beta_ci_high_Bps", "flop_rate", "flop_rate_stderr", "flop_rate_ci_low",
               "flop_rate_ci_high", "r2", "r2_log",
               "n_points", "n_sizes", "min_size_bytes", "max_size_bytes", "method", "note")


def alpha_beta(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(alpha, slope) of y = alpha + slope · x: Theil-Sen slope, alpha from the smallest sizes.

    Example:
        >>> x = np.repeat([1e3, 1e4, 1e5, 1e6], 2)
        >>> a, s = alpha_beta(x, 1e-5 + x / 1e9)
        >>> round(a, 9), round(1 / s)
        (1e-05, 1000000000)
    """
    # 1/B: Theil-Sen, the median of pairwise slopes (pairs of equal size are skipped). With a
    # geometric size sweep most pairs include a large size, so 1/B follows the large transfers.
    slope = float(theilslopes(y, x).slope)
    # alpha: only identifiable where it is a sizeable part of t, so take the median of t - n/B
    # over the points of the smallest sizes, up to the first size where n/B > 0.8 × its median t
    # (medians, so one outlier cannot promote a size; a prefix, so a large size that runs below
    # B cannot pass for a latency-dominated one); at least the smallest size; never < 0.
    # When alpha is below n/B even at the smallest size it is not identifiable from the sweep.
    sizes_ = np.unique(x)
    med = np.array([np.median(y[x == v]) for v in sizes_])
    ok = slope * sizes_ <= 0.8 * med
    k = max(1, int(np.argmin(ok)) if not ok.all() else ok.size)
    small = np.isin(x, sizes_[:k])
    alpha = max(0.0, float(np.median(y[small] - slope * x[small])))
    return alpha, slope


def fit_one(x: np.ndarray, y: np.ndarray, n_boot: int = 200, seed: int = 0) -> dict:
    """Robust fit of y = alpha + x / B; bootstrap standard errors and 95 % intervals.

    Returns ``{"ok": False, "note": ...}`` when the slope is not positive, else ``ok`` True with
    ``alpha_s``, ``rate`` (B) and their ``*_stderr``, ``*_ci_low``, ``*_ci_high``, ``r2``, ``r2_log``.
    """
    alpha, slope = alpha_beta(x, y)
    if not slope > 0:
        return {"ok": False, "note": f"Theil-Sen slope {slope:.3g} s/unit is not positive: time does "
                                     "not grow with size in these rows"}
    y_hat = alpha + slope * x
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - y_hat) ** 2)) / ss_tot if ss_tot > 0 else float("nan")
    ly, lyh = np.log(y), np.log(y_hat)
    ss_tot_l = float(np.sum((ly - ly.mean()) ** 2))
    r2_log = 1.0 - float(np.sum((ly - lyh) ** 2)) / ss_tot_l if ss_tot_l > 0 else float("nan")
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        i = rng.integers(0, len(x), len(x))
        if np.unique(x[i]).size < 3:
            continue
        a, sl = alpha_beta(x[i], y[i])
        if sl > 0:
            boots.append((a, 1.0 / sl))
    nan = float("nan")
    if len(boots) >= 20:
        b = np.array(boots)
        se_a, se_r = float(b[:, 0].std(ddof=1)), float(b[:, 1].std(ddof=1))
        lo_a, hi_a = (float(v) for v in np.percentile(b[:, 0], [2.5, 97.5]))
        lo_r, hi_r = (float(v) for v in np.percentile(b[:, 1], [2.5, 97.5]))
    else:
        se_a = se_r = lo_a = hi_a = lo_r = hi_r = nan
    return {"ok": True, "alpha_s": alpha, "alpha_stderr_s": se_a, "alpha_ci_low_s": lo_a,
            "alpha_ci_high_s": hi_a, "rate": 1.0 / slope, "rate_stderr": se_r, "rate_ci_low": lo_r,
            "rate_ci_high": hi_r, "r2": r2, "r2_log": r2_log}


def fit_links(raw: pd.DataFrame) -> pd.DataFrame:
    """Fits t = alpha_s + n / beta_Bps per probe (beta_Bps is bandwidth, bytes/s, i.e. 1/β).

    ``raw`` is the probes' rows (``experiments.probes.run`` or a probe folder's ``rows.csv``).
    For matmul probes the x axis is flops and the rate goes to ``flop_rate`` (beta_Bps is NaN).
    Uses the rows with phase "measure" and status "ok"; probes with fewer than 3 sizes get
    status "not fitted", probes with no measured row keep status "not measured". The rows'
    environment columns (``experiments.probes.ENV_COLUMNS``) are copied onto every fit.

    Example:
        >>> n = np.repeat(4096 * 4.0 ** np.arange(5), 3)
        >>> raw = pd.DataFrame({"probe": "ram_copy", "phase": "measure", "status": "ok",
        ...                     "size_bytes": n, "seconds": 2e-6 + n / 1e10, "flops": np.nan})
        >>> f = fit_links(raw).iloc[0]
        >>> f["status"], f"{f['beta_Bps']:.3g}", f"{f['alpha_s']:.3g}"
        ('ok', '1e+10', '2e-06')
    """
    if not isinstance(raw, pd.DataFrame):
        raise TypeError(f"raw is a {type(raw).__name__}; pass the DataFrame from probes.run() "
                        "(or a probe folder's rows.csv read with pandas)")
    need = ["probe", "phase", "status", "size_bytes", "seconds", "flops"]
    missing = [c for c in need if c not in raw.columns]
    if missing:
        raise ValueError(f"raw rows lack column(s) {missing}; columns present: {list(raw.columns)}. "
                         "Pass the rows probes.run() returned (or rows.csv)")
    unknown = sorted(set(raw["probe"]) - set(PROBE_LINKS))
    if unknown:
        raise ValueError(f"raw rows name unknown probe(s) {unknown}; known: {', '.join(PROBES)}")
    ok = raw[(raw["phase"] == "measure") & (raw["status"] == "ok")]
    bad = ok[ok["seconds"].isna() | ok["size_bytes"].isna()]
    if len(bad):
        r = bad.iloc[0]
        raise ValueError(f"NaN in an 'ok' row: probe={r['probe']!r} "
                         f"size_bytes={float(r['size_bytes'])!r} seconds={float(r['seconds'])!r}; "
                         "drop the row or mark it status='not measured'")
    nonpos = ok[ok["seconds"] <= 0]
    if len(nonpos):
        r = nonpos.iloc[0]
        raise ValueError(f"seconds={float(r['seconds'])!r} <= 0 for probe={r['probe']!r} "
                         f"size_bytes={float(r['size_bytes'])!r}: a timing must be positive")
    env = {c: raw[c].iloc[0] for c in ENV_COLUMNS if c in raw.columns and len(raw)}
    rows = []
    for probe in [p for p in PROBES if p in set(raw["probe"])]:
        src, dst, unit = PROBE_LINKS[probe]
        base = {"probe": probe, "src": src, "dst": dst, "link": link_name(probe), "x_unit": unit,
                "method": FIT_METHOD}
        nan = float("nan")
        empty = {c: nan for c in FIT_COLUMNS[6:20]}
        sel = ok[ok["probe"] == probe]
        if sel.empty:
            notes = raw.loc[(raw["probe"] == probe) & (raw["status"] != "ok"), "note"]
            rows.append({**base, **empty, "status": "not measured", "n_points": 0, "n_sizes": 0,
                         "min_size_bytes": nan, "max_size_bytes": nan,
                         "note": str(notes.iloc[0]) if len(notes) else "no measured rows"})
            continue
        x = (sel["flops"] if unit == "flop" else sel["size_bytes"]).to_numpy(float)
        y = sel["seconds"].to_numpy(float)
        n_sizes = int(np.unique(x).size)
        info = {"n_points": int(len(x)), "n_sizes": n_sizes,
                "min_size_bytes": float(sel["size_bytes"].min()),
                "max_size_bytes": float(sel["size_bytes"].max())}
        if n_sizes < 3:
            rows.append({**base, **empty, **info, "status": "not fitted",
                         "note": f"{n_sizes} distinct size(s); the fit needs >= 3"})
            continue
        f = fit_one(x, y)
        if not f["ok"]:
            rows.append({**base, **empty, **info, "status": "not fitted", "note": f["note"]})
            continue
        out = {**base, **empty, **info, "status": "ok", "note": ""}
        for k in ("alpha_s", "alpha_stderr_s", "alpha_ci_low_s", "alpha_ci_high_s", "r2", "r2_log"):
            out[k] = f[k]
        if unit == "flop":
            out.update(flop_rate=f["rate"], flop_rate_stderr=f["rate_stderr"],
                       flop_rate_ci_low=f["rate_ci_low"], flop_rate_ci_high=f["rate_ci_high"])
        else:
            out.update(beta_Bps=f["rate"], beta_stderr_Bps=f["rate_stderr"],
                       beta_ci_low_Bps=f["rate_ci_low"], beta_ci_high_Bps=f["rate_ci_high"])
        rows.append(out)
    fits = pd.DataFrame(rows, columns=list(FIT_COLUMNS))
    for c, v in env.items():
        fits[c] = v
    return fits


def medians(raw: pd.DataFrame) -> pd.DataFrame:
    """Per probe and size: median seconds over the measured repeats, and the rate at the median.

    Example:
        >>> raw = pd.DataFrame({"probe": "ram_copy", "phase": "measure", "status": "ok",
        ...                     "size_bytes": [4096.0] * 3, "seconds": [1e-6, 2e-6, 9e-6],
        ...                     "flops": np.nan})
        >>> medians(raw)[["probe", "seconds_median", "repeats", "bandwidth_Bps"]].to_dict("records")
        [{'probe': 'ram_copy', 'seconds_median': 2e-06, 'repeats': 3, 'bandwidth_Bps': 2048000000.0}]
    """
    ok = raw[(raw["phase"] == "measure") & (raw["status"] == "ok")]
    g = ok.groupby(["probe", "size_bytes"], sort=False)
    out = g.agg(seconds_median=("seconds", "median"), repeats=("seconds", "size"),
                flops=("flops", "first")).reset_index()
    out["bandwidth_Bps"] = out["size_bytes"] / out["seconds_median"]
    out["flop_rate"] = out["flops"] / out["seconds_median"]
    return out


def format_fits(fits: pd.DataFrame) -> str:
    """The fits as a fixed-width text table (one line per probe), for a terminal."""
    lines = [f"{'probe':<15} {'link':<24} {'alpha_s':>10} {'beta_Bps':>10} {'flop/s':>10} "
             f"{'r2':>7} {'r2_log':>7} {'n':>4}  status"]
    for _, r in fits.iterrows():
        def g(v):
            return f"{v:10.3g}" if isinstance(v, (int, float)) and not math.isnan(v) else f"{'-':>10}"
        r2 = f"{r['r2']:7.4f}" if not math.isnan(r["r2"]) else f"{'-':>7}"
        r2l = f"{r['r2_log']:7.4f}" if not math.isnan(r["r2_log"]) else f"{'-':>7}"
        lines.append(f"{r['probe']:<15} {r['link']:<24} {g(r['alpha_s'])} {g(r['beta_Bps'])} "
                     f"{g(r['flop_rate'])} {r2} {r2l} {int(r['n_points']):>4}  {r['status']}")
    return "\n".join(lines)


def load_rows(probe_dir: str | pathlib.Path) -> pd.DataFrame:
    """The raw rows of a probe folder (``rows.csv``, dtypes from ``rows.columns.json`` when there)."""
    path = pathlib.Path(probe_dir) / "rows.csv"
    if not path.is_file():
        raise ConfigError(f"probe_dir={str(probe_dir)!r}: no rows.csv there; pass a folder that "
                          "experiments.probes wrote (results/probe/<run_id> or <study>/probe)")
    return read_csv_rows(path)


# ---- command line: python -m analysis links PROBE_DIR --------------------------------------------

HELP = "fit t = α + n / B per probe to a probe folder's rows.csv and print the links"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("probe_dir", type=pathlib.Path,
                   help="a folder with the probes' rows.csv (results/probe/<run_id> or <study>/probe)")
    p.add_argument("--csv", type=pathlib.Path, default=None,
                   help="also write the fitted table to this CSV file")


def run(args: argparse.Namespace) -> int:
    try:
        fits = fit_links(load_rows(args.probe_dir))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_fits(fits))
    print(f"\n{int((fits['status'] == 'ok').sum())} of {len(fits)} links fitted; method: {FIT_METHOD}")
    if args.csv is not None:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        fits.to_csv(args.csv, index=False)
        print(f"wrote {args.csv}")
    return 0
