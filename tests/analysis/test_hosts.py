"""Calibration of a host from single-process rows, and the prediction it gives."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.hosts import compare, host_config, predict_stragglers
from memsim.knobs import ConfigError
from memsim.pipeline import PipelineConfig, analytic_bounds

ROW = {"status": "ok", "num_workers": 0, "per_worker_buffer_size": 2, "prefetch_buffer_size": 2,
       "feed": "double_buffer", "cpu_buffer_size": 4, "device_buffer_size": 2, "batch_size": 16,
       "grad_accum_steps": 1, "precision": "fp32", "image_size": 16, "channels": 3,
       "decode_s_per_sample": 0.0, "augment_s_per_sample": 2e-4, "compute_time_median_s": 2e-3,
       "device_resident_step_median_s": 1.5e-3, "step_time_median_s": 3.4e-3, "step_time_p90_s": 4e-3}


def steps_for(rng, n=40, batch=16, aug=2e-4, cv=0.2, compute=2e-3):
    t = aug * batch * rng.lognormal(-0.5 * np.log1p(cv**2), np.sqrt(np.log1p(cv**2)), n)
    return pd.DataFrame({"phase": "fed", "warmup": [True] * 3 + [False] * (n - 3), "t_decode": 0.0,
                         "t_augment": t, "compute_s": compute * rng.uniform(0.9, 1.1, n)})


def test_synthetic_row_gives_the_measured_service_times():
    rng = np.random.default_rng(0)
    st = steps_for(rng, n=400, cv=0.2)
    cfg = host_config(pd.DataFrame([ROW, {**ROW, "augment_s_per_sample": 4e-4}]), st)
    assert cfg.transform_s == pytest.approx(3e-4)         # median of the two rows
    assert cfg.compute_s == pytest.approx(2e-3)           # the fed loop's step, not the resident one
    assert cfg.batch_size == 16 and cfg.num_workers == 0 and cfg.feed == "double_buffer"
    assert cfg.device_sample_bytes == 16 * 16 * 3 * 4
    # per-batch cv 0.2 over 16 samples → per-sample cv 0.8 (within sampling error of 397 batches)
    assert cfg.transform_dist.kind == "lognormal" and cfg.transform_dist.cv == pytest.approx(0.8, rel=0.15)
    assert cfg.compute_dist.kind == "empirical" and len(cfg.compute_dist.samples) == 397  # warm-up dropped
    # a smaller CPU share stretches the CPU times only
    half = host_config(ROW, None, cpu_dilation=2.0)
    assert half.transform_s == pytest.approx(4e-4) and half.compute_s == pytest.approx(4e-3)
    assert half.device_sample_bytes == cfg.device_sample_bytes
    # without per-step times the step's spread comes from p90 / median
    sigma = math.log(4e-3 / 3.4e-3) / 1.2815515655446004
    assert half.compute_dist.cv == pytest.approx(math.sqrt(math.expm1(sigma**2)), rel=1e-3)


def test_prediction_from_nearly_deterministic_rows_is_the_slowest_hosts_bound():
    slow_row = {**ROW, "augment_s_per_sample": 8e-4}
    normal, slow = host_config(ROW), host_config(slow_row)
    normal = type(normal)(**{**normal.__dict__, "transform_dist": "lognormal:0.001", "compute_dist": "deterministic"})
    slow = type(slow)(**{**slow.__dict__, "transform_dist": "lognormal:0.001", "compute_dist": "deterministic"})
    p = predict_stragglers(normal, slow, 4, n_items=400)
    b = analytic_bounds([slow])["bottleneck_bound_samples_per_s"].iloc[0]
    assert p["predicted_samples_per_s"] == pytest.approx(4 * b, rel=2e-3)
    assert p["predicted_bottleneck"] == "transform"


def test_the_allreduce_is_paid_once_a_step():
    # deterministic, compute-bound: steps/s = 1 / (compute + all-reduce), on every host
    det = dict(transform_dist="deterministic", compute_dist="deterministic", batch_size=8, num_workers=1,
               record_bytes=0, device_sample_bytes=0, transfer_latency_s=0)
    host = PipelineConfig(transform_s=1e-5, compute_s=2e-3, **det)
    slow = PipelineConfig(transform_s=2e-5, compute_s=2e-3, **det)
    for n, ar in ((1, 0.0), (2, 3e-3), (4, 8e-3)):
        p = predict_stragglers(host, slow, n, allreduce_s=ar, n_items=300)
        assert p["predicted_steps_per_s"] == pytest.approx(1 / (2e-3 + ar), rel=1e-3)
        assert p["predicted_samples_per_s"] == pytest.approx(n * 8 / (2e-3 + ar), rel=1e-3)
    with pytest.raises(ConfigError, match="allreduce_s=-0.001"):
        predict_stragglers(host, slow, 2, allreduce_s=-1e-3)


def test_bad_rows_are_named():
    with pytest.raises(ConfigError, match="lack column 'augment_s_per_sample'"):
        host_config({k: v for k, v in ROW.items() if k != "augment_s_per_sample"})
    with pytest.raises(ConfigError, match="failed run"):
        host_config({**ROW, "status": "failed"})
    with pytest.raises(ConfigError, match="differ in batch_size"):
        host_config(pd.DataFrame([ROW, {**ROW, "batch_size": 32}]))
    with pytest.raises(ConfigError, match="augment_s_per_sample=nan"):
        host_config({**ROW, "augment_s_per_sample": float("nan")})
    with pytest.raises(ConfigError, match="cpu_dilation=0"):
        host_config(ROW, cpu_dilation=0)
    with pytest.raises(ConfigError, match="needs a slowed host"):
        predict_stragglers(host_config(ROW), None, 2)
    with pytest.raises(ConfigError, match="lacks column 'samples_per_s'"):
        compare(pd.DataFrame({"num_processes": [1]}), pd.DataFrame({"num_processes": [1],
                                                                   "predicted_samples_per_s": [1.0]}))
