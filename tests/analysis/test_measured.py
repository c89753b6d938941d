"""analysis.measured: the measured-sweep section, its comparisons and its figure."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

from analysis import measured
from analysis.report import StudyResults


def _grid() -> pd.DataFrame:
    """8 configurations: workers help, prefetch and feed barely matter; intervals ±3%."""
    rows = []
    for i, (w, pf, feed) in enumerate(itertools.product([0, 2], [1, 4], ["none", "double_buffer"])):
        s = (1000.0 if w == 0 else 2500.0) + 10 * pf + (5 if feed == "none" else 0)
        rows.append(dict(config_id=f"c{i}", design="grid", status="ok", model="mlp", width=64, depth=2, params=1234,
                         num_workers=w, prefetch_buffer_size=pf, feed=feed, batch_size=64, samples_per_s=s,
                         samples_per_s_lo=0.97 * s, samples_per_s_hi=1.03 * s, samples_per_s_cv=0.02,
                         data_wait_frac=0.5 if w == 0 else 0.1, feed_efficiency=s / 3000, feed_efficiency_lo=0.9 * s / 3000,
                         feed_efficiency_hi=1.1 * s / 3000, device_resident_samples_per_s=3000.0,
                         step_time_median_s=64 / s, bound_exceeded=False, repeats=2, interval_coverage=0.5,
                         device_resident_samples_per_s_cv=0.01))
    return pd.DataFrame(rows)


def test_throughput_figure_draws_a_line_per_series_in_a_panel_per_feed():
    fig = measured.throughput_figure(_grid(), "num_workers", "prefetch_buffer_size")
    assert [ax.get_title() for ax in fig.axes] == ["feed=double_buffer", "feed=none"]
    ax = fig.axes[1]
    assert ax.get_xlabel() == "num_workers" and fig.axes[0].get_ylabel() == "samples/s"
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert set(lines) == {"prefetch_buffer_size=1", "prefetch_buffer_size=4", "device-resident bound"}
    line = lines["prefetch_buffer_size=4"]
    assert list(line.get_xdata()) == [0, 2] and list(line.get_ydata()) == [1045.0, 2545.0]
    assert list(lines["device-resident bound"].get_ydata()) == [3000.0, 3000.0]
    with pytest.raises(KeyError, match="'feed' missing"):
        measured.throughput_figure(_grid().drop(columns="feed"), "num_workers", "prefetch_buffer_size")


def test_knob_effects_ranks_workers_first_and_calls_the_rest_noise():
    eff = measured.knob_effects(_grid()).set_index("knob")
    assert list(eff.index)[0] == "num_workers"
    assert eff.loc["num_workers", "ratio"] == pytest.approx(2527.5 / 1027.5)  # medians over the other knobs
    assert not eff.loc["num_workers", "within_noise"] and eff.loc["feed", "within_noise"]


def test_section_names_the_best_and_writes_its_figures(tmp_path):
    rows = _grid()
    md = measured.section(StudyResults(path=tmp_path, rows=rows, runs=rows, config={}, meta={}))
    assert md.startswith("## Measured sweep")
    assert "`num_workers=2`, `prefetch_buffer_size=4`, `feed=none`: **2545 [2469, 2621] samples/s**" in md
    assert "**num_workers**: median samples/s 1028 at `num_workers=0` → 2528 at `num_workers=2` (×2.46" in md
    for png in ("samples_vs_num_workers.png", "samples_vs_prefetch.png"):
        assert f"]({png})" in md and (tmp_path / png).stat().st_size > 5000


def test_environment_names_the_cpu_where_the_study_recorded_it(tmp_path):
    rows = _grid()
    env = {"platform": "cpu", "cpu_count": 2}
    old = measured.environment_section(StudyResults(path=tmp_path, rows=rows, runs=rows, config={},
                                                    meta={"environment": env}))
    assert "| cpu_count" in old and "cpu_model" not in old  # a folder from before: no blank row
    new = measured.environment_section(StudyResults(
        path=tmp_path, rows=rows, runs=rows, config={},
        meta={"environment": {**env, "cpu_model": "AMD EPYC (family/model/stepping 25/1/1)", "cpu_simd": "avx2 fma"}}))
    assert "AMD EPYC (family/model/stepping 25/1/1)" in new and "avx2 fma" in new
