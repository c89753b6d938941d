"""Multi-start Huber fit of log-sum-exp power laws (Hoffmann et al. 2022, "Approach 3").

Both scaling laws of ``analysis.scaling`` are one family: with K features X_k (N, D, ...),

    log L = LSE(c_1 - α_1 log X_1, ..., c_K - α_K log X_K, e),

that is L = exp(e) + Σ_k exp(c_k) X_k^(-α_k) (K = 2 is Chinchilla's E + A/N^α + B/D^β with
a = log A, b = log B, e = log E). The fit minimises the **sum** over rows of Huber losses
(δ = 1e-3 by default) between predicted and observed log-loss, by L-BFGS from every point of
a grid of starts, keeping the best (Hoffmann et al. 2022, Sec. 3.3 and App. D.2; the sum
rather than the mean, after Besiroglu et al. 2024, "Chinchilla Scaling: A replication
attempt"). Bootstrap resamples are the same problem with integer row weights.

How the search runs:

1. **Coordinates.** L-BFGS works on c'_k = c_k - α_k μ_k and α'_k = α_k σ_k, where μ_k and σ_k
   are the mean and standard deviation of log X_k over the rows. This is a linear bijection:
   every grid start is the same point and every optimum the same optimum, but c and α are no
   longer nearly collinear (log N ≈ 20 ± 2), which cuts the iterations L-BFGS needs.
2. **Search, float32.** Every start of every resample runs in ``analysis.scaling.multistart`` (one
   vmapped L-BFGS lane per start, float32, relative ``ftol`` 1e-6, at most 300 iterations:
   the few starts that crawl longer are heading for poor local optima and are reported as not
   converged).
3. **Polish, float64.** The ``polish_k`` best starts of each resample are refined in float64
   to tight tolerances; the best polished point is the fit.
4. **Agreement.** A start "reached the best" when its float32 search ended within
   ``reach_rtol`` (relative) of the polished best objective, or below the objective of
   residuals of δ/1000 on every row (exact data fit to ~0, which float32 cannot resolve).

Log-sum-exp is evaluated stably: shifted by its largest term per row, with terms more than
e^-60 below it clamped there (a relative change of at most 3e-26, and no denormals).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from analysis.scaling import batched_lbfgs as bl
from analysis.scaling import multistart

#: Hoffmann et al. (2022) Approach 3 grid, in the order (a, α, b, β, e): 6·5·6·5·5 = 4,500.
CHINCHILLA_GRID = {
    "a": np.arange(0.0, 25.0 + 1e-9, 5.0),
    "alpha": np.arange(0.0, 2.0 + 1e-9, 0.5),
    "b": np.arange(0.0, 25.0 + 1e-9, 5.0),
    "beta": np.arange(0.0, 2.0 + 1e-9, 0.5),
    "e": np.arange(-1.0, 1.0 + 1e-9, 0.5),
}

#: Grid for one feature, in the order (c, α, e): 11·21·5 = 1,155 starts. A finer α grid than
#: Chinchilla's because one-variable exponents are often small (Kaplan et al. 2020: 0.05-0.1).
POWER_LAW_GRID = {
    "c": np.arange(0.0, 25.0 + 1e-9, 2.5),
    "alpha": np.arange(0.0, 2.0 + 1e-9, 0.1),
    "e": np.arange(-1.0, 1.0 + 1e-9, 0.5),
}

_CLAMP = -60.0
SEARCH_TOL = bl.Tolerances(gtol=0.0, ftol=1e-6, max_iter=300)
POLISH_TOL = bl.Tolerances(gtol=0.0, ftol=1e-14, max_iter=5000)


def grid_starts(grid: dict[str, np.ndarray]) -> np.ndarray:
    """All combinations of a grid, one start per row, columns in the grid's key order.

    Example:
        >>> grid_starts(CHINCHILLA_GRID).shape
        (4500, 5)
    """
    mesh = np.meshgrid(*grid.values(), indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=1).astype(np.float64)


def lse_huber(t: jax.Array, rows: dict, shared: dict) -> tuple[jax.Array, jax.Array]:
    """Weighted sum of Huber losses of log-sum-exp predictions, and its gradient.

    Args:
        t: internal parameters (c'_1, α'_1, ..., c'_K, α'_K, e), shape (2K + 1,).
        rows: ``z`` (K, n) standardised log features, ``y`` (n,) observed log-loss, ``w`` (n,)
            row weights (bootstrap counts; 0 for padding).
        shared: ``delta`` () Huber threshold.

    Returns:
        ``(f, grad)``: the objective Σ_i w_i Huber_δ(pred_i - y_i) and its gradient in t.

    Example:
        >>> rows = dict(z=jnp.array([[-1.0, 0.0, 1.0]]), y=jnp.log(jnp.array([3.0, 2.0, 1.5])), w=jnp.ones(3))
        >>> f, g = lse_huber(jnp.array([0.5, 0.5, 0.0]), rows, dict(delta=jnp.asarray(1e-3)))
        >>> bool(f > 0), g.shape
        (True, (3,))
    """
    z, y, w, delta = rows["z"], rows["y"], rows["w"], shared["delta"]
    k = z.shape[0]
    c, alpha, e = t[0 : 2 * k : 2], t[1 : 2 * k : 2], t[2 * k]
    u = c[:, None] - alpha[:, None] * z  # (K, n)
    m = jnp.maximum(jnp.max(u, axis=0), e)
    terms = jnp.exp(jnp.maximum(u - m, _CLAMP))
    const = jnp.exp(jnp.maximum(e - m, _CLAMP))
    s = jnp.sum(terms, axis=0) + const
    r = m + jnp.log(s) - y
    ar = jnp.abs(r)
    huber = jnp.where(ar <= delta, 0.5 * r * r, delta * (ar - 0.5 * delta))
    q = w * jnp.clip(r, -delta, delta) / s  # d f / d s_i, times s_i / exp(-m_i)
    gt = terms * q  # (K, n)
    grad_c = jnp.sum(gt, axis=1)
    grad_alpha = -jnp.sum(gt * z, axis=1)
    grad = jnp.concatenate([jnp.stack([grad_c, grad_alpha], axis=1).ravel(), jnp.sum(q * const)[None]])
    return jnp.sum(w * huber), grad


@dataclasses.dataclass(frozen=True)
class Standardizer:
    """The linear change of coordinates between raw (c, α) and internal (c', α')."""

    mu: np.ndarray  # (K,) mean of log X_k
    sigma: np.ndarray  # (K,) std of log X_k

    @classmethod
    def from_log_x(cls, log_x: np.ndarray) -> "Standardizer":
        return cls(mu=log_x.mean(axis=1), sigma=log_x.std(axis=1))

    def z(self, log_x: np.ndarray) -> np.ndarray:
        return (log_x - self.mu[:, None]) / self.sigma[:, None]

    def to_internal(self, raw: np.ndarray) -> np.ndarray:
        out = np.array(raw, dtype=np.float64, copy=True)
        c, alpha = raw[..., 0:-1:2], raw[..., 1:-1:2]
        out[..., 0:-1:2] = c - alpha * self.mu
        out[..., 1:-1:2] = alpha * self.sigma
        return out

    def to_raw(self, internal: np.ndarray) -> np.ndarray:
        out = np.array(internal, dtype=np.float64, copy=True)
        alpha = internal[..., 1:-1:2] / self.sigma
        out[..., 1:-1:2] = alpha
        out[..., 0:-1:2] = internal[..., 0:-1:2] + alpha * self.mu
        return out


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """Best raw parameters (c_1, α_1, ..., e) per resample and how the search got there.

    Attributes:
        raw: (R, 2K + 1) best parameters per resample (float64, polished).
        objective: (R,) objective there.
        n_at_best: (R,) starts whose search ended within ``reach_rtol`` of that objective.
        n_converged: (R,) starts stopped by a convergence test (not the iteration limit).
        n_starts: starts per resample.
        polish_converged: (R,) the polish of the best point converged.
        search_objective: (R, n_starts) float32 objective where each start's search ended.
    """

    raw: np.ndarray
    objective: np.ndarray
    n_at_best: np.ndarray
    n_converged: np.ndarray
    n_starts: int
    polish_converged: np.ndarray
    search_objective: np.ndarray


def resample_rows(z: np.ndarray, y: np.ndarray, counts: np.ndarray, dtype) -> dict:
    """Each resample's distinct rows with their counts as weights, zero-padded to one length.

    Args:
        z: (K, n) standardised log features. y: (n,) log-loss.
        counts: (R, n) how often each row was drawn (all ones for the plain fit).
        dtype: numpy dtype of the result.

    Returns:
        ``dict(z=(R, K, m), y=(R, m), w=(R, m))`` with m the most distinct rows any resample
        has, rounded up to a multiple of 16 (zero-weight padding), so that different seeds and
        tables of similar size share one compiled shape.

    Example:
        >>> r = resample_rows(np.array([[0.0, 1.0, 2.0]]), np.array([5.0, 6.0, 7.0]),
        ...                   np.array([[0, 2, 1], [3, 0, 0]]), np.float64)
        >>> r["y"].shape, r["y"][:, :2].tolist(), r["w"][:, :2].tolist(), float(r["w"][:, 2:].sum())
        ((2, 16), [[6.0, 7.0], [5.0, 0.0]], [[2.0, 1.0], [3.0, 0.0]], 0.0)
    """
    counts = np.asarray(counts)
    n_res = counts.shape[0]
    k = z.shape[0]
    m = int((counts > 0).sum(axis=1).max())
    m = -(-m // 16) * 16
    out_z = np.zeros((n_res, k, m), dtype)
    out_y = np.zeros((n_res, m), dtype)
    out_w = np.zeros((n_res, m), dtype)
    for r in range(n_res):
        idx = np.flatnonzero(counts[r])
        out_z[r, :, : len(idx)] = z[:, idx]
        out_y[r, : len(idx)] = y[idx]
        out_w[r, : len(idx)] = counts[r, idx]
    return dict(z=out_z, y=out_y, w=out_w)


def search(
    log_x: np.ndarray,
    log_y: np.ndarray,
    starts_raw: np.ndarray,
    counts: np.ndarray,
    *,
    delta: float = 1e-3,
    polish_k: int = 8,
    reach_rtol: float = 1e-4,
    search_tol: bl.Tolerances = SEARCH_TOL,
    lanes: int | None = None,
    compile_only: bool = False,
) -> SearchResult | None:
    """Fit the log-sum-exp law from every start, for every resample.

    Args:
        log_x: (K, n) log features (log N, log D, ...), float64.
        log_y: (n,) observed log-loss.
        starts_raw: (S, 2K + 1) starts in raw coordinates (c_1, α_1, ..., e).
        counts: (R, n) how often each row is in each resample; ``np.ones((1, n))`` for the
            plain fit.
        delta: Huber threshold on log-loss residuals.
        polish_k: best starts per resample refined in float64.
        reach_rtol: relative objective tolerance for counting starts that reached the best.
        search_tol: stopping tests of the float32 search.
        lanes: L-BFGS runs in flight at once (see ``analysis.scaling.multistart``).
        compile_only: compile the search and the polish for these shapes and return None.

    Returns:
        A :class:`SearchResult`.
    """
    log_x = np.asarray(log_x, np.float64)
    log_y = np.asarray(log_y, np.float64)
    st = Standardizer.from_log_x(log_x)
    z = st.z(log_x)
    counts = np.asarray(counts)
    n_res = counts.shape[0]
    internal = st.to_internal(np.asarray(starts_raw, np.float64))
    k = min(polish_k, internal.shape[0])
    with jax.enable_x64(True):
        rows32 = resample_rows(z, log_y, counts, np.float32)
        rows64 = resample_rows(z, log_y, counts, np.float64)
        shared32 = dict(delta=jnp.asarray(delta, jnp.float32))
        shared64 = dict(delta=jnp.asarray(delta, jnp.float64))
        polish_lanes = min(n_res * k, 1024)
        found = multistart.minimize_many(
            lse_huber, internal.astype(np.float32), rows32, shared32, tol=search_tol, lanes=lanes,
            compile_only=compile_only,
        )
        if compile_only:
            multistart.minimize_many(
                lse_huber, np.zeros((n_res, k, internal.shape[1])), rows64, shared64, tol=POLISH_TOL,
                lanes=polish_lanes, compile_only=True,
            )
            return None
        f32 = np.where(np.isfinite(found.f), found.f, np.inf).astype(np.float64)
        top = np.argsort(f32, axis=1, kind="stable")[:, :k]  # (R, k)
        cand = np.take_along_axis(found.x.astype(np.float64), top[:, :, None], axis=1)
        polished = multistart.minimize_many(
            lse_huber, cand, rows64, shared64, tol=POLISH_TOL, lanes=polish_lanes
        )
    pf = np.where(np.isfinite(polished.f), polished.f, np.inf)
    best = np.argmin(pf, axis=1)
    idx = np.arange(n_res)
    best_f = pf[idx, best]
    # Floor: the objective of residuals of delta/1000 on every row. Exact data (a law without
    # noise) fit to ~0, where the float32 search bottoms out at its rounding, not at 0.
    floor = counts.sum(axis=1) * 0.5 * (1e-3 * delta) ** 2
    at_best = f32 <= best_f[:, None] * (1.0 + reach_rtol) + floor[:, None]
    return SearchResult(
        raw=st.to_raw(polished.x[idx, best]),
        objective=best_f,
        n_at_best=at_best.sum(axis=1),
        n_converged=found.converged.sum(axis=1),
        n_starts=internal.shape[0],
        polish_converged=polished.converged[idx, best],
        search_objective=found.f,
    )
