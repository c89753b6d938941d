import json

import numpy as np
import pandas as pd
import pytest

from analysis import memory
from analysis.memory import FIGURE_FILE, footprint_figure, footprint_table, memory_section
from analysis.report import StudyResults
from memsim.footprint import FootprintConfig, TransformerShape, XlaMemory, footprint, transformer_activation_bytes


def _footprints():
    """Two configurations (loader knobs differ) with XLA activations; the second also analytic."""
    out = []
    xla = XlaMemory(argument_bytes=4_000_000 + 8_000_004 + 49_216, output_bytes=12_000_004 + 64,
                    temp_bytes=4_500_000, alias_bytes=12_000_004)
    for cid, workers in (("a", 0), ("b", 2)):
        cfg = FootprintConfig(param_bytes=4_000_000, host_sample_bytes=3_092, device_sample_bytes=3_076,
                              batch_size=16, num_workers=workers)
        out.append(footprint(cfg, xla).assign(config_id=cid, variant="xla", xla_step_bytes=xla.step_bytes))
    shape = TransformerShape(seq_len=32, width=64, num_heads=4, depth=2, vocab_size=256)
    analytic = footprint(cfg, transformer_activation_bytes(shape, 16))
    out.append(analytic.assign(config_id="b", variant="analytic", xla_step_bytes=xla.step_bytes))
    return pd.concat(out, ignore_index=True)


def _rows(**extra):
    return pd.DataFrame({"config_id": ["a", "b", "c"], "num_workers": [0, 2, 4], "feed": "double_buffer",
                         "status": ["ok", "ok", "failed"], "platform": "cpu", **extra})


def _study(tmp_path, rows, memory=None, meta=None) -> StudyResults:
    return StudyResults(path=tmp_path, rows=rows, runs=rows, config={}, meta=meta or {}, memory=memory)


def _header(text: str, first: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| {first}"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_section_renders_tables_and_figure(tmp_path):
    text = memory.section(_study(tmp_path, _rows(), _footprints()))
    assert text.startswith("## Memory")
    assert "### Device" in text and "### Host" in text
    assert _header(text, "#")[:6] == ["#", "config", "parameters", "gradients", "optimizer_state", "activations"]
    assert "num_workers=2" in text and "num_workers=0" in text and "num_workers=4" not in text
    assert "footprint step / XLA" in text and "analytic step / XLA" in text
    assert "worker_output_queues" in text, "a host component used by one configuration is shown"
    assert "the \"device\" is host RAM too" in text
    assert f"![memory footprint]({FIGURE_FILE})" in text and (tmp_path / FIGURE_FILE).stat().st_size > 0
    assert "### Measured" not in text


def test_table_numbers(tmp_path):
    t = footprint_table(_footprints(), {"a": "A", "b": "B"}).set_index("config")
    assert t.loc["A", "parameters"] == t.loc["A", "gradients"] == 4_000_000
    assert t.loc["A", "optimizer_state"] == 8_000_004
    assert t.loc["B", "host total"] > t.loc["A", "host total"], "workers add host buffers"
    assert t.loc["A", "device total"] == t.loc["B", "device total"]
    assert abs(t.loc["A", "footprint step / XLA"] - 1) < 1e-4
    assert np.isnan(t.loc["A", "analytic step / XLA"]) and t.loc["B", "analytic step / XLA"] > 0


def test_section_reads_memory_csv_and_reports_measured_peak(tmp_path):
    _footprints().to_csv(tmp_path / "memory.csv", index=False)
    rows = _rows(device_peak_bytes=[3.1e7, np.nan, np.nan], platform="gpu")
    study = StudyResults.load(tmp_path)
    assert study.memory is not None and len(study.memory) == len(_footprints())
    text = memory.section(_study(tmp_path, rows, study.memory))
    assert "### Device" in text and "### Measured" in text and "31 MB" in text
    assert "host RAM too" not in text


def test_section_without_or_with_failed_footprints(tmp_path):
    text = memory.section(_study(tmp_path, _rows()))
    assert "not computed" in text and "memory.csv" in text
    err = pd.DataFrame({"error": ["ValueError: boom"]})
    assert "failed: `ValueError: boom`" in memory_section(err, _rows(), tmp_path)
    (tmp_path / "study.json").write_text(json.dumps({"errors": {"memory": "RuntimeError: no XLA"}}))
    assert "failed: `RuntimeError: no XLA`" in memory.section(StudyResults.load(tmp_path))


def test_figure_has_a_panel_per_place_and_a_bar_per_configuration():
    fig = footprint_figure(_footprints().query("variant == 'xla'"), labels={"a": "1", "b": "2"}, order=["b", "a"])
    device, host = fig.axes
    assert (device.get_title(), host.get_title()) == ("device memory", "host memory")
    assert device.get_ylabel() == "MB (10⁶ bytes)"
    assert [t.get_text() for t in device.get_xticklabels()] == ["2", "1"]
    legend = [t.get_text() for t in device.get_legend().get_texts()]
    assert legend[:3] == ["parameters", "gradients", "optimizer state"]
    params = device.containers[0]  # the parameters bars: 4 MB for each configuration
    assert [round(b.get_height(), 3) for b in params] == [4.0, 4.0]


def test_bad_footprint_frame_is_named(tmp_path):
    with pytest.raises(KeyError, match=r"\['xla_step_bytes'\] missing"):
        footprint_table(_footprints().drop(columns="xla_step_bytes"))
    with pytest.raises(ValueError, match="'b' has no 'xla' variant"):
        footprint_table(_footprints().query("not (config_id == 'b' and variant == 'xla')"))
    with pytest.raises(KeyError, match="order names"):
        footprint_figure(_footprints(), order=["zz"])
