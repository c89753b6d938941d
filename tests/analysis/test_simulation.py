"""Figures of the simulator and the study's Simulation section."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pandas as pd
import pytest

from analysis import sim_plots
from analysis.simulation_section import simulation_section
from memsim.cache import cache_sweep
from memsim.multihost import many_hosts
from memsim.pipeline import PipelineConfig, simulate_trace, sweep

PNG = b"\x89PNG\r\n\x1a\n"


def is_png(path) -> bool:
    data = path.read_bytes()
    return data[:8] == PNG and len(data) > 2000


@pytest.fixture(scope="module")
def small_sweep():
    return sweep({"num_workers": [0, 1, 2], "prefetch_buffer_size": [0, 2], "feed": ["none", "double_buffer"]},
                 n_items=400)


def test_each_figure_renders(tmp_path, small_sweep):
    assert is_png(sim_plots.throughput_heatmap(small_sweep, tmp_path / "h.png"))
    tr = simulate_trace(PipelineConfig(num_workers=2, transform_s=3e-4), 60)
    assert is_png(sim_plots.timeline(tr, tmp_path / "t.png"))
    cdf = cache_sweep(100, 1.0, [0, 25, 50, 100], epochs=2, window=10)
    assert is_png(sim_plots.hit_rate_plot(cdf, tmp_path / "c.png"))
    hosts = many_hosts(PipelineConfig(), hosts=(1, 4), n_items=400)
    assert is_png(sim_plots.many_hosts_plot({"a": hosts, "b": hosts}, tmp_path / "m.png"))


def test_missing_columns_are_named(tmp_path, small_sweep):
    with pytest.raises(KeyError, match="prefetch_buffer_size"):
        sim_plots.throughput_heatmap(small_sweep.drop(columns="prefetch_buffer_size"), tmp_path / "x.png")
    with pytest.raises(KeyError, match="compute_start"):
        sim_plots.timeline(pd.DataFrame({"item": [0]}), tmp_path / "x.png")
    with pytest.raises(ValueError, match="no rows with epoch >= 2"):
        sim_plots.hit_rate_plot(cache_sweep(10, 1.0, [5], epochs=1), tmp_path / "x.png")
    with pytest.raises(TypeError, match="DataFrame"):
        sim_plots.timeline([1, 2], tmp_path / "x.png")


def measured_rows() -> pd.DataFrame:
    rows = []
    for i, (w, pf, feed) in enumerate(itertools.product([0, 2], [0, 2], ["none", "double_buffer"])):
        rows.append(dict(num_workers=w, prefetch_buffer_size=pf, feed=feed, device_buffer_size=2, batch_size=32,
                         cpu_buffer_size=4, per_worker_buffer_size=2, grad_accum_steps=1, precision="fp32",
                         samples_per_s=3000.0 + 100 * i, data_wait_frac=0.1, status="ok",
                         decode_s_per_sample=0.0, augment_s_per_sample=6e-5,
                         device_resident_step_median_s=0.008, image_size=32, channels=3, num_samples=512))
    rows.append(dict(rows[0], status="failed", samples_per_s=np.nan))
    return pd.DataFrame(rows)


def _linked_files(md: str) -> list[str]:
    return re.findall(r"\]\(([^)]+)\)", md)


def test_section_from_measured_rows(tmp_path):
    md = simulation_section(measured_rows(), tmp_path)
    assert md.startswith("## Simulation")
    links = _linked_files(md)
    assert len(links) == 4 and all(is_png(tmp_path / f) for f in links)
    assert "`num_workers` ∈ {0, 2}" in md and "augment_s_per_sample" in md
    assert "Measured configurations, simulated" in md
    sim = pd.read_csv(tmp_path / "simulated_sweep.csv")
    assert len(sim) == 8 and set(sim.num_workers) == {0, 2}
    assert sim.transform_s.iloc[0] == pytest.approx(6e-5)


def test_section_without_measurements_says_it_uses_defaults(tmp_path):
    md = simulation_section(pd.DataFrame(), tmp_path)
    assert md.startswith("## Simulation")
    assert "default grid (no measured rows)" in md and "documented defaults" in md
    assert all(is_png(tmp_path / f) for f in _linked_files(md))
    with pytest.raises(TypeError, match="DataFrame"):
        simulation_section([1, 2], tmp_path)


def test_section_survives_odd_measured_values(tmp_path):
    m = measured_rows()
    m.loc[0, "feed"] = "pinned_prefetch"        # a feed the model does not know
    m.loc[1, "num_workers"] = np.nan            # a missing knob value
    m = m.drop(columns=["device_resident_step_median_s", "image_size"])
    md = simulation_section(m, tmp_path)
    assert "'pinned_prefetch'" in md and "left out" in md
    assert "1 measured row(s)" in md and "Measured configurations, simulated" in md
    assert all(is_png(tmp_path / f) for f in _linked_files(md))
