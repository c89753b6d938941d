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
