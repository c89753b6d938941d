"""The feed benchmark's core modes: pinning only on a CPU-only machine, none with an accelerator."""

import dataclasses
import os
import sys

import pytest

from benchmarks import feed

pytestmark = pytest.mark.latest  # also run on the newest versions (make test-latest)


@pytest.mark.parametrize("platform, requested, cores, mode", [
    ("cpu", None, 2, "one"), ("cpu", None, 16, "one"), ("cpu", None, 1, "shared"),
    ("cpu", "shared", 2, "shared"), ("cpu", "one", 4, "one"),
    ("gpu", None, 16, "accelerator"), ("tpu", None, 2, "accelerator"),
])
def test_mode_follows_the_platform(platform, requested, cores, mode):
    assert feed.choose_mode(platform, requested, cores) == mode


@pytest.mark.parametrize("requested", ["one", "shared"])
def test_core_modes_are_refused_on_an_accelerator(requested):
    with pytest.raises(SystemExit, match=f"--device-cores {requested}: the step runs on the gpu"):
        feed.choose_mode("gpu", requested, 8)


def test_platform_is_found_in_a_child_process():
    import jax
    assert feed.default_platform() == jax.default_backend()


def test_baselines_differ_from_the_feeds_only_where_they_say():
    cfg = feed.bench_config()
    runs = feed.variants(cfg)
    assert list(runs) == [*feed.FEEDS, "grain_prefetch"]
    assert all(r.prefetch_buffer_size == 0 and r.read_buffer_size == 0 for k, r in runs.items() if k != "grain_prefetch")
    g = runs["grain_prefetch"]
    assert g.feed == "none" and g.prefetch_buffer_size == feed.GRAIN_PREFETCH_BUFFER > 0
    assert dataclasses.replace(g, prefetch_buffer_size=0) == runs["none"]


def test_accelerator_mode_pins_nothing_and_says_so(monkeypatch, capsys):
    # the accelerator branch run for real on this machine, with the step faked (no training here)
    import pandas as pd
    from experiments import train

    monkeypatch.setattr(feed, "choose_mode", lambda platform, requested, n: "accelerator")
    monkeypatch.setattr(feed, "loader_alone_batches_per_s", lambda cfg: 100.0)
    monkeypatch.setattr(train, "run", lambda cfg: pd.DataFrame([{
        "samples_per_s": 60.0 if cfg.prefetch_buffer_size else
                         {"none": 50.0, "double_buffer": 90.0, "grain_device_put": 80.0}[cfg.feed],
        "device_resident_samples_per_s": 100.0, "device_resident_step_median_s": 0.02}]))
    before = os.sched_getaffinity(0)
    out = feed.main(["--json", "--repeats", "1"])
    assert os.sched_getaffinity(0) == before
    assert out["device_cores_mode"] == "accelerator" and out["pinned"] is False
    assert out["device_cores"] == out["host_cores"] == sorted(before)
    assert out["double_buffer/none"] == pytest.approx(1.8)
    assert out["grain_prefetch_samples_per_s"] == 60.0 and out["double_buffer/grain_prefetch"] == pytest.approx(1.5)
    assert "no core pinning (mode accelerator)" in capsys.readouterr().out
    assert "jax" in sys.modules
