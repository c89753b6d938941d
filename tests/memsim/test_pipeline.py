"""memsim.pipeline pinned to queueing theory, to an event-driven simulator and to its own contracts."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from memsim import maxplus
from memsim.distributions import Dist
from memsim.knobs import ConfigError
from memsim.pipeline import (PipelineConfig, SimOptions, analytic_bounds, grid_frame, simulate_frame, simulate_trace,
                             simulate_traces, summarize, sweep)
from memsim.pipeline_reference import TIME_NAMES, simulate_reference

# A pipeline reduced to two stages: a loader thread (no workers, read and transfer switched off)
# feeding the step loop (feed='none'); between them the host buffer of B batches.
TWO_STAGE = dict(num_workers=0, feed="none", batch_size=1, record_bytes=0.0, read_latency_s=0.0,
                 device_sample_bytes=0.0, transfer_latency_s=0.0, transfer_dist="deterministic",
                 read_dist="deterministic")


def mm1k(lam: float, mu: float, k: int) -> tuple[float, float, float]:
    """M/M/1/K: (throughput, P(K) blocking, P(0) idle)."""
    rho = lam / mu
    p = np.array([rho**n for n in range(k + 1)])
    p /= p.sum()
    return lam * (1 - p[k]), p[k], p[0]


# ------------------------------------------------------------------------------ theory

@pytest.mark.latest
@pytest.mark.parametrize("lam,mu,buffer", [(1.0, 2.0, 1), (1.0, 1.0, 2), (1.5, 1.0, 4)])
def test_mm1k_blocking_and_throughput_within_monte_carlo_error(lam, mu, buffer):
    # An exponential server fed by an always-busy exponential source through a buffer of B slots,
    # with blocking after service, is the birth-death chain of M/M/1/K with K = B + 2 (buffer,
    # server and the blocked finished item); the loader's blocked fraction is P(K).
    reps = 48
    cfg = PipelineConfig(**TWO_STAGE, prefetch_buffer_size=buffer, transform_s=1 / lam,
                         transform_dist="exponential", compute_s=1 / mu, compute_dist="exponential")
    df = sweep([cfg] * reps, n_items=2000, seed=7)
    thr, p_block, p_idle = mm1k(lam, mu, buffer + 2)
    for col, want in (("samples_per_s", thr), ("blocked_transform_frac", p_block),
                      ("data_wait_frac", p_idle)):
        x = df[col].to_numpy()
        se = x.std(ddof=1) / math.sqrt(reps)
        assert abs(x.mean() - want) < 4 * se + 1e-12, (col, x.mean(), want, se)
        assert se < 0.05 * max(want, 0.05), (col, se)  # the test has power
    # the batch-means error of one run is honest: within a factor 2 of the replicas' spread
    ratio = df["samples_per_s_stderr"].mean() / df["samples_per_s"].std(ddof=1)
    assert 0.5 < ratio < 2.0, ratio


def test_mm1k_model_is_not_mm1_with_infinite_buffer():
    # guards the test above against a vacuous pass: the finite buffer visibly lowers throughput
    thr_k, _, _ = mm1k(1.0, 1.0, 3)
    cfg = PipelineConfig(**TWO_STAGE, prefetch_buffer_size=1, transform_s=1.0,
                         transform_dist="exponential", compute_s=1.0, compute_dist="exponential")
    df = sweep([cfg] * 16, n_items=2000, seed=3)
    assert df.samples_per_s.mean() < 0.85  # M/M/1 with an infinite buffer would give ~1.0
    assert abs(df.samples_per_s.mean() - thr_k) < 0.05


DET = dict(transform_dist="deterministic", compute_dist="deterministic", read_dist="deterministic",
           transfer_dist="deterministic")


def deterministic_grid():
    rows = []
    for w, pf, db, feed, p in itertools.product([0, 1, 2, 3, 4], [0, 1, 3], [1, 2], ["none", "double_buffer",
                                                                                     "grain_device_put"], [1, 2]):
        for x_s, c_s in ((2e-4, 0.01), (1e-4, 0.02), (4e-4, 0.003)):
            rows.append(PipelineConfig(**DET, num_workers=w, prefetch_buffer_size=pf, device_buffer_size=db,
                                       feed=feed, per_worker_buffer_size=p, cpu_buffer_size=1,
                                       batch_size=64, transform_s=x_s, compute_s=c_s,
                                       record_bytes=3072.0, read_latency_s=1e-5, read_bandwidth_Bps=2e8))
    return rows


@pytest.fixture(scope="module")
def det_sweep():
    # window = 8 chunks of 672 items = 5376 = 2^8·3·7: whole periods of 1..8 cyclic workers
    return sweep(deterministic_grid(), n_items=6720, dtype="float64")


@pytest.mark.latest
def test_deterministic_throughput_equals_the_bottleneck_rate(det_sweep):
    df = det_sweep
    np.testing.assert_allclose(df.samples_per_s, df.bottleneck_bound_samples_per_s, rtol=1e-9)
    assert (df.bottleneck == df.bottleneck_bound_stage).all()
    # the grid really exercises different bottlenecks
    assert {"transform", "compute", "transfer+compute"} <= set(df.bottleneck)


def test_deterministic_stall_fraction(det_sweep):
    df = det_sweep[det_sweep.feed != "none"]  # feed='none' transfers inside the step by design
    compute_rate = 1.0 / (df.grad_accum_steps * df.compute_s) * df.batch_size
    loader_bound = df.bottleneck != "compute"
    want = np.where(loader_bound, 1.0 - df.bottleneck_bound_samples_per_s / compute_rate, 0.0)
    np.testing.assert_allclose(df.data_wait_frac, want, atol=1e-9)
    assert loader_bound.any() and (~loader_bound).any()
    assert (df.data_wait_frac[loader_bound] > 0.05).any()


def test_serial_bound_is_reached_when_everything_shares_one_thread():
    cfg = PipelineConfig(**DET, num_workers=0, prefetch_buffer_size=0, feed="none")
    df = sweep([cfg], n_items=400, dtype="float64")
    np.testing.assert_allclose(df.samples_per_s, df.serial_bound_samples_per_s, rtol=1e-9)
    assert df.bottleneck[0] == "transform+transfer+compute"


def test_bounds_by_hand():
    cfg = PipelineConfig(num_workers=3, batch_size=10, transform_s=0.003, compute_s=0.02, grad_accum_steps=2,
                         update_s=0.01, record_bytes=1000, read_bandwidth_Bps=1e6, read_latency_s=0.0,
                         device_sample_bytes=0, transfer_latency_s=0.001)
    b = analytic_bounds([cfg]).iloc[0]
    # per batch: link 10·1000/1e6 = 0.01 s; workers (0.01 + 0.03)/3; transfer 0.001; step 2·0.02 + 0.01
    assert b.bottleneck_bound_stage == "compute"
    assert b.bottleneck_bound_samples_per_s == pytest.approx(10 / 0.05)
    assert b.serial_bound_samples_per_s == pytest.approx(10 / (0.01 + 0.03 + 0.001 + 0.05))


# ---------------------------------------------------------------------- Little's law

def stochastic_grid():
    rows = []
    for w, pf, db, feed, p in itertools.product([0, 1, 2, 4], [0, 1, 3], [1, 2], ["none", "double_buffer",
                                                                                 "grain_device_put"], [1, 2]):
        rows.append(PipelineConfig(num_workers=w, prefetch_buffer_size=pf, device_buffer_size=db, feed=feed,
                                   per_worker_buffer_size=p, cpu_buffer_size=1, batch_size=16,
                                   transform_s=4e-4 * max(w, 1), transform_dist="gamma:1.5",
                                   compute_s=0.006, compute_dist="lognormal:0.4",
                                   transfer_dist="exponential", read_dist="lognormal:0.5"))
    return rows


def _time_average(enter: np.ndarray, leave: np.ndarray, t0: float, t1: float) -> tuple[float, int]:
    """Time-average of the number of items present over [t0, t1], by integrating the step function,
    and the largest number present at any time."""
    ev = np.concatenate([np.stack([enter, np.ones_like(enter)], 1), np.stack([leave, -np.ones_like(leave)], 1)])
    ev = ev[np.lexsort((ev[:, 1], ev[:, 0]))]  # leaves before enters at equal times
    count = np.cumsum(ev[:, 1])
    t = np.clip(ev[:, 0], t0, t1)
    area = float(np.sum(count[:-1] * np.diff(t)))
    return area / (t1 - t0), int(count.max())


@pytest.fixture(scope="module")
def stoch_traces():
    grid = stochastic_grid()
    return grid, simulate_traces(grid, n_items=400, seed=11)


@pytest.mark.latest
def test_littles_law_for_every_buffer_of_every_configuration(stoch_traces):
    grid, traces = stoch_traces
    checked = 0
    for cfg, tr in zip(grid, traces):
        host = cfg.prefetch_buffer_size + (cfg.cpu_buffer_size if cfg.feed == "grain_device_put" else 0)
        dev = 0 if cfg.feed == "none" else cfg.device_buffer_size
        buffers = {"host": ("host_in", "transfer_start", host), "device": ("device_in", "compute_start", dev)}
        if cfg.num_workers:
            buffers["worker queues"] = ("worker_out", "host_in", cfg.per_worker_buffer_size * cfg.num_workers)
        t_end = float(tr.compute_end.iloc[-1])
        lam = len(tr) / t_end
        for name, (a, b, cap) in buffers.items():
            enter, leave = tr[a].to_numpy(), tr[b].to_numpy()
            assert np.all(leave >= enter), (cfg, name)
            L, peak = _time_average(enter, leave, 0.0, t_end)
            W = float(np.mean(leave - enter))
            assert L == pytest.approx(lam * W, rel=1e-9, abs=1e-12), (cfg, name)
            assert peak <= cap, (cfg, name, peak, cap)  # the buffer never overflows
            checked += 1
        if cfg.num_workers:  # each worker's own queue holds at most per_worker_buffer_size batches
            for w in range(cfg.num_workers):
                mine = tr[tr.worker == w]
                _, peak = _time_average(mine.worker_out.to_numpy(), mine.host_in.to_numpy(), 0.0, t_end)
                assert peak <= cfg.per_worker_buffer_size
    assert checked > 300


def test_sweep_occupancy_agrees_with_the_trace_time_average(stoch_traces):
    grid, traces = stoch_traces
    df = sweep(grid, n_items=400, seed=11, dtype="float64")
    warm = int(df.sim_warmup_items[0])
    for (cfg, tr), (_, row) in zip(zip(grid, traces), df.iterrows()):
        t0, t1 = float(tr.compute_end.iloc[warm - 1]), float(tr.compute_end.iloc[-1])
        assert row.samples_per_s == pytest.approx((len(tr) - warm) * cfg.batch_size / (t1 - t0), rel=1e-9)
        for col, (a, b) in {"mean_occupancy_host_buffer": ("host_in", "transfer_start"),
                            "mean_occupancy_device_buffer": ("device_in", "compute_start"),
                            "mean_occupancy_worker_queues": ("worker_out", "host_in")}.items():
            if col == "mean_occupancy_worker_queues" and not cfg.num_workers:
                continue
            enter, leave = tr[a].to_numpy(), tr[b].to_numpy()
            L, _ = _time_average(enter, leave, t0, t1)
            # the sweep sums the sojourns of the window's items; only items straddling the window's
            # ends can make a difference
            edge = 2 * (np.max(leave - enter) * (cfg.prefetch_buffer_size + cfg.device_buffer_size
                                                 + cfg.cpu_buffer_size + 2 * max(cfg.num_workers, 1) + 2)) / (t1 - t0)
            assert abs(row[col] - L) <= edge + 1e-12, (cfg, col, row[col], L)


# --------------------------------------------------------- against the event simulator

def test_recurrences_match_the_event_by_event_simulator_item_by_item(stoch_traces):
    grid, traces = stoch_traces
    names = {"wf": "worker_start", "ls": "read_start", "le": "read_end", "wc": "transform_end",
             "wq": "worker_out", "taken": "host_in", "ts": "transfer_start", "tc": "transfer_end",
             "td": "device_in", "cs": "compute_start", "cd": "compute_end"}
    for cfg, tr in list(zip(grid, traces))[::3]:
        svc = {"lat": tr.latency_s, "R": tr.read_s, "X": tr.transform_s, "T": tr.transfer_s, "C": tr.compute_s}
        ref = simulate_reference(cfg, len(tr), services=svc)
        for k in TIME_NAMES:
            np.testing.assert_allclose(ref[k], tr[names[k]].to_numpy(), rtol=0, atol=1e-9, err_msg=f"{cfg} {k}")


def test_event_simulator_with_its_own_draws_agrees_statistically():
    cfg = PipelineConfig(num_workers=2, transform_s=1.5e-4, compute_s=0.01, prefetch_buffer_size=1,
                         transform_dist="lognormal:1.0", batch_size=32)
    df = sweep([cfg] * 8, n_items=2000, seed=2)
    ref = [simulate_reference(cfg, 2000, seed=s)["samples_per_s"] for s in range(3)]
    se = df.samples_per_s.std(ddof=1)
    assert abs(np.mean(ref) - df.samples_per_s.mean()) < 4 * se * math.sqrt(1 / 3 + 1 / 8)


# ----------------------------------------------------------------- sweep contracts

@pytest.mark.latest
def test_sweep_columns_join_with_measured_knob_names():
    df = sweep({"num_workers": [0, 2], "feed": ["none", "double_buffer"]}, n_items=400)
    for col in ("num_workers", "prefetch_buffer_size", "device_buffer_size", "cpu_buffer_size", "batch_size",
                "grad_accum_steps", "feed", "precision", "samples_per_s", "steps_per_s", "data_wait_frac",
                "util_read", "util_transform", "util_transfer", "util_compute", "mean_occupancy_host_buffer",
                "mean_occupancy_device_buffer", "mean_occupancy_worker_queues", "time_to_first_batch_s",
                "bottleneck", "samples_per_s_stderr", "steps_per_s_stderr", "data_wait_frac_stderr",
                "bottleneck_bound_samples_per_s", "serial_bound_samples_per_s", "bound_position"):
        assert col in df, col
    assert len(df) == 4
    measured = pd.DataFrame({"num_workers": [2], "feed": ["none"], "samples_per_s_measured": [1.0]})
    joined = measured.merge(df, on=["num_workers", "feed"])
    assert len(joined) == 1
    assert df.samples_per_s.equals(df.steps_per_s * df.batch_size)


def test_a_dataframe_grid_uses_its_config_columns_and_ignores_others():
    rows = pd.DataFrame({"num_workers": [1, 3], "feed": ["double_buffer", "none"], "status": ["ok", "ok"],
                         "samples_per_s": [5.0, 6.0]})
    df = sweep(rows, n_items=400)
    assert df.num_workers.tolist() == [1, 3] and df.feed.tolist() == ["double_buffer", "none"]
    assert df.samples_per_s.tolist() != [5.0, 6.0]


def test_same_seed_same_numbers_and_a_row_does_not_depend_on_its_neighbours():
    grid = {"num_workers": [1, 2, 4], "prefetch_buffer_size": [0, 2]}
    a = sweep(grid, n_items=400, seed=5)
    b = sweep(grid, n_items=400, seed=5)
    c = sweep(grid, n_items=400, seed=6)
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a.samples_per_s, c.samples_per_s)
    alone = sweep([PipelineConfig(num_workers=1, prefetch_buffer_size=0)], n_items=400, seed=5)
    assert alone.samples_per_s[0] == a.samples_per_s[0]  # row 0 alone and in the grid


def test_a_rows_numbers_do_not_depend_on_the_tile_layout():
    # Rows keep their stream number (and so their random numbers) however the simulator packs
    # them: reversed order, other rows beside them (other tile widths and tile groupings) or
    # alone. Stochastic stages everywhere, buffers of several sizes so the rows fall in several
    # tiles; gamma and lognormal samplers both drawn.
    grid = {"num_workers": [0, 1, 3, 8], "prefetch_buffer_size": [0, 1, 5], "device_buffer_size": [1, 3],
            "read_dist": ["exponential"], "transfer_dist": ["gamma:0.5"], "compute_dist": ["lognormal:0.3"]}
    opts = SimOptions(n_items=240, seed=11)
    frame = grid_frame(grid, PipelineConfig())
    n = len(frame)
    cols = ["samples_per_s", "data_wait_frac", "mean_occupancy_host_buffer"]
    base = summarize(simulate_frame(frame, opts), frame)[cols].to_numpy()
    rev = frame.iloc[::-1].reset_index(drop=True)
    again = summarize(simulate_frame(rev, opts, stream_rows=np.arange(n)[::-1]), rev)[cols].to_numpy()[::-1]
    np.testing.assert_array_equal(base, again)
    pick = [0, 5, n - 1]
    sub = frame.iloc[pick].reset_index(drop=True)
    alone = summarize(simulate_frame(sub, opts, stream_rows=np.array(pick)), sub)[cols].to_numpy()
    np.testing.assert_array_equal(base[pick], alone)
    # and the numbers are random: another seed moves every stochastic row
    other = summarize(simulate_frame(frame, SimOptions(n_items=240, seed=12)), frame)["samples_per_s"].to_numpy()
    assert np.all(other != base[:, 0])


def test_trace_time_to_first_batch_and_first_item_never_waits():
    cfg = PipelineConfig(num_workers=2, transform_s=2e-4, read_latency_s=1e-5)
    tr = simulate_trace(cfg, 60)
    first = tr.iloc[0]
    assert first.compute_start == pytest.approx(first.latency_s + first.read_s + first.transform_s
                                                + first.transfer_s, rel=1e-12)
    df = sweep([cfg], n_items=400, dtype="float64")
    assert df.time_to_first_batch_s[0] == pytest.approx(first.compute_start, rel=1e-12)
    assert (tr.compute_start.diff().dropna() > 0).all()


def test_more_workers_help_a_loader_bound_pipeline_until_compute_binds():
    base = PipelineConfig(transform_s=5e-4, compute_s=0.01, batch_size=64)
    df = sweep({"num_workers": [1, 2, 4, 8]}, base, n_items=400)
    s = df.samples_per_s.to_numpy()
    assert s[1] > 1.8 * s[0]                      # 1 -> 2 workers nearly doubles
    assert df.bottleneck.tolist()[:2] == ["transform", "transform"]
    assert df.bottleneck.tolist()[-1] == "compute"
    assert s[-1] == pytest.approx(64 / 0.01, rel=0.02)


@pytest.mark.latest
def test_jitted_kernel_compiles_once_per_shape():
    grid = {"num_workers": [1, 2], "feed": ["double_buffer"]}
    sweep(grid, n_items=400)
    n = maxplus.compiled_variants()
    sweep(grid, n_items=400, seed=1)
    sweep({"num_workers": [2, 1], "feed": ["double_buffer"]}, n_items=400)
    assert maxplus.compiled_variants() == n


# ---------------------------------------------------------------------- bad input

@pytest.mark.parametrize("field,value", [
    ("num_workers", -1), ("batch_size", 0), ("prefetch_buffer_size", -2), ("device_buffer_size", -1),
    ("per_worker_buffer_size", 0), ("read_bandwidth_Bps", 0.0), ("transfer_bandwidth_Bps", -5.0),
    ("transform_s", -1e-3), ("compute_s", float("nan")), ("cache_hit_rate", 1.5), ("feed", "async"),
    ("precision", "fp8"), ("num_workers", 2.5), ("grad_accum_steps", 0), ("bf16_speedup", 0.0)])
def test_bad_config_values_name_the_field_and_value(field, value):
    with pytest.raises(ConfigError) as e:
        PipelineConfig(**{field: value})
    assert field in str(e.value) and repr(value) in str(e.value)


def test_bad_distributions_and_grids():
    with pytest.raises(ConfigError, match="transform_dist.*weibull"):
        PipelineConfig(transform_dist="weibull")
    with pytest.raises(ConfigError, match="cv=0"):
        Dist("lognormal", cv=0)
    with pytest.raises(ConfigError, match="empty"):
        sweep({})
    with pytest.raises(ConfigError, match="num_workers.*empty"):
        sweep({"num_workers": []})
    with pytest.raises(ConfigError, match="'workers'"):
        sweep({"workers": [1]})
    with pytest.raises(ConfigError, match=r"num_workers=-3 \(grid row 1\)"):
        sweep({"num_workers": [1, -3]})
    with pytest.raises(ConfigError, match="no rows"):
        sweep(pd.DataFrame({"num_workers": []}))
    with pytest.raises(ConfigError, match="num_workers=nan"):
        sweep(pd.DataFrame({"num_workers": [1, None]}))
    with pytest.raises(ConfigError, match="grad_accum_steps=3"):
        PipelineConfig(batch_size=64, grad_accum_steps=3)
    with pytest.raises(ConfigError, match="n_items=5"):
        sweep({"num_workers": [1]}, n_items=5)
    with pytest.raises(ConfigError, match="bandwidth_Bps"):
        PipelineConfig().with_links(read=object())


@pytest.mark.latest
def test_links_from_the_hierarchy_plug_in():
    from memsim.hierarchy import Link

    pcie = Link("pinned_host", "hbm", 25e9, 10e-6, memory_kind="pinned_host")
    disk = Link("disk", "ram", 5e8, 1e-4)
    cfg = PipelineConfig().with_links(read=disk, transfer=pcie)
    assert (cfg.read_bandwidth_Bps, cfg.read_latency_s) == (5e8, 1e-4)
    assert (cfg.transfer_bandwidth_Bps, cfg.transfer_latency_s) == (25e9, 10e-6)
    b = analytic_bounds([cfg]).iloc[0]
    assert b.serial_bound_samples_per_s < analytic_bounds([PipelineConfig()]).iloc[0].serial_bound_samples_per_s
