import os
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from experiments import feed as feed_lib
from experiments.loader import LoaderConfig, build_dataset

pytestmark = pytest.mark.latest  # also run on the newest versions (make test-latest)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("kind", ["none", "double_buffer", "grain_device_put"])
def test_feeds_deliver_device_batches_in_loader_order(data_cache, kind):
    cfg = LoaderConfig(num_samples=64, image_size=16, batch_size=8, cache_dir=data_cache)
    ref_it = iter(build_dataset(cfg))
    ref = [np.asarray(next(ref_it)["label"]) for _ in range(5)]
    ref_it.close()
    f = feed_lib.make_feed(kind, build_dataset(cfg), feed_lib.batch_sharding(), cpu_buffer_size=2,
                           device_buffer_size=2)
    try:
        for i in range(5):
            dev, times = next(f)
            assert isinstance(dev["label"], jax.Array)
            assert "t_augment" not in dev and times["t_augment"] > 0
            np.testing.assert_array_equal(np.asarray(dev["label"]), ref[i])
    finally:
        f.close()


def test_double_buffer_keeps_at_most_device_buffer_size_ahead(data_cache, monkeypatch):
    calls = []
    real_put = feed_lib.put
    monkeypatch.setattr(feed_lib, "put", lambda b, s: calls.append(1) or real_put(b, s))
    cfg = LoaderConfig(num_samples=64, image_size=16, batch_size=8, cache_dir=data_cache)
    for depth in (1, 3):
        calls.clear()
        f = feed_lib.make_feed("double_buffer", build_dataset(cfg), feed_lib.batch_sharding(),
                               device_buffer_size=depth)
        try:
            next(f)
            next(f)
            time.sleep(1.0)  # plenty of time for the producer to run ahead if it could
            assert len(calls) == 2 + depth, f"device_buffer_size={depth}: {len(calls)} batches placed"  # 2 taken + D ahead
        finally:
            f.close()


def test_bad_feed_kind():
    with pytest.raises(ValueError, match="feed='turbo'"):
        feed_lib.make_feed("turbo", None, None)


_MULTI = r"""
import dataclasses, sys
import jax, numpy as np

assert jax.local_device_count() == 4, jax.devices()
from experiments import feed as feed_lib, train
from experiments.loader import LoaderConfig, build_dataset
cfg = LoaderConfig(num_samples=64, image_size=16, batch_size=8, cache_dir=sys.argv[1])
for kind in ("none", "double_buffer", "grain_device_put"):
    f = feed_lib.make_feed(kind, build_dataset(cfg), feed_lib.batch_sharding())
    dev, _ = next(f)
    f.close()
    shards = dev["image"].addressable_shards
    assert len(shards) == 4 and {s.data.shape[0] for s in shards} == {2}, (kind, [s.data.shape for s in shards])
    assert len({s.device for s in shards}) == 4
for kind in ("double_buffer", "grain_device_put"):
    r = train.run(dataclasses.replace(train.smoke(), cache_dir=sys.argv[1], feed=kind, grad_accum_steps=2)).iloc[0]
    assert r.num_devices_used == 4 and r.trace_count == 1 and r.final_loss < r.first_loss, r
print("OK")
"""


def test_four_devices_shard_the_batch(data_cache):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    p = subprocess.run([sys.executable, "-c", _MULTI, data_cache], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and "OK" in p.stdout, p.stderr[-3000:]
