"""Many hosts feeding one synchronous data-parallel step.

Each of N hosts runs its own input pipeline (same configuration, independent random draws); the
global step j starts when every host has its batch j on its device and step j-1 is done:
``cs[j] = max(max_h td_h[j], cd[j-1])``. The slowest host sets the pace, so with variable service
times throughput per host falls as N grows (the expected maximum of N draws grows like
``sqrt(2 log N)`` standard deviations for light tails). With deterministic times nothing is lost.

The hosts of one configuration are the lanes of one tile of :mod:`memsim.maxplus` (coupled mode),
so host 0 of every N draws the same random numbers as row 0 of ``memsim.pipeline.sweep`` with
the same seed: N = 1 reproduces the single-host simulation exactly.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from jax.sharding import Mesh

from memsim.knobs import ConfigError
from memsim.maxplus import check_mesh
from memsim.pipeline import PipelineConfig, SimOptions, grid_frame, simulate_frame, summarize

DEFAULT_HOSTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


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
    hosts = list(hosts)
    if not hosts:
        raise ConfigError("hosts=[]: give at least one number of hosts")
    for h in hosts:
        if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or not 1 <= h <= 4096:
            raise ConfigError(f"hosts contains {h!r}: each must be an integer in [1, 4096]")
    todo = sorted(set(hosts) | {1})
    opts = SimOptions(n_items=n_items, warmup_frac=warmup_frac, n_batches=n_batches, seed=seed,
                      dtype=dtype)
    opts.layout  # noqa: B018 — validates n_items
    reps = np.repeat(np.arange(len(todo)), todo)
    host_index = np.concatenate([np.arange(n) for n in todo])
    frame = grid_frame([config] * int(sum(todo)), config)
    raw = simulate_frame(frame, opts, stream_rows=host_index, coupled_hosts=reps, mesh=mesh)
    res = summarize(raw, frame)
    lead = np.concatenate([[0], np.cumsum(todo)[:-1]])  # host 0 of each N
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
