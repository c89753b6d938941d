import dataclasses
import os
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import psutil
import pytest

from experiments import train
from experiments.models import make_model

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _smoke(data_cache, **kw):
    return dataclasses.replace(train.smoke(), cache_dir=data_cache, **kw)


@pytest.mark.latest
@pytest.mark.parametrize("feed", ["none", "double_buffer", "grain_device_put"])
def test_run_row_is_complete_and_consistent(data_cache, feed, shm_guard):
    res = train.run_detailed(_smoke(data_cache, feed=feed))
    r = res.row.iloc[0]
    assert r.status == "ok" and r.feed == feed and r.trace_count == 1
    assert r.samples_per_s > 0 and r.device_resident_samples_per_s > 0
    assert 0 <= r.data_wait_frac <= 1
    np.testing.assert_allclose(r.feed_efficiency, r.samples_per_s / r.device_resident_samples_per_s)
    steps = res.steps[~res.steps.warmup]
    np.testing.assert_allclose(r.samples_per_s, r.batch_size * len(steps) / steps.step_time_s.sum())
    assert (steps.data_wait_s <= steps.step_time_s).all()
    for col in ("platform", "device_kind", "jax_version", "flax_version", "optax_version", "grain_version",
                "cpu_count", "git_commit", "seed", "compile_s", "peak_rss_bytes", "xla_flops_per_step"):
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
    for g in (1, 4):
        cfg = _smoke(data_cache, grad_accum_steps=g)
        step = train.TrainStep(make_model(cfg.model_config(), seed=0), cfg)
        loss = step(batch)
        out[g] = (float(loss), jax.tree.leaves(step.state[0]))
    assert out[1][0] == pytest.approx(out[4][0], rel=1e-5)
    for a, b in zip(out[1][1], out[4][1]):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6)


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


def test_nan_loss_names_the_step(data_cache):
    with pytest.raises(train.NonFiniteLoss, match=r"at step \d+"):
        train.run(_smoke(data_cache, learning_rate=1e30, steps=20))


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
cfg = dataclasses.replace(train.smoke(), cache_dir=sys.argv[1], num_workers=2, steps=100000,
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
    alive = [p.pid for p in all_before if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"orphaned processes: {alive}"
