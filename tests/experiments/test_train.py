import dataclasses
import os
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import psutil
import pytest

from experiments import train
from experiments.models import make_model
from memsim.knobs import ConfigError
from tests.procs import running

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _smoke(data_cache, **kw):
    return dataclasses.replace(train.smoke(), cache_dir=data_cache, **kw)


class _CountingFeed:
    """Wraps a run's device feed: records, by the test's own clock, when each batch was asked for
    and how many samples it actually held, and when the feed was closed."""

    def __init__(self, inner):
        self.inner, self.fetches, self.closed_at = inner, [], None

    def __iter__(self):
        return self

    def __next__(self):
        t = time.perf_counter()
        batch, times = next(self.inner)
        leaf = batch["image"] if "image" in batch else batch["tokens"]
        self.fetches.append((t, int(leaf.shape[0])))
        return batch, times

    def close(self):
        if self.closed_at is None:
            self.closed_at = time.perf_counter()
        self.inner.close()

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_worker_cpu_holds_the_stamped_stages_and_more(data_cache, tmp_path):
    # the workers' whole CPU per sample: the stamped stages and Grain's own work (batching, copies).
    # Run as a user runs it, in its own interpreter (whose resource tracker then frees what Grain's
    # workers had in flight when they stopped).
    subprocess.run([sys.executable, "-m", "experiments", "train", "--num_workers=1", "--min_measure_s=0.5",
                    "--width=64", "--depth=1", "--batch_size=32", "--num_samples=256", f"--cache_dir={data_cache}",
                    f"--results_root={tmp_path}"], check=True, capture_output=True, timeout=300)
    (rows,) = tmp_path.glob("train/*/rows.csv")
    r = pd.read_csv(rows).iloc[0]
    stamped = r.read_cpu_s_per_sample + r.decode_cpu_s_per_sample + r.augment_cpu_s_per_sample
    assert r.status == "ok" and 0 < stamped < r.worker_cpu_s_per_sample < 50 * stamped
    # the worker's pipeline thread runs every stamped stage (one read thread) and is one thread of
    # the worker's CPU: between the two, up to a 10 ms tick of the kernel's accounting apart
    tick = 0.01 / (r.steps_measured * r.batch_size)
    assert stamped - tick < r.worker_thread_cpu_s_per_sample <= r.worker_cpu_s_per_sample + tick


@pytest.mark.latest
@pytest.mark.parametrize("feed", ["none", "double_buffer", "grain_device_put"])
def test_run_row_is_complete_and_consistent(data_cache, feed, shm_guard, monkeypatch):
    from experiments import feed as feed_lib
    feeds, real = [], feed_lib.make_feed
    monkeypatch.setattr(feed_lib, "make_feed", lambda *a, **kw: feeds.append(_CountingFeed(real(*a, **kw))) or feeds[-1])
    t0 = time.perf_counter()
    res = train.run_detailed(_smoke(data_cache, feed=feed))
    elapsed = time.perf_counter() - t0
    r = res.row.iloc[0]
    assert r.status == "ok" and r.feed == feed and r.trace_count == 1
    assert 0 <= r.data_wait_frac <= 1
    steps = res.steps[(res.steps.phase == "fed") & ~res.steps.warmup]
    assert len(steps) == r.steps_measured >= 6
    # samples/s against what the loader delivered and the test's own clock: every batch fetched was
    # stepped once (warm-up, then the measured window), and the measured window's samples were
    # processed between the window's first fetch and the feed's close, and took at least the time
    # from its first to its last fetch (less 1 ms a step for the untimed bookkeeping between steps)
    (spy,) = feeds
    assert len(spy.fetches) == r.warmup_steps_run + r.steps_measured
    window = spy.fetches[-r.steps_measured:]
    samples = sum(n for _, n in window)
    assert samples == r.batch_size * r.steps_measured
    t_first, t_last = window[0][0], window[-1][0]
    assert samples / (spy.closed_at - t_first) <= r.samples_per_s
    assert r.samples_per_s <= samples / (t_last - t_first - 1e-3 * r.steps_measured)
    assert r.batch_size * r.steps_measured / elapsed < r.samples_per_s
    assert r.measure_s <= r.wall_s <= elapsed
    assert (steps.data_wait_s <= steps.step_time_s).all()
    assert r.feed_efficiency_lo <= r.feed_efficiency <= r.feed_efficiency_hi
    # the stages' CPU seconds per sample: the window's stamps summed over its samples, never above wall time
    for stage in ("read", "decode", "augment"):
        assert r[f"{stage}_cpu_s_per_sample"] == pytest.approx(steps[f"c_{stage}"].sum() / samples)
    assert 0 < r.augment_cpu_s_per_sample <= r.augment_s_per_sample * 1.05 + 1e-6
    assert r.num_workers == 0 and np.isnan(r.worker_cpu_s_per_sample)  # no worker processes to measure
    # each measured batch's age: from when the loader made it (its last sample's stamp) to the step
    # taking it, so never more than the run's whole wall time, never negative
    assert (steps.batch_age_s >= 0).all() and (steps.batch_age_s < r.wall_s).all()
    assert r.batch_age_median_s == pytest.approx(steps.batch_age_s.median())
    assert "made_at" not in res.steps.columns and isinstance(r.warmup_filled, (bool, np.bool_))
    assert np.isnan(r.worker_thread_cpu_s_per_sample)
    # the machine's company in each window: shares and cores, never negative; unresolved (NaN) only in a
    # window shorter than ten of the kernel counters' ticks (the reads around the window allowed for)
    for window_s, prefix in ((r.measure_s, ""), (r.resident_measure_s, "resident_")):
        steal, foreign = r[f"{prefix}steal_frac"], r[f"{prefix}foreign_cpu_cores"]
        if np.isnan(steal):
            assert np.isnan(foreign) and window_s < train.MachineWindow.MIN_S + 0.05, (prefix, window_s)
        else:
            assert 0 <= steal < 1 and 0 <= foreign <= r.cpu_count, (prefix, steal, foreign)
        assert r[f"{prefix}written_mib"] >= 0 or (np.isnan(r[f"{prefix}written_mib"]) and not os.path.exists("/proc/vmstat"))
    for col in ("platform", "device_kind", "jax_version", "flax_version", "optax_version", "grain_version",
                "cpu_count", "cpu_model", "cpu_simd", "git_commit", "seed", "compile_s", "peak_rss_bytes",
                "xla_flops_per_step"):
        assert col in res.row.columns
    assert r.final_loss < r.first_loss, "the step must actually train"


@pytest.mark.latest
def test_step_traces_once_and_donates(data_cache):
    cfg = _smoke(data_cache)
    step = train.TrainStep(make_model(cfg.model_config()), cfg)
    batch = {"image": jnp.zeros((32, 32, 32, 3)), "label": jnp.zeros((32,), jnp.int32)}
    step.compile(batch)
    old = jax.tree.leaves(step.state)[0]
    for _ in range(3):
        step(batch)
    assert step.trace_count == 1
    assert old.is_deleted(), "the state must be donated to the step"


def test_grad_accumulation_matches_one_big_batch(data_cache):
    rng = np.random.default_rng(0)
    batch = {"image": jnp.asarray(rng.normal(size=(32, 32, 32, 3)), jnp.float32),
             "label": jnp.asarray(rng.integers(0, 10, 32), jnp.int32)}
    out = {}
    for g, unroll in ((1, None), (4, None), (4, 1), (4, 2)):
        cfg = _smoke(data_cache, grad_accum_steps=g)
        step = train.TrainStep(make_model(cfg.model_config(), seed=0), cfg, unroll=unroll)
        loss = step(batch)
        out[g, unroll] = (float(loss), jax.tree.leaves(step.state[0]))
    for key in ((4, None), (4, 1), (4, 2)):
        assert out[1, None][0] == pytest.approx(out[key][0], rel=1e-5), key
        for a, b in zip(out[1, None][1], out[key][1]):
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6)


def test_accumulation_loop_is_unrolled_on_the_cpu_and_rolled_for_the_memory_analysis(data_cache):
    # XLA's CPU backend runs a while loop's body many times slower (train.accum_unroll): the timed
    # step has no loop on the CPU; the memory analysis compiles the rolled loop accelerators run
    from experiments import memory
    cfg = _smoke(data_cache, model="cnn", width=8, grad_accum_steps=2)
    assert train.accum_unroll(2) == 2 and train.accum_unroll(2, backend="gpu") == 1
    batch = train.batch_specs(cfg)
    timed = train.TrainStep(make_model(cfg.model_config(), seed=0), cfg).compile(batch).as_text()
    rolled = memory.abstract_step(cfg).jitted.lower(memory.abstract_step(cfg).state, batch).compile().as_text()
    assert " while(" not in timed and " while(" in rolled


def test_bf16_computes_in_bf16_with_fp32_params(data_cache):
    cfg = _smoke(data_cache, precision="bf16", model="cnn", width=8)
    model = make_model(cfg.model_config())
    y = model(jnp.zeros((2, 32, 32, 3)))
    assert y.dtype == jnp.bfloat16
    from flax import nnx
    assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(nnx.state(model, nnx.Param)))
    r = train.run(cfg).iloc[0]
    assert r.status == "ok" and np.isfinite(r.final_loss)


def test_transformer_on_text_with_workers(data_cache):
    r = train.run(_smoke(data_cache, model="transformer", seq_len=32, num_workers=1, grad_accum_steps=2)).iloc[0]
    assert r.workload == "text" and r.params > r.non_embedding_params > 0
    assert r.final_loss < r.first_loss


def test_worker_cpu_of_a_window_too_short_for_the_kernels_ticks_is_nan(data_cache, monkeypatch):
    # the workers' CPU comes in 10 ms ticks: a window under MachineWindow.MIN_S reads as unresolved
    # (NaN), never as a worker that used no CPU (the finite case: test_worker_cpu_holds_the_stamped_stages_and_more)
    monkeypatch.setattr(train.MachineWindow, "MIN_S", 1e6)
    r = train.run(_smoke(data_cache, num_workers=1)).iloc[0]
    assert r.status == "ok" and r.num_workers == 1 and np.isnan(r.worker_cpu_s_per_sample)
    assert np.isnan(r.worker_thread_cpu_s_per_sample)
    assert np.isnan(r.steal_frac) and np.isnan(r.foreign_cpu_cores)


def test_nan_loss_names_the_step(data_cache):
    with pytest.raises(train.NonFiniteLoss, match=r"at step \d+"):
        train.run(_smoke(data_cache, learning_rate=1e30, min_steps=20))


def test_corrupt_dataset_fails_fast_naming_the_file(tmp_path):
    cfg = dataclasses.replace(train.smoke(), cache_dir=str(tmp_path), source="memmap")
    from experiments.loader import dataset_path
    p = dataset_path(cfg.loader_config())
    with open(p, "r+b") as f:
        f.seek(-100, 2)
        f.write(b"\xff" * 10)
    from experiments.data import DatasetError
    with pytest.raises(DatasetError) as e:
        train.run(cfg)
    assert str(p) in str(e.value)


_WORKER_DEATH = r"""
import dataclasses, sys
from experiments import train
cfg = dataclasses.replace(train.smoke(), cache_dir=sys.argv[1], num_workers=2, min_steps=100000,
                          augment_cost=3, feed=sys.argv[2], data_timeout_s=60)
train.run(cfg)
"""


@pytest.mark.parametrize("feed", ["none", "double_buffer"])
def test_dead_worker_fails_fast_without_orphans(data_cache, feed, shm_guard):
    proc = subprocess.Popen([sys.executable, "-c", _WORKER_DEATH, data_cache, feed], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        me = psutil.Process(proc.pid)
        deadline = time.time() + 90
        workers = []
        while time.time() < deadline and len(workers) < 2:
            workers = [c for c in me.children() if "resource_tracker" not in " ".join(c.cmdline())]
            time.sleep(0.2)
        assert len(workers) >= 2, "loader workers never started"
        time.sleep(3)  # let the run reach its steady loop
        all_before = [me] + me.children(recursive=True)
        workers[0].send_signal(signal.SIGKILL)
        t0 = time.time()
        out, err = proc.communicate(timeout=60)
        elapsed = time.time() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0
    assert "LoaderFailed" in err and "worker" in err, err[-2000:]
    assert elapsed < 30, f"took {elapsed:.1f} s to notice the dead worker"
    time.sleep(1)
    alive = [p.pid for p in running(all_before)]
    assert not alive, f"orphaned processes: {alive}"


# ------------------------------------------------------------------ time-based windows and the bound

class _FakeSteps:
    """A step function whose step times follow ``times`` (then the last one), advancing no clock."""

    def __init__(self, times):
        self.times = list(times)
        self.calls = 0

    def __call__(self, i):
        t = self.times[min(self.calls, len(self.times) - 1)]
        self.calls += 1
        return {"step": i, "step_time_s": t}


def test_window_measures_until_both_min_steps_and_min_measure_s():
    # 10 ms steps: 5 steps are not 0.2 s, so the window runs to 20 steps
    w = train.measure_window(_FakeSteps([0.01]), _smoke("x", min_steps=5, min_measure_s=0.2, warmup_steps=1,
                                                          warmup_time_s=0.01))
    assert w.measured_steps == 20 and w.measured_s == pytest.approx(0.2)
    # 100 ms steps: 0.2 s is reached after 2 steps, but min_steps asks for 5
    w = train.measure_window(_FakeSteps([0.1]), _smoke("x", min_steps=5, min_measure_s=0.2, warmup_steps=1,
                                                         warmup_time_s=0.01))
    assert w.measured_steps == 5
    assert [r["warmup"] for r in w.records].count(False) == w.measured_steps
    # a window of its own (the device-resident bound's resident_min_measure_s): 10 ms steps to 0.05 s
    w = train.measure_window(_FakeSteps([0.01]), _smoke("x", min_steps=2, min_measure_s=0.2, warmup_steps=1,
                                                          warmup_time_s=0.01), min_measure_s=0.05)
    assert w.measured_steps == 5 and w.measured_s == pytest.approx(0.05)


def test_warmup_runs_until_steady_then_stops():
    slow_start = [0.05, 0.04, 0.03, 0.02, 0.015] + [0.01] * 50
    w = train.measure_window(_FakeSteps(slow_start), _smoke("x", warmup_steps=2, max_warmup_s=10.0))
    # steady once the last 5 step times and the 5 before them have medians within 10%
    # the first time the median of the last 5 steps is within 10% of the 5 before: after 13 steps the
    # windows are [0.02, 0.015, 0.01, 0.01, 0.01] and [0.01] * 5, both with median 0.01 (after 12 the
    # earlier window's median is 0.015)
    assert w.steady and w.warmup_steps == 13
    assert all(r["warmup"] for r in w.records[:w.warmup_steps])


def test_warmup_that_never_settles_stops_at_max_warmup_s_and_says_so():
    alternating = [0.01, 0.05] * 500  # medians of successive windows keep jumping
    jumpy = [0.001 * (1.2 ** i) for i in range(1000)]  # every window's median 2.5x the one before
    w = train.measure_window(_FakeSteps(jumpy), _smoke("x", warmup_steps=1, max_warmup_s=0.5))
    assert not w.steady and 0.5 <= w.warmup_s < 0.5 + max(jumpy)
    w2 = train.measure_window(_FakeSteps(alternating), _smoke("x", warmup_steps=1, warmup_time_s=0.3))
    assert 0.3 <= w2.warmup_s < 0.36  # a stated warm-up time is used as given


class _FakeFed(_FakeSteps):
    """``_FakeSteps`` whose steps also wait ``waits[i]`` for data (inside their step time)."""

    def __init__(self, times, waits):
        super().__init__(times)
        self.waits = list(waits)

    def __call__(self, i):
        rec = super().__call__(i)
        wait = self.waits[i] if i < len(self.waits) else 0.0
        return {**rec, "data_wait_s": wait, "step_time_s": rec["step_time_s"] + wait}


def test_the_loaders_startup_waits_are_not_warmup():
    # a second worker's first batch takes 1.5 s (step 1); 50 ms steps that never settle
    times = [0.05, 0.07] * 100
    waits = [0.0, 1.5]
    cfg = _smoke("x", warmup_steps=3, max_warmup_s=1.0)
    # counted as warm-up, the wait ends it at the third step, with the workers just started
    w = train.measure_window(_FakeFed(times, waits), cfg)
    assert w.warmup_steps == 3 and not w.steady
    # not counted (the first num_workers + 1 steps of a run with two workers), the steps warm up for
    # 1 s of their own: 17 steps of 50-70 ms
    w = train.measure_window(_FakeFed(times, waits), cfg, startup_steps=3)
    assert w.warmup_steps == 17 and 1.0 <= w.warmup_s - 1.5 < 1.07
    # a wait after the startup steps (the loader falling behind) is warm-up time as before
    w = train.measure_window(_FakeFed(times, [0.0, 0.0, 0.0, 0.0, 1.5]), cfg, startup_steps=3)
    assert w.warmup_steps == 5
    # and a stated warm-up time likewise leaves the startup waits out
    w = train.measure_window(_FakeFed(times, waits), _smoke("x", warmup_steps=1, warmup_time_s=0.3), startup_steps=3)
    assert 0.3 <= w.warmup_s - 1.5 < 0.37


class _FakeAged(_FakeSteps):
    """``_FakeSteps`` whose batches are ``ages[i]`` seconds old when the step takes them."""

    def __init__(self, times, ages):
        super().__init__(times)
        self.ages = list(ages)

    def __call__(self, i):
        rec = super().__call__(i)
        return {**rec, "batch_age_s": self.ages[min(i, len(self.ages) - 1)]}


def test_filled_when_no_workers_batches_grow_older():
    w, step = train.FILL_WINDOW, [0.1] * 40
    assert train._filled([float("nan")] * 20, step)  # no ages (a probe's steps): nothing to fill
    assert not train._filled([0.05 * i for i in range(2 * w)], step)  # 50 ms older each step
    # 4 ms older each step: the last five's mean 20 ms above the five before, within 25% of a step
    assert train._filled([1.0 + 0.004 * i for i in range(2 * w)], step)
    assert not train._filled([0.5] * (2 * w - 1), step)  # too few steps to tell
    # two workers in turn, one's batches 1.3 s old and the other's 0.2 s: full, though consecutive
    # ages jump
    assert train._filled([1.3, 0.2] * (2 * w), step, num_workers=2)
    # the same with the second worker's batches still growing older: not full. Taken as one series,
    # the first worker's drop from 1.6 to 1.0 s hides the growth (the mean of both falls), and only
    # the drain check (below) still holds the warm-up back
    growing = [x for i in range(2 * w) for x in ((1.6 if i < w else 1.0), 0.2 + 0.05 * i)]
    assert not train._filled(growing, step, num_workers=2)
    tol = train.FILL_TOL * 0.1
    one = growing[-2 * w:]
    assert np.mean(one[w:]) - np.mean(one[:w]) <= tol  # no growth seen in one series
    assert not train._filled(growing, step, num_workers=1)


def test_not_filled_while_the_batches_the_step_waits_on_drain():
    w, step = train.FILL_WINDOW, [0.01] * 40
    # one worker's batches 10 ms younger each step (a backlog made while the step compiled): draining
    assert not train._filled([0.15 - 0.01 * i for i in range(2 * w)], step)
    # 0.4 ms younger each step: the last five's mean 2 ms below the five before, within 25% of a step
    assert train._filled([0.05 - 0.0004 * i for i in range(2 * w)], step)
    # the same ages, drained and level at 8 ms
    assert train._filled([max(0.008, 0.15 - 0.01 * i) for i in range(30)], step)
    # two workers: the first's lead shrinking, the second's batches (which the step waits on) level
    # at 5 ms: filled, the step does not eat the first's lead faster than the second makes batches
    lead = [x for i in range(2 * w) for x in (0.8 - 0.02 * i, 0.005)]
    assert train._filled(lead, step, num_workers=2)
    # both workers' backlogs shrinking: the youngest too, so still draining
    both = [x for i in range(2 * w) for x in (0.8 - 0.02 * i, 0.2 - 0.01 * i)]
    assert not train._filled(both, step, num_workers=2)


def test_warmup_waits_for_the_buffers_to_drain():
    # 10 ms steps, steady from the start; the batches' age falls 10 ms a step from 150 ms to 8 ms
    ages = [float("nan")] + [max(0.008, 0.15 - 0.01 * i) for i in range(1, 400)]
    w = train.measure_window(_FakeAged([0.01], ages), _smoke("x", warmup_steps=2, max_warmup_s=0.05))
    # steady after 10 steps, but the ages fall until step 15 (8 ms from there on). With 24 steps the
    # last five (19-23, 8 ms) are within 2.5 ms (25% of a step) of the five before (14-18: 8.4 ms in
    # the mean); with 23, steps 13-17 average 10.8 ms, 2.8 ms above
    assert w.steady and w.filled and w.warmup_steps == 24


def test_warmup_waits_for_the_buffers_to_fill_up_to_its_limit():
    # 100 ms steps, steady from the start; the batches' age grows 50 ms a step for 30 steps, then stays
    ages = [float("nan")] + [0.05 * min(i, 30) for i in range(1, 400)]
    cfg = _smoke("x", warmup_steps=2, max_warmup_s=1.0)
    w = train.measure_window(_FakeAged([0.1], ages), cfg)
    # steady after 10 steps; filled once the five ages before the last five are within 25 ms of them
    # in the mean: the first time is at 39 steps (ages of steps 29-33 against 34-38; at 38 steps the
    # earlier five's mean is 30 ms below)
    assert w.steady and w.filled and w.warmup_steps == 39
    # ages that keep growing: warm-up stops at FILL_MAX_S and says so
    w = train.measure_window(_FakeAged([0.1], [0.05 * i for i in range(400)]), cfg)
    assert not w.filled and train.FILL_MAX_S <= w.warmup_s < train.FILL_MAX_S + 0.11
    # a stated warm-up time is used as given, filled or not
    w = train.measure_window(_FakeAged([0.1], [0.05 * i for i in range(400)]), _smoke("x", warmup_steps=1, warmup_time_s=0.5))
    assert not w.filled and 0.5 <= w.warmup_s < 0.61
    # steps without ages (the device-resident bound, the probes) warm up as before
    w = train.measure_window(_FakeSteps([0.1]), cfg)
    assert w.filled and w.warmup_steps == 10


def test_ratio_interval_covers_the_ratio_and_separates_clear_differences():
    rng = np.random.default_rng(1)
    fed = rng.normal(0.010, 0.001, 200).clip(0.005)
    bound = rng.normal(0.008, 0.0008, 200).clip(0.004)
    lo, hi = train.ratio_interval(fed, bound)
    point = (1 / fed.mean()) / (1 / bound.mean())
    assert lo < point < hi and hi < 1.0, (lo, point, hi)
    lo2, hi2 = train.ratio_interval(bound, fed)  # the fed loop faster than its bound: lies above 1
    assert lo2 > 1.0


def test_bound_is_measured_with_the_loader_stopped(data_cache, monkeypatch):
    import threading
    calls = []
    real = train.measure_window

    def spy(step_fn, cfg, on_measure_start=None, **kw):
        me = psutil.Process()
        workers = [c for c in me.children(recursive=True) if "resource_tracker" not in " ".join(c.cmdline())]
        threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
        calls.append((len(workers), threads))
        return real(step_fn, cfg, on_measure_start, **kw)

    def data_threads(names):  # all but Grain's idle process-wide helpers (shared-memory unlink pool, stats
        # loops), tqdm's monitor (left by an earlier progress bar) and the run's own memory sampler
        return [n for n in names if not n.endswith(("(_reporting_loop)", "(worker)", "(_handle_workers)",
                                                    "(_handle_tasks)", "(_handle_results)"))
                and n not in ("tqdm_monitor", "memsim-host-sampler")]

    monkeypatch.setattr(train, "measure_window", spy)
    res = train.run_detailed(_smoke(data_cache, num_workers=1, feed="double_buffer", prefetch_buffer_size=2))
    r = res.row.iloc[0]
    assert len(calls) == 2
    assert calls[0][0] >= 1, "the fed loop should run with its worker process"
    assert any(n.startswith("memsim-double-buffer") for n in calls[0][1])
    assert any(n.startswith("grain-thread-prefetch") for n in calls[0][1])
    assert calls[1][0] == 0 and data_threads(calls[1][1]) == [], f"loader work alive during the bound: {calls[1]}"
    assert bool(r.resident_loader_stopped)
    # the main process's page faults per step, counted in both windows
    assert r.minor_faults_per_step >= 0 and r.resident_minor_faults_per_step >= 0
    assert res.steps.minor_faults.notna().all() and (res.steps.minor_faults >= 0).all()
    phases = res.steps.groupby(["phase", "warmup"]).size()
    assert phases[("resident", False)] == r.resident_steps_measured >= 6
    assert phases[("fed", False)] == r.steps_measured >= 6
    assert r.feed_efficiency_lo <= r.feed_efficiency <= r.feed_efficiency_hi
    assert bool(r.bound_exceeded) == bool(r.feed_efficiency_lo > 1)


def test_time_window_is_honoured_in_a_real_run(data_cache):
    r = train.run(_smoke(data_cache, min_steps=2, min_measure_s=0.4)).iloc[0]
    assert r.measure_s >= 0.4 and r.resident_measure_s >= 0.4
    assert r.steps_measured >= 2 and r.resident_steps_measured >= 2
    # the bound's window of its own: the fed loop's 0.4 s, the bound's 0.15 s, and the row says which
    r = train.run(_smoke(data_cache, min_steps=2, min_measure_s=0.4, resident_min_measure_s=0.15)).iloc[0]
    assert r.measure_s >= 0.4 and 0.15 <= r.resident_measure_s < 0.4 and r.resident_min_measure_s == 0.15
    with pytest.raises(ConfigError, match="resident_min_measure_s"):
        _smoke(data_cache, resident_min_measure_s=-1.0)


# ------------------------------------------------------------------ the machine's company in a window

def test_machine_window_counts_steal_and_other_processes_not_the_runs_own(monkeypatch):
    """Over a window of 1 s on 2 cores (2 CPU-seconds): 0.1 s stolen, 0.6 s idle, 1.3 s busy of which
    this process tree used 0.8 s → 5% steal and 0.5 cores kept busy by others."""
    from collections import namedtuple
    T = namedtuple("scputimes", "user nice system idle iowait irq softirq steal guest guest_nice")
    snaps = iter([T(100.0, 0, 20.0, 500.0, 0, 0, 0, 5.0, 0, 0), T(101.2, 0, 20.1, 500.6, 0, 0, 0, 5.1, 0, 0)])
    own = iter([3.0, 3.8])
    clock = iter([10.0, 11.0])
    monkeypatch.setattr(psutil, "cpu_times", lambda: next(snaps))
    monkeypatch.setattr(train.time, "perf_counter", lambda: next(clock))
    written = iter([1000.0, 1000.0 + 2560])  # nr_written, pages of 4 KiB
    monkeypatch.setattr(train, "_pages_written", lambda: next(written))
    monkeypatch.setattr(train, "PAGE_BYTES", 4096)
    got = train.MachineWindow(lambda: next(own)).start().stop()
    assert got["steal_frac"] == pytest.approx(0.05)
    assert got["foreign_cpu_cores"] == pytest.approx(0.5)
    assert got["written_mib"] == pytest.approx(10.0)
    monkeypatch.setattr(train, "_pages_written", lambda: 1000.0)
    # a window shorter than the counters' tick: the same snapshot twice resolves neither, not 0
    same = T(100.0, 0, 20.0, 500.0, 0, 0, 0, 5.0, 0, 0)
    monkeypatch.setattr(psutil, "cpu_times", lambda: same)
    monkeypatch.setattr(train.time, "perf_counter", iter([20.0, 20.004]).__next__)
    short = train.MachineWindow(lambda: 3.0).start().stop()
    assert np.isnan(short["steal_frac"]) and np.isnan(short["foreign_cpu_cores"])
    # nor does a window with one tick in 4 ms (it would read as 2.5 cores of company on any machine)
    snaps = iter([same, T(100.0, 0, 20.01, 500.0, 0, 0, 0, 5.0, 0, 0)])
    monkeypatch.setattr(psutil, "cpu_times", lambda: next(snaps))
    monkeypatch.setattr(train.time, "perf_counter", iter([30.0, 30.004]).__next__)
    one_tick = train.MachineWindow(lambda: 3.0).start().stop()
    assert np.isnan(one_tick["steal_frac"]) and np.isnan(one_tick["foreign_cpu_cores"])


def test_machine_window_counts_the_kernels_writeback(tmp_path):
    """64 MiB written and synced inside a window are written back inside it; a window of nothing
    written after it counts (almost) none."""
    if not os.path.exists("/proc/vmstat"):
        pytest.skip("no /proc/vmstat (not Linux)")
    os.sync()
    w = train.MachineWindow(lambda: 0.0).start()
    (tmp_path / "blob").write_bytes(os.urandom(64 * 2**20))
    os.sync()
    assert w.stop()["written_mib"] >= 60
    after = train.MachineWindow(lambda: 0.0).start()
    time.sleep(0.2)
    assert after.stop()["written_mib"] < 32


def test_machine_window_sees_a_process_that_is_not_the_runs():
    # a spinning process reparented away from this one (the shell that started it exits at once)
    started = subprocess.run(["sh", "-c", "timeout 3 sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True)
    spinner = int(started.stdout)  # timeout's pid: it passes a SIGTERM on to the loop
    try:
        time.sleep(0.3)
        me = psutil.Process()
        w = train.MachineWindow(lambda: sum(p.cpu_times().user + p.cpu_times().system
                                            for p in [me] + me.children(recursive=True))).start()
        time.sleep(1.0)
        got = w.stop()
    finally:
        try:
            os.kill(spinner, signal.SIGTERM)
        except ProcessLookupError:
            pass
    assert got["foreign_cpu_cores"] > 0.5, got
    assert 0.0 <= got["steal_frac"] < 1.0


def _hold_memory(mib, ready, release):
    block = np.ones(mib << 18, np.float32)  # mib MiB, touched, then freed before anyone reads
    del block
    ready.set()
    release.wait(30)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="the kernel's peak RSS marks are Linux's /proc")
def test_host_sampler_peak_counts_memory_freed_between_reads_in_this_process_and_a_child():
    """The peak is the kernel's high-water mark, not a read of the current RSS: 300 MiB this process
    allocated and freed between two reads, and 200 MiB a child allocated and freed before any read
    of it, are in it (reads every 60 s: only start and stop read). A sampler of the current RSS
    would have seen neither."""
    import multiprocessing as mp
    s = train.HostSampler(period_s=60).start()
    if not s._self_marked:
        s.stop()
        pytest.skip("this kernel or sandbox does not let a process reset its peak RSS (/proc/self/clear_refs)")
    base = s._peaks[os.getpid()]
    block = np.ones(300 << 18, np.float32)
    del block
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold_memory, args=(200, ready, release))
    child.start()
    try:
        assert ready.wait(60)
        s.stop()  # the child is alive at the last read, as the loader's workers are
    finally:
        release.set()
        child.join(30)
    own, kid = s._peaks[os.getpid()], s._peaks[child.pid]
    assert own >= base + (300 << 20) * 0.95
    assert kid >= (200 << 20) * 0.95
    assert psutil.Process().memory_info().rss < base + (300 << 20) * 0.5  # the block is gone now
