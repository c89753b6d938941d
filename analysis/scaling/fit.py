"""Scaling-law fits on loss tables: pandas in, lmfit/statsmodels-style reports out.

Two laws, one fitting method (``analysis.scaling.search``):

- :func:`fit_power_law`: L(x) = L∞ + k·x^(−α), L∞ ≥ 0 (Kaplan et al. 2020, eq. 1.1-1.3 with an
  irreducible term), fitted as log L = LSE(log k − α log x, log L∞).
- :func:`fit_chinchilla`: L(N, D) = E + A/N^α + B/D^β (Hoffmann et al. 2022, eq. 2), fitted
  by their "Approach 3": with a = log A, b = log B, e = log E, predict log L as
  LSE(a − α log N, b − β log D, e) and minimise the **sum** of Huber losses (δ = 1e-3) between
  predicted and observed log-loss, by L-BFGS from all 4,500 points of the grid
  α, β ∈ {0, 0.5, …, 2}, e ∈ {−1, −0.5, …, 1}, a, b ∈ {0, 5, …, 25}; the best is kept and the
  report says how many starts reached it.

Uncertainty comes from the bootstrap (:func:`bootstrap`): rows are resampled with replacement
(1,000 resamples by default, seeded) and every resample is refitted with the full multi-start
search; standard errors are the resamples' standard deviations and intervals their percentiles.
:func:`compute_optimal` turns a joint fit into the compute-optimal allocation for C ≈ 6·N·D.

Outliers are handled only when asked (``drop_highest_loss=k`` drops the k rows with the
highest loss before fitting) and the report always says what was dropped.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import pandas as pd

from analysis.scaling import search as ss
from analysis.scaling.fit_input import FitInputError, numeric_columns, require_distinct

__all__ = [
    "ScalingFit",
    "ComputeOptimal",
    "fit_power_law",
    "fit_chinchilla",
    "bootstrap",
    "compute_optimal",
    "FitInputError",
]

_LAWS = {
    # law: (feature roles, natural parameter names, formula)
    "power_law": (("x",), ("L_inf", "k", "alpha"), "L = L_inf + k * x^(-alpha)"),
    "chinchilla": (("n", "d"), ("E", "A", "B", "alpha", "beta"), "L = E + A / N^alpha + B / D^beta"),
}


#: the largest log a float64 exponential holds; a coefficient whose log is beyond it is infinite
_LOG_MAX = float(np.log(np.finfo(np.float64).max))
#: resample estimates beyond this magnitude make their standard deviation meaningless (its squares
#: overflow float64 past 1e154): such a parameter's stderr is reported as infinite
_STD_LIMIT = 1e150


def _exp(x: np.ndarray) -> np.ndarray:
    """exp(x), infinite where x is beyond float64's range: a bootstrap resample of the quick scaling
    run's 15 points can send a coefficient's log past 709 (a law with one term absent), and that
    estimate is infinite, said so, not an overflow warning."""
    x = np.asarray(x, np.float64)
    return np.where(x > _LOG_MAX, np.inf, np.exp(np.minimum(x, _LOG_MAX)))


def natural_params(law: str, raw: np.ndarray) -> np.ndarray:
    """Raw (c_1, α_1, ..., e) -> the law's parameters in its natural order and units; a coefficient
    whose log is beyond float64's range is ``inf``."""
    raw = np.asarray(raw, np.float64)
    if law == "power_law":
        c, alpha, e = raw[..., 0], raw[..., 1], raw[..., 2]
        return np.stack([_exp(e), _exp(c), alpha], axis=-1)
    a, alpha, b, beta, e = (raw[..., i] for i in range(5))
    return np.stack([_exp(e), _exp(a), _exp(b), alpha, beta], axis=-1)


def resample_interval(samples: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    """Per column, the ``(1 ∓ ci)/2`` percentiles of resampled estimates: interpolated between
    neighbouring estimates where every estimate is finite, the nearest estimate itself (no
    interpolation: ``inf − inf`` has no value) in a column where some resample diverged.

    Example:
        >>> lo, hi = resample_interval(np.array([[1.0, 1.0], [2.0, np.inf], [3.0, np.inf]]), 0.5)
        >>> lo.tolist(), hi.tolist()
        ([1.5, 1.0], [2.5, inf])
    """
    samples = np.asarray(samples, np.float64)
    q = [50 * (1 - ci), 50 * (1 + ci)]
    lo, hi = np.empty(samples.shape[1]), np.empty(samples.shape[1])
    finite = np.isfinite(samples).all(axis=0)
    if finite.any():
        lo[finite], hi[finite] = np.percentile(samples[:, finite], q, axis=0)
    if (~finite).any():
        lo[~finite], hi[~finite] = np.percentile(samples[:, ~finite], q, axis=0, method="inverted_cdf")
    return lo, hi


def resample_std(samples: np.ndarray) -> tuple[np.ndarray, int]:
    """Per column, the standard deviation (ddof=1) of resampled estimates, and how many resamples
    diverged (some estimate infinite or beyond ``_STD_LIMIT``). A column with a diverged resample
    has no meaningful standard deviation: its stderr is ``inf``.

    Example:
        >>> std, n = resample_std(np.array([[1.0, 2.0], [3.0, 1e200], [5.0, 3.0]]))
        >>> std.tolist(), n
        ([2.0, inf], 1)
    """
    samples = np.asarray(samples, np.float64)
    bad = ~np.isfinite(samples) | (np.abs(samples) > _STD_LIMIT)
    std = np.full(samples.shape[1], np.inf)
    ok = ~bad.any(axis=0)
    if ok.any():
        std[ok] = samples[:, ok].std(axis=0, ddof=1)
    return std, int(bad.any(axis=1).sum())


def _predict_log(raw: np.ndarray, log_x: np.ndarray) -> np.ndarray:
    """log L = LSE(c_k - α_k log X_k, e) for raw parameters, rows of log_x (K, n)."""
    k = log_x.shape[0]
    terms = [raw[2 * i] - raw[2 * i + 1] * log_x[i] for i in range(k)]
    terms.append(np.full(log_x.shape[1], raw[2 * k]))
    return np.logaddexp.reduce(np.stack(terms), axis=0)


@dataclasses.dataclass(frozen=True)
class ScalingFit:
    """A fitted scaling law.

    Attributes:
        law: ``"power_law"`` or ``"chinchilla"``.
        formula: the law, in words.
        columns: role -> column name in the fitted table (``x``/``loss`` or ``n``/``d``/``loss``).
        params: one row per parameter: ``param, value, stderr, ci_low, ci_high`` (stderr and
            interval from the bootstrap; NaN without one).
        stats: one row: ``n`` rows fitted, ``n_params``, ``objective`` (sum of Huber losses),
            ``rmse_log`` (RMS log-loss residual), ``r2_log`` (R² of log-loss), ``huber_delta``,
            ``n_starts``, ``n_at_best`` (starts that reached the best objective),
            ``n_converged``, ``n_dropped``, ``n_bootstrap``.
        data: the rows fitted (the role columns under their original names).
        dropped: the rows left out by ``drop_highest_loss``.
        bootstrap_params: one row per bootstrap resample (the parameters, ``objective`` and
            ``n_at_best``), or None.
        options: the settings that produced the fit (``drop_highest_loss``, ``huber_delta``,
            ``ci``, ``seed``).
    """

    law: str
    formula: str
    columns: dict
    params: pd.DataFrame
    stats: pd.DataFrame
    data: pd.DataFrame
    dropped: pd.DataFrame
    bootstrap_params: pd.DataFrame | None
    options: dict
    raw: np.ndarray = dataclasses.field(repr=False)
    starts: np.ndarray = dataclasses.field(repr=False)

    # -- values ------------------------------------------------------------------------------
    def value(self, name: str) -> float:
        """The fitted value of one parameter, e.g. ``fit.value("alpha")``."""
        row = self.params.loc[self.params["param"] == name, "value"]
        if row.empty:
            raise KeyError(f"no parameter {name!r}; this {self.law} fit has {self.params['param'].tolist()}")
        return float(row.iloc[0])

    @property
    def values(self) -> dict[str, float]:
        """Parameter name -> fitted value."""
        return dict(zip(self.params["param"], self.params["value"].astype(float)))

    def _log_features(self, df: pd.DataFrame, what: str) -> np.ndarray:
        roles = _LAWS[self.law][0]
        cols = numeric_columns(
            df, {r: self.columns[r] for r in roles}, positive=roles, n_params=0, what=what
        )
        return np.log(cols[list(roles)].to_numpy().T)

    # -- predictions -------------------------------------------------------------------------
    def predict(self, df: pd.DataFrame) -> pd.Series:
        """Predicted loss for the rows of ``df`` (which needs the fit's feature columns).

        Example:
            >>> rows = pd.DataFrame({"n": [1e8, 1e9], "d": [2e9, 2e10]})
            >>> fit = chinchilla_from_values(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)
            >>> fit.predict(rows).round(3).tolist()
            [3.486, 2.58]
        """
        log_x = self._log_features(df, f"{self.law}.predict")
        pred = np.exp(_predict_log(self.raw, log_x))
        return pd.Series(pred, index=df.index, name=f"{self.columns['loss']}_pred")

    def residuals(self) -> pd.DataFrame:
        """Predicted against measured for the fitted rows.

        Returns:
            The fitted rows with ``predicted``, ``residual_log`` (log measured − log predicted)
            and ``rel_error`` ((predicted − measured) / measured).
        """
        out = self.data.copy()
        loss = out[self.columns["loss"]].to_numpy(np.float64)
        pred = self.predict(out).to_numpy()
        out["predicted"] = pred
        out["residual_log"] = np.log(loss) - np.log(pred)
        out["rel_error"] = (pred - loss) / loss
        return out

    # -- report ------------------------------------------------------------------------------
    def report(self) -> str:
        """A plain-text report in the manner of lmfit's ``fit_report``."""
        st = self.stats.iloc[0]
        cols = ", ".join(f"{r}={c!r}" for r, c in self.columns.items())
        lines = [
            f"[[Model]]\n    {self.formula}    ({self.law}; columns {cols})",
            "[[Fit]]",
            f"    method        = L-BFGS from {int(st['n_starts'])} grid starts, sum of Huber losses on log-loss "
            f"(delta={st['huber_delta']:g})",
            f"    rows fitted   = {int(st['n'])}",
            f"    outliers      = {self.outlier_note()}",
            f"    objective     = {st['objective']:.6g}",
            f"    rmse_log      = {st['rmse_log']:.4g}",
            f"    r2_log        = {st['r2_log']:.4f}",
            f"    starts at best= {int(st['n_at_best'])} of {int(st['n_starts'])} "
            f"({int(st['n_converged'])} stopped by a convergence test)",
            f"    uncertainty   = {self.uncertainty_note()}",
            "[[Parameters]]",
        ]
        table = self.params.copy()
        lines.append(_indent(table.to_string(index=False, float_format=lambda v: f"{v:.6g}")))
        return "\n".join(lines)

    def outlier_note(self) -> str:
        """What was done about outliers, in words."""
        k = self.options.get("drop_highest_loss", 0)
        if not k:
            return "none dropped (drop_highest_loss=0)"
        labels = ", ".join(map(str, self.dropped.index.tolist()))
        return f"dropped the {k} rows with the highest {self.columns['loss']!r} (rows {labels})"

    def uncertainty_note(self) -> str:
        """How stderr and intervals were obtained, in words."""
        n_boot = int(self.stats.iloc[0]["n_bootstrap"])
        if n_boot == 0:
            return "no bootstrap (bootstrap=0): stderr and intervals not computed"
        ci = self.options.get("ci", 0.95)
        return (
            f"{n_boot} bootstrap resamples of rows (seed {self.options.get('seed')}), each refitted from "
            f"{self.bootstrap_starts_note()}; stderr = resample std, "
            f"{ci:.0%} percentile intervals{self.diverged_note()}"
        )

    def bootstrap_starts_note(self) -> str:
        """The starts each bootstrap resample was refitted from, in words ("all 4500 starts")."""
        st = self.stats.iloc[0]
        n = int(st.get("n_bootstrap_starts", st["n_starts"]))  # set by bootstrap()
        return f"all {n} starts" if n == int(st["n_starts"]) else f"{n} of the fit's {int(st['n_starts'])} grid starts"

    def diverged_note(self) -> str:
        """How many bootstrap resamples diverged, as a clause to append ("" when none did)."""
        v = self.stats.iloc[0].get("n_bootstrap_diverged", 0)
        n = int(v) if pd.notna(v) else 0
        if not n:
            return ""
        return (f"; {n} resample(s) diverged (an estimate infinite or beyond {_STD_LIMIT:.0e}): those "
                f"parameters' stderr is inf, and their intervals include the diverged estimates")

    def __str__(self) -> str:
        return self.report()


def _indent(text: str, pad: str = "    ") -> str:
    return "\n".join(pad + line for line in text.splitlines())


@dataclasses.dataclass(frozen=True)
class ComputeOptimal:
    """Compute-optimal allocation of a Chinchilla fit (see :func:`compute_optimal`).

    Attributes:
        frontier: one row per compute budget: ``flops, n_opt, d_opt, tokens_per_param,
            loss_opt`` and, with a bootstrap, ``*_low``/``*_high`` percentile bounds.
        exponents: rows ``a`` (N_opt ∝ C^a) and ``b`` (D_opt ∝ C^b) and ``G``:
            ``param, value, stderr, ci_low, ci_high``.
    """

    frontier: pd.DataFrame
    exponents: pd.DataFrame


# --------------------------------------------------------------------------------------------
# fitting


def _prepare(
    df: pd.DataFrame, columns: dict, roles: Sequence[str], n_params: int, drop_highest_loss: int, what: str
) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray, np.ndarray]:
    clean = numeric_columns(df, columns, positive=list(columns), n_params=n_params, what=what)
    k = int(drop_highest_loss)
    if k < 0:
        raise FitInputError(f"{what}: drop_highest_loss must be >= 0, got {drop_highest_loss}")
    order = np.argsort(-clean["loss"].to_numpy(), kind="stable")
    drop_pos = np.sort(order[:k])
    keep = np.ones(len(clean), bool)
    keep[drop_pos] = False
    used = clean[keep]
    if len(used) < n_params:
        raise FitInputError(
            f"{what}: after dropping the {k} highest-loss rows, {len(used)} rows remain for "
            f"{n_params} parameters; drop fewer rows (drop_highest_loss) or add data."
        )
    for role in roles:
        require_distinct(used[role].to_numpy(), columns[role], what)
    data = df.loc[used.index, list(columns.values())] if df.index.is_unique else df.iloc[np.flatnonzero(keep)][
        list(columns.values())
    ]
    dropped = df.iloc[drop_pos][list(columns.values())]
    log_x = np.log(used[list(roles)].to_numpy().T)
    log_y = np.log(used["loss"].to_numpy())
    return data, dropped, log_x, log_y


def _fit(
    law: str,
    df: pd.DataFrame,
    columns: dict,
    *,
    grid: dict,
    bootstrap_n: int,
    seed: int,
    ci: float,
    drop_highest_loss: int,
    huber_delta: float,
    what: str,
) -> ScalingFit:
    roles, names, formula = _LAWS[law]
    if not (0 < ci < 1):
        raise ValueError(f"{what}: ci must be in (0, 1), got {ci}")
    if not (huber_delta > 0 and np.isfinite(huber_delta)):
        raise ValueError(f"{what}: huber_delta must be a positive number, got {huber_delta}")
    data, dropped, log_x, log_y = _prepare(df, columns, roles, len(names), drop_highest_loss, what)
    starts = ss.grid_starts(grid)
    if starts.shape[1] != 2 * len(roles) + 1:
        raise ValueError(f"{what}: the start grid needs {2 * len(roles) + 1} coordinates, got {starts.shape[1]}")
    res = ss.search(log_x, log_y, starts, np.ones((1, log_y.size)), delta=huber_delta, polish_k=32)
    raw = res.raw[0]
    pred = _predict_log(raw, log_x)
    resid = log_y - pred
    ss_tot = float(np.sum((log_y - log_y.mean()) ** 2))
    values = natural_params(law, raw)
    params = pd.DataFrame(
        {"param": list(names), "value": values, "stderr": np.nan, "ci_low": np.nan, "ci_high": np.nan}
    )
    stats = pd.DataFrame(
        [
            {
                "n": int(log_y.size),
                "n_params": len(names),
                "objective": float(res.objective[0]),
                "rmse_log": float(np.sqrt(np.mean(resid**2))),
                "r2_log": float(1.0 - np.sum(resid**2) / ss_tot) if ss_tot > 0 else np.nan,
                "huber_delta": float(huber_delta),
                "n_starts": int(res.n_starts),
                "n_at_best": int(res.n_at_best[0]),
                "n_converged": int(res.n_converged[0]),
                "n_dropped": int(len(dropped)),
                "n_bootstrap": 0,
            }
        ]
    )
    fit = ScalingFit(
        law=law,
        formula=formula,
        columns=dict(columns),
        params=params,
        stats=stats,
        data=data,
        dropped=dropped,
        bootstrap_params=None,
        options=dict(drop_highest_loss=int(drop_highest_loss), huber_delta=float(huber_delta), ci=ci, seed=seed),
        raw=raw,
        starts=starts,
    )
    if bootstrap_n:
        fit = bootstrap(fit, n_resamples=bootstrap_n, seed=seed, ci=ci)
    return fit


def fit_power_law(
    df: pd.DataFrame,
    x: str,
    y: str,
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
    drop_highest_loss: int = 0,
    huber_delta: float = 1e-3,
    grid: dict | None = None,
) -> ScalingFit:
    """Fit L(x) = L∞ + k·x^(−α) with L∞ ≥ 0.

    Fitted as log L = LSE(log k − α log x, log L∞) by the multi-start Huber method of
    :func:`fit_chinchilla`, from every point of ``grid`` (default
    ``analysis.scaling.search.POWER_LAW_GRID``: log k ∈ {0, 2.5, …, 25}, α ∈ {0, 0.1, …, 2},
    log L∞ ∈ {−1, −0.5, …, 1}; 1,155 starts). L∞ = exp(e) is positive by construction; a law
    with no floor (Kaplan et al. 2020) shows as L∞ many orders below the losses.

    Args:
        df: the table, one row per run.
        x: column of the scale variable (parameters, tokens, FLOPs), all > 0.
        y: column of the loss, all > 0.
        bootstrap: resamples for stderr and intervals (0: none).
        seed: seed of the bootstrap.
        ci: interval coverage.
        drop_highest_loss: drop this many highest-loss rows first (reported).
        huber_delta: Huber threshold on log-loss residuals.
        grid: starts, as ``{"c": values, "alpha": values, "e": values}``.

    Returns:
        A :class:`ScalingFit` with parameters ``L_inf, k, alpha``.

    Raises:
        FitInputError: missing column, NaN/inf/non-positive values (naming rows), too few
            rows, fewer than 2 distinct x.

    Example:
        >>> x = np.geomspace(1e6, 1e9, 40)
        >>> df = pd.DataFrame({"params": x, "loss": 1.5 + 40.0 * x ** -0.3})
        >>> fit = fit_power_law(df, x="params", y="loss", bootstrap=0)
        >>> [round(fit.value(p), 3) for p in ("L_inf", "k", "alpha")]
        [1.5, 40.0, 0.3]
    """
    return _fit(
        "power_law",
        df,
        {"x": x, "loss": y},
        grid=ss.POWER_LAW_GRID if grid is None else grid,
        bootstrap_n=bootstrap,
        seed=seed,
        ci=ci,
        drop_highest_loss=drop_highest_loss,
        huber_delta=huber_delta,
        what="fit_power_law",
    )


def fit_chinchilla(
    df: pd.DataFrame,
    n: str = "params",
    d: str = "tokens",
    loss: str = "val_loss",
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
    drop_highest_loss: int = 0,
    huber_delta: float = 1e-3,
    grid: dict | None = None,
) -> ScalingFit:
    """Fit L(N, D) = E + A/N^α + B/D^β by Hoffmann et al. (2022) Approach 3.

    log L is predicted as LSE(a − α log N, b − β log D, e) (a = log A, b = log B, e = log E) and
    the sum over rows of Huber_δ(predicted − observed log-loss) is minimised by L-BFGS from
    every point of ``grid`` (default: the paper's 4,500-point grid,
    ``analysis.scaling.search.CHINCHILLA_GRID``), all at once (``jax.vmap``); the best is kept
    (refined in float64) and ``stats["n_at_best"]`` says how many starts reached it.

    Args:
        df: the table, one row per trained model.
        n: column of the parameter count N (> 0).
        d: column of the training tokens D (> 0).
        loss: column of the loss (> 0).
        bootstrap: resamples for stderr and intervals (0: none). 1,000 resamples of ~250 rows
            take minutes on a 2-core CPU (see ``benchmarks/scaling_fit.py``).
        seed: seed of the bootstrap.
        ci: interval coverage.
        drop_highest_loss: drop this many highest-loss rows first (reported; default none).
        huber_delta: Huber threshold on log-loss residuals.
        grid: starts, as ``{"a": values, "alpha": values, "b": values, "beta": values,
            "e": values}``.

    Returns:
        A :class:`ScalingFit` with parameters ``E, A, B, alpha, beta``.

    Raises:
        FitInputError: missing column, NaN/inf/non-positive values (naming column and rows),
            fewer rows than parameters, fewer than 2 distinct N or D.

    Example:
        >>> N, D = (a.ravel() for a in np.meshgrid(np.geomspace(1e7, 1e10, 8), np.geomspace(1e9, 1e12, 6)))
        >>> df = pd.DataFrame({"params": N, "tokens": D, "val_loss": 1.69 + 406.4 / N**0.34 + 410.7 / D**0.28})
        >>> fit = fit_chinchilla(df, bootstrap=0)
        >>> {k: round(v, 2) for k, v in fit.values.items()}
        {'E': 1.69, 'A': 406.4, 'B': 410.7, 'alpha': 0.34, 'beta': 0.28}
    """
    return _fit(
        "chinchilla",
        df,
        {"n": n, "d": d, "loss": loss},
        grid=ss.CHINCHILLA_GRID if grid is None else grid,
        bootstrap_n=bootstrap,
        seed=seed,
        ci=ci,
        drop_highest_loss=drop_highest_loss,
        huber_delta=huber_delta,
        what="fit_chinchilla",
    )


def bootstrap(
    fit: ScalingFit, n_resamples: int = 1000, seed: int = 0, ci: float = 0.95, *, compile_only: bool = False,
    grid: dict | None = None,
) -> ScalingFit | None:
    """Refit ``fit`` on row resamples and attach standard errors and percentile intervals.

    Each resample draws as many rows as the fit used, with replacement (``numpy`` generator
    seeded with ``seed``), and is refitted with the fit's full multi-start search, all
    resamples at once. ``stderr`` is the standard deviation of the resampled estimates
    (ddof=1) and ``ci_low``/``ci_high`` their ``(1 ∓ ci)/2`` percentiles.

    Args:
        fit: a fit from :func:`fit_power_law` or :func:`fit_chinchilla`.
        n_resamples: number of resamples (at least 2).
        seed: seed of the resampling.
        ci: interval coverage.
        compile_only: only compile the programs these resamples need, return None (lets a
            benchmark keep compilation out of its timings).
        grid: starts of each resample's search, in the fit's grid form (default: the fit's own
            starts). ``stats["n_bootstrap_starts"]`` records how many there were.

    Returns:
        A copy of ``fit`` with ``params`` intervals, ``bootstrap_params`` and
        ``stats["n_bootstrap"]`` filled in.
    """
    if n_resamples < 2:
        raise ValueError(f"bootstrap needs at least 2 resamples, got {n_resamples}")
    if not (0 < ci < 1):
        raise ValueError(f"ci must be in (0, 1), got {ci}")
    starts = fit.starts if grid is None else ss.grid_starts(grid)
    if starts.shape[1] != fit.starts.shape[1]:
        raise ValueError(f"bootstrap: the start grid needs {fit.starts.shape[1]} coordinates, got {starts.shape[1]}")
    counts = resample_counts(len(fit.data), n_resamples, seed)
    log_x, log_y = _fit_arrays(fit)
    res = ss.search(log_x, log_y, starts, counts, delta=fit.options["huber_delta"], compile_only=compile_only)
    if compile_only:
        return None
    names = list(fit.params["param"])
    samples = pd.DataFrame(natural_params(fit.law, res.raw), columns=names)
    samples["objective"] = res.objective
    samples["n_at_best"] = res.n_at_best
    lo, hi = resample_interval(samples[names].to_numpy(), ci)
    params = fit.params.copy()
    params["stderr"], diverged = resample_std(samples[names].to_numpy())
    params["ci_low"] = lo
    params["ci_high"] = hi
    stats = fit.stats.copy()
    stats["n_bootstrap"] = int(n_resamples)
    stats["n_bootstrap_starts"] = int(len(starts))
    stats["n_bootstrap_diverged"] = diverged
    return dataclasses.replace(
        fit,
        params=params,
        stats=stats,
        bootstrap_params=samples,
        options={**fit.options, "ci": ci, "seed": seed},
    )


def resample_counts(n_rows: int, n_resamples: int, seed: int) -> np.ndarray:
    """How often each row appears in each resample drawn with replacement, shape (R, n_rows).

    Example:
        >>> c = resample_counts(5, 3, seed=0)
        >>> c.shape, c.sum(axis=1).tolist()
        ((3, 5), [5, 5, 5])
    """
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n_rows, size=(n_resamples, n_rows))
    counts = np.zeros((n_resamples, n_rows), np.int64)
    np.add.at(counts, (np.repeat(np.arange(n_resamples), n_rows), draws.ravel()), 1)
    return counts


def _fit_arrays(fit: ScalingFit) -> tuple[np.ndarray, np.ndarray]:
    roles = _LAWS[fit.law][0]
    log_x = np.log(fit.data[[fit.columns[r] for r in roles]].to_numpy(np.float64).T)
    log_y = np.log(fit.data[fit.columns["loss"]].to_numpy(np.float64))
    return log_x, log_y


def chinchilla_from_values(E: float, A: float, B: float, alpha: float, beta: float) -> ScalingFit:
    """A :class:`ScalingFit` holding given Chinchilla parameters (no data), e.g. a published fit.

    Example:
        >>> fit = chinchilla_from_values(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)
        >>> round(fit.value("beta"), 2)
        0.28
    """
    raw = np.array([np.log(A), alpha, np.log(B), beta, np.log(E)], np.float64)
    names = list(_LAWS["chinchilla"][1])
    params = pd.DataFrame(
        {"param": names, "value": natural_params("chinchilla", raw), "stderr": np.nan, "ci_low": np.nan, "ci_high": np.nan}
    )
    stats = pd.DataFrame(
        [dict(n=0, n_params=5, objective=np.nan, rmse_log=np.nan, r2_log=np.nan, huber_delta=np.nan,
              n_starts=0, n_at_best=0, n_converged=0, n_dropped=0, n_bootstrap=0)]
    )
    empty = pd.DataFrame({"n": [], "d": [], "loss": []})
    return ScalingFit(
        law="chinchilla",
        formula=_LAWS["chinchilla"][2],
        columns={"n": "n", "d": "d", "loss": "loss"},
        params=params,
        stats=stats,
        data=empty,
        dropped=empty,
        bootstrap_params=None,
        options=dict(drop_highest_loss=0, huber_delta=np.nan, ci=0.95, seed=None),
        raw=raw,
        starts=np.empty((0, 5)),
    )


# --------------------------------------------------------------------------------------------
# compute-optimal allocation


def _optimal_log(log_e, log_a, log_b, alpha, beta, log_flops):
    """Hoffmann et al. (2022) eq. 4 in logs: minimise L(N, D) subject to 6·N·D = C.

    G = (αA / (βB))^(1/(α+β)), N_opt = G (C/6)^a, D_opt = G^-1 (C/6)^b, a = β/(α+β), b = α/(α+β).
    Returns log N_opt, log D_opt, log L_opt, a, b, log G (logs keep extreme bootstrap resamples
    finite).
    """
    s = alpha + beta
    a, b = beta / s, alpha / s
    log_g = (np.log(alpha) + log_a - np.log(beta) - log_b) / s
    log_c6 = log_flops - np.log(6.0)
    log_n = log_g + a * log_c6
    log_d = b * log_c6 - log_g
    log_loss = np.logaddexp(np.logaddexp(log_e, log_a - alpha * log_n), log_b - beta * log_d)
    return log_n, log_d, log_loss, a, b, log_g


def compute_optimal(fit: ScalingFit, flops) -> ComputeOptimal:
    """Compute-optimal N and D for budgets C ≈ 6·N·D under a Chinchilla fit.

    Minimising E + A/N^α + B/D^β subject to 6·N·D = C gives N_opt = G·(C/6)^a and
    D_opt = G⁻¹·(C/6)^b with a = β/(α+β), b = α/(α+β), G = (αA/(βB))^(1/(α+β))
    (Hoffmann et al. 2022, eq. 4). With a bootstrap, every resample's parameters give their own
    allocation; bounds are percentiles at the fit's ``ci`` (resamples whose exponents are not
    both positive have no interior optimum and are left out; their count is in
    ``exponents["n_valid"]``).

    Args:
        fit: a Chinchilla fit.
        flops: one budget or a sequence of budgets, FLOPs (> 0).

    Returns:
        A :class:`ComputeOptimal`.

    Example:
        >>> fit = chinchilla_from_values(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)
        >>> opt = compute_optimal(fit, [1e21, 1e23])
        >>> opt.frontier[["n_opt", "d_opt"]].map(lambda v: f"{v:.3g}").values.tolist()
        [['1.82e+09', '9.14e+10'], ['1.46e+10', '1.14e+12']]
        >>> round(float(opt.exponents.set_index("param").loc["a", "value"]), 4)
        0.4516
    """
    if fit.law != "chinchilla":
        raise ValueError(f"compute_optimal needs a Chinchilla fit (N and D); got a {fit.law} fit")
    c = np.atleast_1d(np.asarray(flops, np.float64))
    if c.ndim != 1 or not np.all(np.isfinite(c)) or np.any(c <= 0):
        raise ValueError(f"flops must be positive finite numbers; got {flops!r}")
    v = fit.values
    if not (v["alpha"] > 0 and v["beta"] > 0):
        raise ValueError(
            f"the fitted law has no compute-optimal interior point: alpha={v['alpha']:.4g}, "
            f"beta={v['beta']:.4g} (both must be > 0); check the fit (fit.report())"
        )
    log_c = np.log(c)
    log_n, log_d, log_l, a, b, log_g = _optimal_log(
        np.log(v["E"]), np.log(v["A"]), np.log(v["B"]), v["alpha"], v["beta"], log_c
    )
    frontier = pd.DataFrame(
        {
            "flops": c,
            "n_opt": np.exp(log_n),
            "d_opt": np.exp(log_d),
            "tokens_per_param": np.exp(log_d - log_n),
            "loss_opt": np.exp(log_l),
        }
    )
    ex = {"a": a, "b": b, "G": float(np.exp(log_g))}
    exponents = pd.DataFrame(
        {"param": list(ex), "value": list(ex.values()), "stderr": np.nan, "ci_low": np.nan, "ci_high": np.nan,
         "n_valid": 0}
    )
    bp = fit.bootstrap_params
    if bp is not None and len(bp):
        ci = fit.options.get("ci", 0.95)
        q = [50 * (1 - ci), 50 * (1 + ci)]
        s = bp[(bp["alpha"] > 0) & (bp["beta"] > 0)]
        col = lambda name: s[name].to_numpy(np.float64)[:, None]  # noqa: E731
        # A resample can drive E (or A, B) to exactly 0.0 (its log-parameter below -745): read that as
        # the smallest positive double, a term that no longer matters, rather than log(0) = -inf.
        log_pos = lambda name: np.log(np.maximum(col(name), np.finfo(np.float64).tiny))  # noqa: E731
        # A resample with an exponent near 0 sends its optimum to ±inf (inf − inf in the loss, and
        # between two infinite order statistics a NaN bound): that is the interval's honest value, so
        # numpy's warnings about it are silenced rather than printed on every report.
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            ln, ld, ll, ab, bb, lg = _optimal_log(
                log_pos("E"), log_pos("A"), log_pos("B"), col("alpha"), col("beta"), log_c[None, :]
            )
            # Percentiles of the logs, mapped back: the same order statistics, and no overflow.
            for name, arr in (("n_opt", ln), ("d_opt", ld), ("tokens_per_param", ld - ln), ("loss_opt", ll)):
                lo, hi = np.percentile(arr, q, axis=0)
                frontier[f"{name}_low"] = np.exp(lo)
                frontier[f"{name}_high"] = np.exp(hi)
            for i, arr in enumerate((ab[:, 0], bb[:, 0])):
                lo, hi = np.percentile(arr, q)
                exponents.loc[i, ["stderr", "ci_low", "ci_high"]] = [np.std(arr, ddof=1), lo, hi]
            lo, hi = np.percentile(lg[:, 0], q)
        exponents.loc[2, ["ci_low", "ci_high"]] = [np.exp(lo), np.exp(hi)]
        exponents["n_valid"] = len(s)
    return ComputeOptimal(frontier=frontier, exponents=exponents)
