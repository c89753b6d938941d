"""Stream thousands of weighted multi-start minimisations through a fixed set of vmapped lanes.

A multi-start fit inside a bootstrap is ``n_resamples × n_starts`` independent L-BFGS runs of
the same objective, differing only in the starting point and in the row weights (a bootstrap
resample drawn with replacement is the original table with integer weights: how often each row
was drawn). Most runs converge in a few dozen iterations, a few need hundreds. Batching them
all with ``jax.vmap`` and iterating until the slowest is done would pay for the slowest run in
every lane; instead this module keeps ``lanes`` runs in flight and, inside one jitted
``lax.while_loop``, hands a lane the next queued run (start ``j % n_starts`` of resample
``j // n_starts``) as soon as its current one stops. The cost is then about the *sum* of the
runs' iterations divided by ``lanes``, plus one drain at the end.

Each resample brings its own rows (``rows``: a pytree with a leading resample axis, e.g. the
distinct rows a bootstrap resample drew, with their counts as weights, padded with zero weights
to a common length): a lane copies its resample's rows when it takes a run, so the objective
reads only the rows that resample holds. Every iteration of every lane is one evaluation of
``value_and_grad(x, rows_of_its_resample, shared)`` (see ``analysis.scaling.batched_lbfgs``); a lane
given a fresh start spends its next evaluation at that start. Nothing here reads a clock or
leaves the device until the loop ends.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from analysis.scaling import batched_lbfgs as bl


class MultiStartResult(NamedTuple):
    """Final points of every (resample, start) run, as numpy arrays.

    Attributes:
        x: (n_resamples, n_starts, p) final points.
        f: (n_resamples, n_starts) objective values there.
        converged: (n_resamples, n_starts) True where a convergence test stopped the run.
        n_iter: (n_resamples, n_starts) iterations each run used.
    """

    x: np.ndarray
    f: np.ndarray
    converged: np.ndarray
    n_iter: np.ndarray


class _Loop(NamedTuple):
    state: bl.LbfgsState
    fresh: jax.Array  # (B,) lane holds a start not yet evaluated
    job: jax.Array  # (B,) run index, -1 when idle
    rows: Any  # the lane's resample rows, leading axis B
    next_job: jax.Array  # () first run not yet handed out
    out_x: jax.Array
    out_f: jax.Array
    out_conv: jax.Array
    out_iter: jax.Array


@partial(jax.jit, static_argnames=("value_and_grad", "lanes", "tol", "memory", "refill_every"))
def _run(value_and_grad, starts, rows, shared, *, lanes, tol, memory, refill_every):
    n_starts, p = starts.shape[-2:]
    n_res = jax.tree.leaves(rows)[0].shape[0]
    n_jobs = n_res * n_starts
    per_resample = starts.ndim == 3
    dtype = starts.dtype

    def assign(lp: _Loop) -> _Loop:
        free = lp.job < 0
        rank = jnp.cumsum(free.astype(jnp.int32)) - 1
        new_job = lp.next_job + rank
        take = free & (new_job < n_jobs)
        job = jnp.where(take, new_job, lp.job)
        safe = jnp.where(take, new_job, 0)
        x0 = starts[safe // n_starts, safe % n_starts] if per_resample else starts[safe % n_starts]
        new_rows = jax.tree.map(lambda a: a[safe // n_starts], rows)
        lane_rows = jax.tree.map(
            lambda a, b: jnp.where(take.reshape((-1,) + (1,) * (a.ndim - 1)), a, b), new_rows, lp.rows
        )
        blank = bl.init_state(x0[0], jnp.zeros((), dtype), jnp.zeros((p,), dtype), memory)
        blank = jax.tree.map(lambda a: jnp.broadcast_to(a, (lanes,) + a.shape), blank)
        blank = blank._replace(x=x0, done=jnp.zeros((lanes,), bool), converged=jnp.zeros((lanes,), bool))
        state = jax.tree.map(
            lambda b, s: jnp.where(take.reshape((-1,) + (1,) * (s.ndim - 1)), b, s), blank, lp.state
        )
        return lp._replace(
            state=state,
            fresh=lp.fresh | take,
            job=job,
            rows=lane_rows,
            next_job=lp.next_job + jnp.sum(take, dtype=jnp.int32),
        )

    def lane_step(st, fresh, lane_rows):
        prop = bl.propose(st)
        x_eval = jnp.where(fresh, st.x, prop.x_trial)
        f, g = value_and_grad(x_eval, lane_rows, shared)
        return bl.update(st, prop, f, g, tol, fresh)

    def harvest(lp: _Loop) -> _Loop:
        finished = lp.state.done & (lp.job >= 0)
        where = jnp.where(finished, lp.job, n_jobs)  # out of bounds: dropped
        return lp._replace(
            job=jnp.where(finished, -1, lp.job),
            out_x=lp.out_x.at[where].set(lp.state.x, mode="drop"),
            out_f=lp.out_f.at[where].set(lp.state.f, mode="drop"),
            out_conv=lp.out_conv.at[where].set(lp.state.converged, mode="drop"),
            out_iter=lp.out_iter.at[where].set(lp.state.n_iter, mode="drop"),
        )

    def body(carry):
        it, lp = carry
        lp = lp._replace(state=jax.vmap(lane_step)(lp.state, lp.fresh, lp.rows), fresh=jnp.zeros_like(lp.fresh))
        # Hand out new runs every few iterations: refilling costs about one evaluation's
        # worth of memory traffic (the lanes' weight rows), a finished lane idles meanwhile.
        lp = jax.lax.cond((it % refill_every) == 0, lambda q: assign(harvest(q)), lambda q: q, lp)
        return it + 1, lp

    def cond(carry):
        return jnp.any(carry[1].job >= 0)

    zero_state = bl.init_state(jnp.zeros((p,), dtype), jnp.zeros((), dtype), jnp.zeros((p,), dtype), memory)
    zero_state = jax.tree.map(lambda a: jnp.broadcast_to(a, (lanes,) + a.shape), zero_state)
    lp = _Loop(
        state=zero_state,
        fresh=jnp.zeros((lanes,), bool),
        job=jnp.full((lanes,), -1, jnp.int32),
        rows=jax.tree.map(lambda a: jnp.zeros((lanes,) + a.shape[1:], a.dtype), rows),
        next_job=jnp.zeros((), jnp.int32),
        out_x=jnp.full((n_jobs, p), jnp.nan, dtype),
        out_f=jnp.full((n_jobs,), jnp.nan, dtype),
        out_conv=jnp.zeros((n_jobs,), bool),
        out_iter=jnp.zeros((n_jobs,), jnp.int32),
    )
    _, lp = jax.lax.while_loop(cond, body, (jnp.ones((), jnp.int32), assign(lp)))
    return lp.out_x, lp.out_f, lp.out_conv, lp.out_iter


def _lanes_for(n_jobs: int, lanes: int | None) -> int:
    if lanes is not None:
        return max(1, min(int(lanes), n_jobs))
    # About 8 runs per lane keeps the final drain (the slowest runs finishing while other lanes
    # idle) short; past ~1,000 lanes the arrays outgrow the CPU caches and each lane costs more.
    return int(min(n_jobs, max(256, min(1024, n_jobs // 8))))


def minimize_many(
    value_and_grad: Callable[[jax.Array, Any, Any], tuple[jax.Array, jax.Array]],
    starts: np.ndarray,
    rows: Any,
    shared: Any = None,
    *,
    tol: bl.Tolerances = bl.Tolerances(),
    lanes: int | None = None,
    memory: int = 4,
    refill_every: int = 4,
    compile_only: bool = False,
) -> MultiStartResult | None:
    """Run L-BFGS from every start for every resample.

    Args:
        value_and_grad: ``(x (p,), rows_of_one_resample, shared) -> (f, grad)`` for one start;
            a module-level function (it is a static argument of the jitted loop, so a new
            closure per call would compile anew each time).
        starts: (n_starts, p) starting points shared by every resample, or
            (n_resamples, n_starts, p) points of its own for each; their dtype is the solver's.
        rows: pytree of arrays with a leading n_resamples axis: what each resample's
            objective reads (its rows and weights).
        shared: pytree of arrays every resample reads (constants of the objective).
        tol: stopping tests of each run.
        lanes: runs kept in flight (default: chosen from the number of runs).
        memory: L-BFGS memory (pairs kept).
        refill_every: iterations between handing finished lanes new runs.
        compile_only: compile the loop for these shapes and return None (lets a benchmark
            keep compilation out of its timings).

    Returns:
        A :class:`MultiStartResult`, or None with ``compile_only``.

    Example:
        >>> import jax, jax.numpy as jnp, numpy as np
        >>> def vg(x, rows, shared):  # weighted least squares for a constant: the weighted mean
        ...     loss = lambda z: jnp.sum(rows["w"] * (rows["y"] - z[0]) ** 2)
        ...     return jax.value_and_grad(loss)(x)
        >>> rows = {"y": np.array([[1.0, 2.0, 6.0], [1.0, 2.0, 6.0]], np.float32),
        ...         "w": np.array([[1, 1, 1], [3, 0, 0]], np.float32)}
        >>> res = minimize_many(vg, np.array([[0.0], [9.0]], np.float32), rows)
        >>> np.round(res.x[..., 0], 4).tolist()
        [[3.0, 3.0], [1.0, 1.0]]
    """
    starts = np.asarray(starts)
    leaves = jax.tree.leaves(rows)
    if not leaves:
        raise ValueError("rows must hold at least one array with a leading resample axis")
    n_res = leaves[0].shape[0]
    if any(np.shape(a)[0] != n_res for a in leaves):
        raise ValueError(f"every array in rows needs the same leading (resample) length; got {[np.shape(a) for a in leaves]}")
    if starts.ndim not in (2, 3) or (starts.ndim == 3 and starts.shape[0] != n_res):
        raise ValueError(
            f"starts must be (n_starts, p) or ({n_res}, n_starts, p); got shape {starts.shape}"
        )
    n_starts = starts.shape[-2]
    n_jobs = n_res * n_starts
    if n_jobs >= 2**31:
        raise ValueError(f"{n_res} resamples x {n_starts} starts is too many runs for one call; split the resamples")
    kwargs = dict(lanes=_lanes_for(n_jobs, lanes), tol=tol, memory=memory, refill_every=max(1, int(refill_every)))
    args = (value_and_grad, jnp.asarray(starts), jax.tree.map(jnp.asarray, rows), shared)
    if compile_only:
        _run.lower(*args, **kwargs).compile()
        return None
    out = jax.block_until_ready(_run(*args, **kwargs))
    x, f, conv, it = (np.asarray(a) for a in out)
    p = starts.shape[-1]
    return MultiStartResult(
        x=x.reshape(n_res, n_starts, p),
        f=f.reshape(n_res, n_starts),
        converged=conv.reshape(n_res, n_starts),
        n_iter=it.reshape(n_res, n_starts),
    )


def compiled_variants() -> int:
    """How many compiled versions of the multi-start scheduler this process holds (one per shape and
    static option seen so far): repeated fits of the same shape must not add one."""
    return _run._cache_size()  # noqa: SLF001 — jax.jit's cache size; no public accessor
