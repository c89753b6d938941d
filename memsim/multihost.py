"""Many hosts feeding one synchronous data-parallel step.

Each of N hosts runs its own input pipeline (independent random draws); the global step j starts
when every host has its batch j on its device and step j-1 is done:
``cs[j] = max(max_h td_h[j], cd[j-1])``. The slowest host sets the pace, so with variable service
times throughput per host falls as N grows (the expected maximum of N draws grows like
``sqrt(2 log N)`` standard deviations for light tails). With deterministic times nothing is lost.

:func:`many_hosts` simulates N identical hosts; :func:`straggler_hosts` N hosts of which some run a
slower pipeline (a heavier transform, fewer workers): with deterministic times the global step
rate is then exactly the slowest host's own rate, ``min_h`` of the hosts' bottleneck bounds
(the cycles of the coupled max-plus system lie within one host's pipeline or through the shared
step, so its cycle mean is the largest of theirs; Baccelli et al. 1992, ch. 3).

The hosts of one configuration are the lanes of one tile of :mod:`memsim.maxplus` (coupled mode;
lanes carry their own service times, worker counts and buffers), so host 0 of every N draws the
same random numbers as row 0 of ``memsim.pipeline.sweep`` with the same seed: N = 1 reproduces
the single-host simulation exactly. The step is one for all hosts (the kernel draws it once, in
lane 0), so hosts that differ get the step of the slower one.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import pandas as pd
from jax.sharding import Mesh

from memsim.knobs import ConfigError
from memsim.maxplus import check_mesh
from memsim.pipeline import (PipelineConfig, SimOptions, analytic_bounds, grid_frame, simulate_frame,
                             summarize)

DEFAULT_HOSTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# the fields that make up the synchronous step, shared by every host of one step
STEP_FIELDS = ("compute_s", "compute_dist", "update_s", "bf16_speedup", "precision", "grad_accum_steps")


def _check_hosts(hosts) -> list[int]:
    hosts = list(hosts)
    if not hosts:
        raise ConfigError("hosts=[]: give at least one number of hosts")
    for h in hosts:
        if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or not 1 <= h <= 4096:
            raise ConfigError(f"hosts contains {h!r}: each must be an integer in [1, 4096]")
    return [int(h) for h in hosts]


def _simulate_steps(steps: list[list[PipelineConfig]], opts: SimOptions, mesh: Mesh | None = None):
    """Simulates each list of host configurations as one synchronous step (host h of a list uses
    random stream h); returns (raw kernel sums, per-row summary, index of each list's first row)."""
    sizes = [len(s) for s in steps]
    reps = np.repeat(np.arange(len(steps)), sizes)
    host_index = np.concatenate([np.arange(n) for n in sizes])
    configs = [c for s in steps for c in s]
    frame = grid_frame(configs, configs[0])
    raw = simulate_frame(frame, opts, stream_rows=host_index, coupled_hosts=reps, mesh=mesh)
    res = summarize(raw, frame)
    lead = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return raw, res, lead


def many_hosts(config: PipelineConfig, hosts: Sequence[int] = DEFAULT_HOSTS, *, n_items: int = 1000,
               warmup_frac: float = 0.2, n_batches: int = 8, seed: int = 0,
               dtype: str = "float32", mesh: Mesh | None = None) -> pd.DataFrame:
    """Throughput of N synchronous hosts, for each N in ``hosts``.

    Args:
        config: every host's pipeline and step.
        hosts: numbers of hosts (each 1..4096); N = 1 is always simulated as the reference.
        n_items, warmup_frac, n_batches, seed, dtype: see ``memsim.pipeline.SimOptions``.
        mesh: devices to spread the simulation over, as for ``memsim.pipeline.sweep`` (a mesh
            with a ``"configs"`` axis; default every local device). The hosts of one N stay on
            one device (they are one tile); different N run on different devices. The numbers
            do not depend on the mesh.

    Returns:
        DataFrame, one row per N: ``hosts``, ``samples_per_s`` (all hosts together),
        ``samples_per_s_per_host``, ``steps_per_s``, ``data_wait_frac``, ``efficiency``
        (steps/s relative to one host), ``throughput_loss`` (1 − efficiency),
        ``time_to_first_batch_s`` and batch-means ``*_stderr``.

    Example:
        >>> cfg = PipelineConfig(transform_s=1e-3, transform_dist="deterministic",
        ...                      compute_dist="deterministic")
        >>> df = many_hosts(cfg, hosts=(1, 8), n_items=200)
        >>> bool(df.throughput_loss.abs().max() < 1e-6)
        True
    """
    if not isinstance(config, PipelineConfig):
        raise ConfigError(f"config={config!r}: expected a PipelineConfig")
    mesh = check_mesh(mesh)
    hosts = _check_hosts(hosts)
    todo = sorted(set(hosts) | {1})
    opts = SimOptions(n_items=n_items, warmup_frac=warmup_frac, n_batches=n_batches, seed=seed,
                      dtype=dtype)
    opts.layout  # noqa: B018 — validates n_items
    raw, res, lead = _simulate_steps([[config] * n for n in todo], opts, mesh=mesh)
    r = res.iloc[lead].reset_index(drop=True)
    n = np.asarray(todo, dtype=np.float64)
    one = r.iloc[0]
    eff = r["steps_per_s"] / one["steps_per_s"]
    # paired batch means: host 0 draws the same numbers for every N (common random numbers), so
    # the error of the ratio comes from the per-batch ratio of durations, not two independent errors
    warm = raw["layout"][0]
    ends = raw["ends"][lead].astype(np.float64)
    dur = np.diff(np.concatenate([np.zeros((len(lead), 1)), ends], axis=1), axis=1)[:, warm:]
    d1 = dur[0]
    m = dur.shape[1]
    resid = d1[None, :] - eff.to_numpy()[:, None] * dur
    eff_se = np.sqrt((resid**2).sum(1) / (m * (m - 1))) / dur.mean(1)
    out = pd.DataFrame({
        "hosts": np.asarray(todo),
        "samples_per_s": r["samples_per_s"] * n,
        "samples_per_s_per_host": r["samples_per_s"],
        "steps_per_s": r["steps_per_s"],
        "data_wait_frac": r["data_wait_frac"],
        "efficiency": eff,
        "throughput_loss": 1.0 - eff,
        "time_to_first_batch_s": r["time_to_first_batch_s"],
        "samples_per_s_stderr": r["samples_per_s_stderr"] * n,
        "steps_per_s_stderr": r["steps_per_s_stderr"],
        "data_wait_frac_stderr": r["data_wait_frac_stderr"],
        "efficiency_stderr": eff_se,
        "bottleneck": r["bottleneck"],
    })
    out = out[out["hosts"].isin(hosts)].reset_index(drop=True)
    for k, v in config.to_row().items():
        out[k] = v
    return out


def _step_of(a: PipelineConfig, b: PipelineConfig) -> dict:
    """The step fields of whichever of ``a`` and ``b`` has the longer mean step (``a`` on a tie)."""
    def mean_step(c: PipelineConfig) -> float:
        speed = c.bf16_speedup if c.precision == "bf16" else 1.0
        return c.grad_accum_steps * c.compute_s / speed + c.update_s
    pick = b if mean_step(b) > mean_step(a) else a
    return {f: getattr(pick, f) for f in STEP_FIELDS}


def straggler_hosts(base: PipelineConfig, slow: PipelineConfig, hosts: Sequence[int] = (1, 2, 4, 8),
                    *, slow_count: int = 1, n_items: int = 1000, warmup_frac: float = 0.2,
                    n_batches: int = 8, seed: int = 0, dtype: str = "float32",
                    mesh: Mesh | None = None) -> pd.DataFrame:
    """Throughput of N synchronous hosts of which ``min(slow_count, N)`` run the ``slow`` pipeline.

    Host h < N − slow_count runs ``base``, the others ``slow``, so N = 1 with ``slow_count >= 1``
    is one slowed host alone (exactly ``memsim.pipeline.sweep([slow])``) and with
    ``slow_count = 0`` one normal host alone (exactly ``sweep([base])``; every N then equals
    :func:`many_hosts`). Where both kinds of host share a step, every host gets the step fields
    (``STEP_FIELDS``) of the one with the longer mean step: the synchronous step ends when the
    slowest host's step does.

    Args:
        base: a normal host's pipeline and step.
        slow: a slowed host's; the same ``batch_size`` (each host loads its shard of the global
            batch), the same distribution kinds for read, transform and transfer, and the same
            buffers where a buffer holds more than ``memsim.maxplus.LANE_RING_MAX`` batches (the
            hosts of one step must fit one tile of the kernel).
        hosts: numbers of hosts (each 1..4096).
        slow_count: slowed hosts among N (>= 0; capped at N).
        n_items, warmup_frac, n_batches, seed, dtype: see ``memsim.pipeline.SimOptions``.
        mesh: devices to spread the simulation over, as for :func:`many_hosts`.

    Returns:
        DataFrame, one row per N: ``hosts``, ``slow_hosts``, ``samples_per_s`` (all hosts
        together), ``samples_per_s_per_host``, ``steps_per_s``, ``data_wait_frac`` (the step's),
        ``time_to_first_batch_s``, batch-means ``*_stderr``, ``normal_steps_per_s`` and
        ``slow_steps_per_s`` (one such host alone, same options), ``slowdown`` (1 − steps/s over
        a normal host's alone), ``bound_steps_per_s`` and ``bound_samples_per_s`` (the smallest
        of the hosts' bottleneck bounds: exact for deterministic times), ``bottleneck`` (the
        simulated bottleneck of the host with the lowest bound), then ``base``'s fields and the
        slow host's fields that differ, prefixed ``slow_``.

    Example:
        >>> det = dict(transform_dist="deterministic", compute_dist="deterministic", batch_size=8,
        ...            num_workers=1, compute_s=0.004, record_bytes=0, device_sample_bytes=0,
        ...            transfer_latency_s=0)
        >>> fast, slow = PipelineConfig(transform_s=2e-4, **det), PipelineConfig(transform_s=1e-3, **det)
        >>> df = straggler_hosts(fast, slow, hosts=(1, 4), slow_count=1, n_items=200)
        >>> [round(float(v), 1) for v in df.steps_per_s]   # one slowed host: 1 / (8 × 1 ms)
        [125.0, 125.0]
        >>> round(float(df.normal_steps_per_s[0]), 1)        # a normal host alone: 1 / 4 ms step
        250.0
    """
    for name, c in (("base", base), ("slow", slow)):
        if not isinstance(c, PipelineConfig):
            raise ConfigError(f"{name}={c!r}: expected a PipelineConfig")
    if slow.batch_size != base.batch_size:
        raise ConfigError(f"slow batch_size={slow.batch_size}: must equal base batch_size={base.batch_size} "
                          f"(every host loads an equal shard of the global batch); slow a host another way")
    for f in ("read_dist", "transform_dist", "transfer_dist"):
        a, b = getattr(base, f), getattr(slow, f)
        if (a.kind, a.samples) != (b.kind, b.samples):
            raise ConfigError(f"slow {f}={b}: must have the kind (and, for empirical, the samples) of base "
                              f"{f}={a}; the hosts of one step share one compiled kernel (use, e.g., "
                              f"lognormal for both with their own cv)")
    if isinstance(slow_count, bool) or not isinstance(slow_count, (int, np.integer)) or slow_count < 0:
        raise ConfigError(f"slow_count={slow_count!r}: must be an integer >= 0")
    mesh = check_mesh(mesh)
    hosts = _check_hosts(hosts)
    todo = sorted(set(hosts))
    opts = SimOptions(n_items=n_items, warmup_frac=warmup_frac, n_batches=n_batches, seed=seed,
                      dtype=dtype)
    opts.layout  # noqa: B018 — validates n_items
    step = _step_of(base, slow)
    b_mix, s_mix = dataclasses.replace(base, **step), dataclasses.replace(slow, **step)
    steps = [[base], [slow]]  # the references: each kind of host alone
    for n in todo:
        k = min(int(slow_count), n)
        if k == 0:
            steps.append([base] * n)
        elif k == n:
            steps.append([slow] * n)
        else:
            steps.append([b_mix] * (n - k) + [s_mix] * k)
    raw, res, lead = _simulate_steps(steps, opts, mesh=mesh)
    bounds = analytic_bounds([c for s in steps for c in s])["bottleneck_bound_steps_per_s"].to_numpy()
    ref = res.iloc[lead[:2]]
    r = res.iloc[lead[2:]].reset_index(drop=True)
    n = np.asarray(todo, dtype=np.float64)
    bound, bottleneck = [], []
    for i, s in enumerate(lead[2:]):
        rows = np.arange(s, s + todo[i])
        worst = rows[int(np.argmin(bounds[rows]))]
        bound.append(float(bounds[worst]))
        bottleneck.append(res["bottleneck"].iloc[worst])
    bound = np.asarray(bound)
    normal = float(ref["steps_per_s"].iloc[0])
    out = pd.DataFrame({
        "hosts": np.asarray(todo),
        "slow_hosts": np.minimum(int(slow_count), np.asarray(todo)),
        "samples_per_s": r["samples_per_s"] * n,
        "samples_per_s_per_host": r["samples_per_s"],
        "steps_per_s": r["steps_per_s"],
        "data_wait_frac": r["data_wait_frac"],
        "time_to_first_batch_s": r["time_to_first_batch_s"],
        "samples_per_s_stderr": r["samples_per_s_stderr"] * n,
        "steps_per_s_stderr": r["steps_per_s_stderr"],
        "data_wait_frac_stderr": r["data_wait_frac_stderr"],
        "normal_steps_per_s": normal,
        "slow_steps_per_s": float(ref["steps_per_s"].iloc[1]),
        "slowdown": 1.0 - r["steps_per_s"] / normal,
        "bound_steps_per_s": bound,
        "bound_samples_per_s": bound * base.batch_size * n,
        "bottleneck": bottleneck,
    })
    for k, v in base.to_row().items():
        out[k] = v
    for k, v in slow.to_row().items():
        if v != base.to_row()[k]:
            out[f"slow_{k}"] = v
    return out
