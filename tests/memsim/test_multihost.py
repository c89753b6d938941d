"""Many synchronous hosts: the slowest host sets the pace."""

from __future__ import annotations

import numpy as np
import pytest

from memsim.knobs import ConfigError
from memsim.multihost import many_hosts
from memsim.pipeline import PipelineConfig, sweep

# A loader near saturation with very variable per-batch times and little buffering.
VARIABLE = PipelineConfig(num_workers=2, per_worker_buffer_size=1, prefetch_buffer_size=0, device_buffer_size=1,
                          batch_size=8, transform_s=5e-4, transform_dist="lognormal:2.0", compute_s=0.004,
                          compute_dist="deterministic")


def test_one_host_equals_the_single_host_simulation():
    one = many_hosts(VARIABLE, hosts=[1], n_items=400, seed=4)
    single = sweep([VARIABLE], n_items=400, seed=4)
    assert one.samples_per_s[0] == pytest.approx(single.samples_per_s[0], rel=1e-6)
    assert one.data_wait_frac[0] == pytest.approx(single.data_wait_frac[0], rel=1e-5, abs=1e-7)
    assert one.efficiency[0] == 1.0


def test_throughput_loss_grows_with_hosts_under_variance():
    df = many_hosts(VARIABLE, hosts=(1, 4, 32, 256, 1024), n_items=400, seed=1)
    eff = df.efficiency.to_numpy()
    se = df.efficiency_stderr.to_numpy()
    assert np.all(np.diff(eff) <= 3 * np.hypot(se[1:], se[:-1]) + 1e-12)  # non-increasing within noise
    assert eff[-1] < eff[1] - 4 * np.hypot(se[-1], se[1])        # and it really falls
    assert eff[-1] < 0.9
    assert np.allclose(df.samples_per_s, df.samples_per_s_per_host * df.hosts)


def test_no_loss_without_variance():
    det = PipelineConfig(num_workers=2, transform_s=5e-4, transform_dist="deterministic", compute_s=0.004,
                         compute_dist="deterministic", batch_size=8, prefetch_buffer_size=0)
    df = many_hosts(det, hosts=(1, 64, 1024), n_items=400)
    np.testing.assert_allclose(df.efficiency, 1.0, atol=1e-6)


def test_bad_hosts():
    with pytest.raises(ConfigError, match="hosts contains 0"):
        many_hosts(VARIABLE, hosts=[1, 0])
    with pytest.raises(ConfigError, match="hosts=\\[\\]"):
        many_hosts(VARIABLE, hosts=[])
    with pytest.raises(ConfigError, match="config="):
        many_hosts({"num_workers": 1})


def test_efficiency_error_is_honest_across_seeds():
    runs = [many_hosts(VARIABLE, hosts=(1, 256), n_items=400, seed=s).iloc[1] for s in range(6)]
    eff = np.array([r.efficiency for r in runs])
    se = np.mean([r.efficiency_stderr for r in runs])
    assert 0.3 < se / eff.std(ddof=1) < 3.0


# ------------------------------------------------------------------------------ slowed hosts

from memsim.multihost import straggler_hosts  # noqa: E402
from memsim.pipeline import analytic_bounds  # noqa: E402

DET = dict(transform_dist="deterministic", compute_dist="deterministic", batch_size=8, compute_s=0.004,
           prefetch_buffer_size=1, device_buffer_size=1)


@pytest.mark.parametrize("slow_kw", [{"transform_s": 2e-3},                  # a heavier transform
                                     {"num_workers": 1, "transform_s": 1e-3}])  # fewer workers
def test_deterministic_slowed_host_sets_the_pace_exactly(slow_kw):
    base = PipelineConfig(num_workers=2, transform_s=1e-3, **DET)
    slow = PipelineConfig(**{**dict(num_workers=2, transform_s=1e-3, **DET), **slow_kw})
    df = straggler_hosts(base, slow, hosts=(1, 2, 4, 8), slow_count=1, n_items=400, dtype="float64")
    b = analytic_bounds([base, slow])["bottleneck_bound_steps_per_s"].to_numpy()
    assert b[1] < b[0]  # the slowed host really is slower
    # closed form: every N runs at the slowed host's own rate, min over hosts of the bottleneck bounds
    np.testing.assert_allclose(df.steps_per_s, b[1], rtol=1e-9)
    np.testing.assert_allclose(df.bound_steps_per_s, b[1], rtol=1e-12)
    np.testing.assert_allclose(df.samples_per_s, b[1] * 8 * df.hosts, rtol=1e-9)
    assert df.normal_steps_per_s[0] == pytest.approx(b[0], rel=1e-9)
    np.testing.assert_allclose(df.slowdown, 1 - b[1] / b[0], rtol=1e-9)
    assert (df.bottleneck == "transform").all()
    assert df.slow_hosts.tolist() == [1, 1, 1, 1]


def test_no_slowed_host_runs_at_the_normal_rate_and_two_run_at_the_slow_rate():
    base = PipelineConfig(num_workers=2, transform_s=1e-3, **DET)
    slow = PipelineConfig(num_workers=2, transform_s=3e-3, **DET)
    b = analytic_bounds([base, slow])["bottleneck_bound_steps_per_s"].to_numpy()
    none = straggler_hosts(base, slow, hosts=(4,), slow_count=0, n_items=400, dtype="float64")
    two = straggler_hosts(base, slow, hosts=(1, 4), slow_count=2, n_items=400, dtype="float64")
    assert none.steps_per_s[0] == pytest.approx(b[0], rel=1e-9)
    np.testing.assert_allclose(two.steps_per_s, b[1], rtol=1e-9)
    assert two.slow_hosts.tolist() == [1, 2]


def test_one_host_is_exactly_the_single_host_simulation():
    slow = PipelineConfig(**{**VARIABLE.__dict__, "transform_s": 1e-3})
    alone = straggler_hosts(VARIABLE, slow, hosts=(1,), slow_count=1, n_items=400, seed=3)
    single = sweep([slow], n_items=400, seed=3)
    assert alone.samples_per_s[0] == single.samples_per_s[0]
    assert alone.data_wait_frac[0] == single.data_wait_frac[0]
    assert alone.slow_steps_per_s[0] == single.steps_per_s[0]
    # with no slowed host every N is the identical-hosts simulation
    same = straggler_hosts(VARIABLE, slow, hosts=(1, 4), slow_count=0, n_items=400, seed=3)
    many = many_hosts(VARIABLE, hosts=(1, 4), n_items=400, seed=3)
    np.testing.assert_array_equal(same.samples_per_s, many.samples_per_s)
    assert same.normal_steps_per_s[0] == many.steps_per_s[0]


def test_variable_slowed_host_sets_the_pace():
    slow = PipelineConfig(**{**VARIABLE.__dict__, "transform_s": 2e-3})  # its workers: 8 ms a step, vs 4 ms compute
    df = straggler_hosts(VARIABLE, slow, hosts=(1, 2, 8), slow_count=1, n_items=400, seed=2)
    many = many_hosts(VARIABLE, hosts=(2, 8), n_items=400, seed=2)
    se = df.steps_per_s_stderr.to_numpy()
    # never faster than the slowed host alone (it must wait for the normal hosts too) ...
    assert np.all(df.steps_per_s.to_numpy()[1:] <= df.steps_per_s[0] + 3 * np.hypot(se[1:], se[0]))
    # ... well below the normal hosts' pace, and within 15% of the slowed host's own
    assert np.all(df.steps_per_s.to_numpy()[1:] < many.steps_per_s.to_numpy() * 0.8)
    assert np.all(df.steps_per_s.to_numpy()[1:] > df.slow_steps_per_s[0] * 0.85)
    assert np.all(df.steps_per_s <= df.bound_steps_per_s * (1 + 1e-6))


def test_bad_straggler_input():
    base = PipelineConfig(num_workers=2, transform_s=1e-3, **DET)
    with pytest.raises(ConfigError, match="slow batch_size=16"):
        straggler_hosts(base, PipelineConfig(**{**base.__dict__, "batch_size": 16}))
    with pytest.raises(ConfigError, match="slow transform_dist=lognormal:0.3"):
        straggler_hosts(base, PipelineConfig(**{**base.__dict__, "transform_dist": "lognormal:0.3"}))
    with pytest.raises(ConfigError, match="slow_count=-1"):
        straggler_hosts(base, base, slow_count=-1)
    with pytest.raises(ConfigError, match="slow="):
        straggler_hosts(base, {"transform_s": 1})
    with pytest.raises(ConfigError, match="cannot share a tile"):  # a big host buffer on one host only
        straggler_hosts(base, PipelineConfig(**{**base.__dict__, "prefetch_buffer_size": 64}), hosts=(2,))
