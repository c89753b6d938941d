"""Figures of the simulator and the study's Simulation section."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pandas as pd
import pytest

from analysis import simulation
from analysis.report import StudyResults
from analysis.simulation import (hit_rate_figure, heatmap_figure, many_hosts_figure, simulation_section,
                                 timeline_figure)
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


def test_heatmap_has_a_panel_per_feed_and_the_knob_grid(small_sweep):
    fig = heatmap_figure(small_sweep)
    *panels, bar = fig.axes
    assert [ax.get_title() for ax in panels] == ["feed=double_buffer", "feed=none"]
    assert all((ax.get_xlabel(), ax.get_ylabel()) == ("num_workers", "prefetch_buffer_size") for ax in panels)
    assert bar.get_ylabel() == "samples_per_s"  # the colour bar names the value shown
    image = panels[1].images[0].get_array()
    assert image.shape == (2, 3)  # prefetch levels × worker levels
    none = small_sweep[small_sweep.feed == "none"]
    assert image[1, 2] == pytest.approx(float(none.query("num_workers == 2 and prefetch_buffer_size == 2")
                                              .samples_per_s.median()))


def test_timeline_marks_each_stage():
    tr = simulate_trace(PipelineConfig(num_workers=2, transform_s=3e-4), 60)
    ax = timeline_figure(tr, title="two workers").axes[0]
    assert ax.get_title() == "two workers" and ax.get_xlabel() == "time (s)"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "read", "transform", "transfer", "compute", "waiting for data"]


def test_hit_rate_has_a_panel_per_pattern_and_a_line_per_policy():
    cdf = cache_sweep(100, 1.0, [0, 25, 50, 100], epochs=2, window=10)
    fig = hit_rate_figure(cdf)
    assert sorted(ax.get_title() for ax in fig.axes) == sorted(cdf.pattern.unique())
    assert fig.axes[0].get_ylabel() == "hit rate (epochs ≥ 2)"
    traced = [ln.get_label() for ln in fig.axes[0].get_lines() if not ln.get_label().startswith("_")]
    assert traced == [f"{p} (trace)" for p in sorted(cdf.policy.unique())]


def test_many_hosts_has_a_series_per_label():
    hosts = many_hosts(PipelineConfig(), hosts=(1, 4), n_items=400)
    ax = many_hosts_figure({"a": hosts, "b": hosts}).axes[0]
    assert ax.get_xlabel() == "hosts (synchronous data parallel)"
    assert ax.get_ylabel() == "steps/s relative to 1 host"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    assert len(ax.containers) == 2  # one error-bar series each


def test_missing_columns_are_named(small_sweep):
    with pytest.raises(KeyError, match="prefetch_buffer_size"):
        heatmap_figure(small_sweep.drop(columns="prefetch_buffer_size"))
    with pytest.raises(KeyError, match="compute_start"):
        timeline_figure(pd.DataFrame({"item": [0]}))
    with pytest.raises(ValueError, match="no rows with epoch >= 2"):
        hit_rate_figure(cache_sweep(10, 1.0, [5], epochs=1))
    with pytest.raises(TypeError, match="DataFrame"):
        timeline_figure([1, 2])


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


def test_study_section_simulates_the_finished_configurations(tmp_path):
    m = measured_rows()
    m.loc[0, "status"] = "failed"
    m.loc[0, "samples_per_s"] = np.nan
    md = simulation.section(StudyResults(path=tmp_path, rows=m, runs=m, config={}, meta={}))
    assert md.startswith("## Simulation")
    table = md.split("### Measured configurations, simulated")[1].split("###")[0]
    body = [ln for ln in table.splitlines() if ln.startswith("|")][2:]  # below the header and its rule
    assert len(body) == 7  # the failed configuration is not simulated beside the measured ones
    assert all(is_png(tmp_path / f) for f in _linked_files(md))
