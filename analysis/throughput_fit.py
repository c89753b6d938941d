"""Saturating throughput fits for measured sweeps: samples/s against batch size or workers.

Throughput first grows about linearly with the knob (more workers, a larger batch) and then
flattens at a ceiling set by something that does not scale (the accelerator, a serial stage,
memory bandwidth). Two forms, one family:

- ``"smooth_min"``: X(k) = ((r·k)^(−s) + C^(−s))^(−1/s), a smooth minimum of the linear growth
  r·k and the ceiling C; the sharpness s > 0 is fitted (s → ∞ is the hard ``min(r·k, C)``).
- ``"amdahl"``: the same with s = 1, i.e. 1/X = 1/(r·k) + 1/C. This *is* Amdahl's law
  X(k) = X₁ / ((1 − p) + p/k) with r = X₁/p and C = X₁/(1 − p) (Amdahl 1967), and also the
  law of a per-step overhead t₀ plus a per-sample cost t₁: X(b) = b / (t₀ + b·t₁), r = 1/t₀,
  C = 1/t₁.

The **knee** is k* = C / r, where the linear growth meets the ceiling; at the knee the curve
reaches C·2^(−1/s) (half the ceiling under Amdahl). The fit minimises squared log residuals
(relative errors: throughputs span decades), by L-BFGS from a grid of starts (vmapped,
``analysis.batched_lbfgs``), and reports standard errors from the Gauss-Newton covariance
σ²(JᵀJ)⁻¹ in log-parameters with Student-t intervals, like lmfit. Neither form can fall: a
sweep whose throughput drops past some point (contention) leaves a pattern in the residuals.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis import batched_lbfgs as bl
from analysis.fit_input import FitInputError, numeric_columns, require_distinct

__all__ = ["ThroughputFit", "fit_throughput"]

_FORMS = ("smooth_min", "amdahl")


def _log_model(theta, log_k):
    """log X for log-parameters theta = (log r, log C[, log s])."""
    log_r, log_c = theta[0], theta[1]
    s = jnp.exp(theta[2]) if theta.shape[0] > 2 else 1.0
    # log X = -(1/s) log( exp(-s (log r + log k)) + exp(-s log C) ), evaluated stably.
    return -jnp.logaddexp(-s * (log_r + log_k), -s * log_c) / s


def _sse(theta, log_k, log_y, w):
    r = log_y - _log_model(theta, log_k)
    return jnp.sum(w * r * r)


_TOL = bl.Tolerances(gtol=1e-12, ftol=1e-15, max_iter=2000)


@jax.jit
def _solve(starts, log_k, log_y, w):
    """L-BFGS from every start (rows padded with zero weight to a multiple of 16, so sweeps of
    similar length share one compiled program)."""
    return bl.minimize(jax.value_and_grad(lambda t: _sse(t, log_k, log_y, w)), starts, tol=_TOL)


@dataclasses.dataclass(frozen=True)
class ThroughputFit:
    """A fitted saturating throughput curve.

    Attributes:
        form: ``"smooth_min"`` or ``"amdahl"``.
        columns: ``{"x": ..., "y": ...}``, the fitted columns.
        params: ``param, value, stderr, ci_low, ci_high`` for ``slope`` (r, y per unit of x at
            small x), ``ceiling`` (C), ``sharpness`` (s; fixed at 1 for Amdahl), ``knee`` (C/r,
            derived) and ``y_at_knee`` (derived).
        stats: one row: ``n, n_params, dof, rss_log, rmse_log, r2_log, knee_in_data`` (whether
            the largest x reaches the knee: if not, the ceiling is an extrapolation).
        data: the fitted rows (the two columns).
    """

    form: str
    columns: dict
    params: pd.DataFrame
    stats: pd.DataFrame
    data: pd.DataFrame
    theta: np.ndarray = dataclasses.field(repr=False)

    def value(self, name: str) -> float:
        """Fitted value of ``slope``, ``ceiling``, ``sharpness``, ``knee`` or ``y_at_knee``."""
        return float(self.params.set_index("param").loc[name, "value"])

    def predict(self, df_or_x) -> pd.Series | np.ndarray:
        """Predicted throughput for a DataFrame (with the x column) or an array of x values."""
        if isinstance(df_or_x, pd.DataFrame):
            x = numeric_columns(df_or_x, {"x": self.columns["x"]}, positive=["x"], n_params=0, what="predict")["x"]
            return pd.Series(self._predict(x.to_numpy()), index=df_or_x.index, name=f"{self.columns['y']}_pred")
        return self._predict(np.asarray(df_or_x, np.float64))

    def _predict(self, x: np.ndarray) -> np.ndarray:
        with jax.enable_x64(True):
            return np.exp(np.asarray(_log_model(jnp.asarray(self.theta), jnp.log(jnp.asarray(x, jnp.float64)))))

    def residuals(self) -> pd.DataFrame:
        """Fitted rows with ``predicted``, ``residual_log`` and ``rel_error``."""
        out = self.data.copy()
        y = out[self.columns["y"]].to_numpy(np.float64)
        pred = self._predict(out[self.columns["x"]].to_numpy(np.float64))
        out["predicted"] = pred
        out["residual_log"] = np.log(y) - np.log(pred)
        out["rel_error"] = (pred - y) / y
        return out

    def report(self) -> str:
        """Plain-text report (lmfit style)."""
        st = self.stats.iloc[0]
        formula = {
            "smooth_min": "y = ((slope*x)^-s + ceiling^-s)^(-1/s)",
            "amdahl": "1/y = 1/(slope*x) + 1/ceiling   (Amdahl)",
        }[self.form]
        note = "" if st["knee_in_data"] else "  (largest x is below the knee: the ceiling is extrapolated)"
        table = self.params.to_string(index=False, float_format=lambda v: f"{v:.6g}")
        return "\n".join(
            [
                f"[[Model]]\n    {formula}    (x={self.columns['x']!r}, y={self.columns['y']!r})",
                "[[Fit]]",
                f"    rows = {int(st['n'])}, parameters = {int(st['n_params'])}, dof = {int(st['dof'])}",
                f"    rmse_log = {st['rmse_log']:.4g}, r2_log = {st['r2_log']:.4f}{note}",
                "[[Parameters]]   (stderr: Gauss-Newton covariance; intervals: Student t)",
                "\n".join("    " + line for line in table.splitlines()),
            ]
        )

    def __str__(self) -> str:
        return self.report()


def fit_throughput(
    df: pd.DataFrame,
    x: str = "num_workers",
    y: str = "samples_per_s",
    *,
    form: str = "smooth_min",
    ci: float = 0.95,
) -> ThroughputFit:
    """Fit a saturating curve to throughput measured against a scaling knob.

    Args:
        df: one row per measurement (repeats allowed).
        x: the knob (``num_workers``, ``batch_size``, ...), all > 0. ``num_workers=0`` (loading
            in the training process) is not a point on this law: drop those rows, or fit
            against ``num_workers + 1`` deliberately.
        y: the throughput (samples/s), all > 0.
        form: ``"smooth_min"`` (sharpness fitted) or ``"amdahl"`` (sharpness 1).
        ci: interval coverage.

    Returns:
        A :class:`ThroughputFit` reporting the ceiling and the knee.

    Raises:
        FitInputError: missing column, NaN/inf/non-positive values (naming rows), fewer rows
            than parameters, fewer distinct x than parameters.

    Example:
        >>> k = np.array([1, 2, 4, 8, 16, 32.0])
        >>> df = pd.DataFrame({"num_workers": k, "samples_per_s": 1 / (1 / (500 * k) + 1 / 3000)})
        >>> fit = fit_throughput(df, form="amdahl")
        >>> round(fit.value("ceiling")), round(fit.value("knee"), 2)
        (3000, 6.0)
    """
    if form not in _FORMS:
        raise ValueError(f"form must be one of {_FORMS}, got {form!r}")
    if not (0 < ci < 1):
        raise ValueError(f"ci must be in (0, 1), got {ci}")
    p = 3 if form == "smooth_min" else 2
    clean = numeric_columns(df, {"x": x, "y": y}, positive=["x", "y"], n_params=p, what="fit_throughput")
    require_distinct(clean["x"].to_numpy(), x, "fit_throughput", at_least=p)
    log_k = np.log(clean["x"].to_numpy())
    log_y = np.log(clean["y"].to_numpy())
    n = log_y.size

    # Starts: slope from the smallest-x rows, ceiling from the largest throughput, both spread
    # over two decades; sharpness 0.5 .. 8.
    slope0 = np.log(np.max(np.exp(log_y - log_k)))
    ceil0 = np.max(log_y)
    grid = [np.log(10.0) * np.linspace(-1, 1, 9) + slope0, np.log(10.0) * np.linspace(-0.5, 1.5, 9) + ceil0]
    if p == 3:
        grid.append(np.log([0.5, 1.0, 2.0, 4.0, 8.0]))
    starts = np.stack([m.ravel() for m in np.meshgrid(*grid, indexing="ij")], axis=1)

    m = -(-n // 16) * 16
    pad = lambda v: np.pad(v, (0, m - n))  # noqa: E731
    with jax.enable_x64(True):
        res = _solve(jnp.asarray(starts), jnp.asarray(pad(log_k)), jnp.asarray(pad(log_y)),
                     jnp.asarray(pad(np.ones(n))))
        f = np.where(np.isfinite(np.asarray(res.f)), np.asarray(res.f), np.inf)
        theta = np.asarray(res.x)[int(np.argmin(f))]
        lk = jnp.asarray(log_k)
        jac = np.asarray(jax.jacfwd(lambda t: _log_model(t, lk))(jnp.asarray(theta)))
        rss = float(_sse(jnp.asarray(theta), lk, jnp.asarray(log_y), 1.0))
    dof = n - p
    names = ["slope", "ceiling"] + (["sharpness"] if p == 3 else [])
    values = np.exp(theta)
    cov = np.full((p, p), np.nan)
    if dof > 0:
        jtj = jac.T @ jac
        if np.linalg.cond(jtj) < 1e12:
            cov = rss / dof * np.linalg.inv(jtj)
    t_q = sps.t.ppf(0.5 + ci / 2, dof) if dof > 0 else np.nan
    se_log = np.sqrt(np.diag(cov))
    rows = []
    for i, name in enumerate(names):
        rows.append(
            dict(
                param=name,
                value=values[i],
                stderr=values[i] * se_log[i],  # delta method on exp(theta)
                ci_low=np.exp(theta[i] - t_q * se_log[i]),
                ci_high=np.exp(theta[i] + t_q * se_log[i]),
            )
        )
    if p == 2:
        rows.append(dict(param="sharpness", value=1.0, stderr=0.0, ci_low=1.0, ci_high=1.0))
    # knee = C / r: log knee = log C - log r.
    grad = np.zeros(p)
    grad[0], grad[1] = -1.0, 1.0
    se_knee = float(np.sqrt(grad @ cov @ grad))
    knee = values[1] / values[0]
    rows.append(
        dict(param="knee", value=knee, stderr=knee * se_knee,
             ci_low=knee * np.exp(-t_q * se_knee), ci_high=knee * np.exp(t_q * se_knee))
    )
    s_val = values[2] if p == 3 else 1.0
    rows.append(dict(param="y_at_knee", value=values[1] * 2.0 ** (-1.0 / s_val), stderr=np.nan, ci_low=np.nan,
                     ci_high=np.nan))
    ss_tot = float(np.sum((log_y - log_y.mean()) ** 2))
    stats = pd.DataFrame(
        [
            dict(
                n=n,
                n_params=p,
                dof=dof,
                rss_log=rss,
                rmse_log=float(np.sqrt(rss / n)),
                r2_log=1.0 - rss / ss_tot if ss_tot > 0 else np.nan,
                knee_in_data=bool(np.max(np.exp(log_k)) >= knee),
            )
        ]
    )
    return ThroughputFit(
        form=form,
        columns={"x": x, "y": y},
        params=pd.DataFrame(rows),
        stats=stats,
        data=df.loc[clean.index, [x, y]] if df.index.is_unique else df[[x, y]].copy(),
        theta=theta,
    )
