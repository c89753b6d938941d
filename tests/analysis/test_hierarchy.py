from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

import analysis.links as links
from analysis.report import StudyResults
from analysis.hierarchy import (comparison_hierarchies, draw_pyramid, fits_table, probe_table, pyramid_figure,
                                save_pyramid, section, section_from_tables)
from memsim.hierarchy import Hierarchy
from memsim.machines import h100_sxm, h200, workstation_2020
from memsim.units import format_rate

REPO = Path(__file__).resolve().parents[2]


def Study(path: Path, probe_raw: pd.DataFrame | None = None, errors: dict | None = None) -> StudyResults:
    """A study folder's results with only what the Hierarchy section reads filled in."""
    return StudyResults(path=path, rows=pd.DataFrame(), runs=pd.DataFrame(), config={},
                        meta={"errors": errors or {}}, probe_raw=probe_raw)


def md_rows(md: str, first_cell: str) -> list[list[str]]:
    """The cells of every Markdown table row of ``md`` whose first cell is ``first_cell``."""
    out = []
    for line in md.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] == first_cell:
                out.append(cells)
    return out


def test_every_physical_tier_is_one_bar_at_its_bandwidth():
    h = workstation_2020()
    ax = Figure().add_subplot()
    assert draw_pyramid(ax, h) == len(h.physical_tiers()) == 5
    bars = ax.collections
    assert len(bars) == 5
    centres = sorted(np.sqrt(b.get_paths()[0].vertices[:, 1].min() * b.get_paths()[0].vertices[:, 1].max())
                     for b in bars)
    want = sorted(t.bandwidth_Bps for t in h.physical_tiers())
    np.testing.assert_allclose(centres, want, rtol=1e-9)
    widths = {round(b.get_paths()[0].vertices[:, 0].max(), 6) for b in bars}
    assert max(widths) == pytest.approx(np.log10(4e12 / 1e3))  # the 4 TB HDD is the widest
    assert ax.get_yscale() == "log"
    labels = " ".join(t.get_text() for t in ax.texts)
    for t in h.physical_tiers():
        assert t.name in labels


def test_figure_has_a_panel_per_hierarchy_plus_the_comparison(tmp_path):
    hs = [workstation_2020(), h100_sxm(), h200()]
    fig = pyramid_figure(hs)
    assert len(fig.axes) == 4
    assert [ax.get_title() for ax in fig.axes[:3]] == ["workstation_2020", "h100_sxm", "h200"]
    for ax, h in zip(fig.axes[:3], hs):
        # one bar per physical tier, each labelled with its name, on log bandwidth axes shared by the panels
        assert len(ax.collections) == len(h.physical_tiers())
        labels = [t.get_text() for t in ax.texts]
        assert sorted(lab.split(":")[0] for lab in labels) == sorted(t.name for t in h.physical_tiers())
        assert ax.get_yscale() == "log" and ax.get_xlabel() == "capacity (bar half-width, log)"
        assert ax.get_ylim() == fig.axes[0].get_ylim()
    assert fig.axes[0].get_ylabel() == "bandwidth (bytes/s, log)"
    cmp = fig.axes[3]
    assert cmp.get_title() == "all, capacity vs bandwidth"
    assert cmp.get_xscale() == "log" and cmp.get_yscale() == "log"
    assert [line.get_label() for line in cmp.get_lines()] == ["workstation_2020", "h100_sxm", "h200"]
    assert [t.get_text() for t in cmp.get_legend().get_texts()] == ["workstation_2020", "h100_sxm", "h200"]
    for line, h in zip(cmp.get_lines(), hs):  # each series: the tiers' (capacity, bandwidth) points
        want = sorted((t.capacity_bytes, t.bandwidth_Bps) for t in h.physical_tiers())
        np.testing.assert_allclose(np.c_[line.get_xdata(), line.get_ydata()], want)
    # save_pyramid writes the figure of pyramid_figure at its size × dpi
    import matplotlib.image
    p = save_pyramid([workstation_2020()], tmp_path / "sub" / "p.png", dpi=50)
    w, h = pyramid_figure([workstation_2020()]).get_size_inches() * 50
    assert matplotlib.image.imread(p).shape[:2] == (round(h), round(w))


def test_plot_bad_inputs():
    with pytest.raises(ValueError, match="empty"):
        pyramid_figure([])
    with pytest.raises(TypeError, match="pass memsim Hierarchy"):
        pyramid_figure(["h100"])
    with pytest.raises(TypeError, match="pass a memsim.hierarchy.Hierarchy"):
        draw_pyramid(Figure().add_subplot(), None)


def fake_probe_run():
    rng = np.random.default_rng(0)
    rows = []
    spec = {"file_read_cold": ("disk->page_cache", 1e-4, 2e9), "file_read_warm": ("page_cache->ram", 2e-6, 8e9),
            "ram_copy": ("ram->ram", 1e-6, 1.5e10), "h2d_pageable": ("ram->device", 9e-5, 1.5e9),
            "d2h": ("device->ram", 1e-5, 9e9), "device_copy": ("device->device", 1e-5, 2e9)}
    for probe, (link, a, b) in spec.items():
        for n in 4096 * 4.0 ** np.arange(6):
            for r in range(3):
                rows.append({"probe": probe, "link": link, "phase": "measure", "status": "ok",
                             "size_bytes": n, "seconds": (a + n / b) * np.exp(rng.normal(0, 0.02)),
                             "flops": np.nan, "repeat": r, "note": "synthetic"})
    rows.append({"probe": "h2d_pinned", "link": "pinned_host->device", "phase": "measure",
                 "status": "not measured", "size_bytes": np.nan, "seconds": np.nan, "flops": np.nan,
                 "repeat": -1, "note": "platform cpu: no host-to-device bus"})
    for n in (128, 256, 512):
        rows.append({"probe": "matmul_fp32", "link": "device compute", "phase": "measure",
                     "status": "ok", "size_bytes": 12.0 * n * n, "seconds": 2e-4 + 2 * n**3 / 1e11,
                     "flops": 2.0 * n**3, "repeat": 0, "note": "synthetic"})
    raw = pd.DataFrame(rows)
    raw["platform"] = "cpu"
    raw["ram_total_bytes"] = 16e9
    raw["disk_total_bytes"] = 500e9
    raw["device_memory_bytes"] = np.nan
    # the fit table as analysis.links.fit_links would give it (numbers from the spec above)
    fits = pd.DataFrame([{"probe": p, "link": link, "status": "ok", "alpha_s": a, "beta_Bps": b,
                          "flop_rate": np.nan, "r2": 0.99, "r2_log": 0.98, "n_points": 18,
                          "method": "synthetic"} for p, (link, a, b) in spec.items()]
                        + [{"probe": "h2d_pinned", "link": "pinned_host->device", "status": "not measured",
                            "alpha_s": np.nan, "beta_Bps": np.nan, "flop_rate": np.nan, "r2": np.nan,
                            "r2_log": np.nan, "n_points": 0, "method": "synthetic"},
                           {"probe": "matmul_fp32", "link": "device compute", "status": "ok",
                            "alpha_s": 2e-4, "beta_Bps": np.nan, "flop_rate": 1e11, "r2": 1.0,
                            "r2_log": 1.0, "n_points": 3, "method": "synthetic"}])
    for c in ("platform", "ram_total_bytes", "disk_total_bytes", "device_memory_bytes"):
        fits[c] = raw[c].iloc[0]
    return raw, fits


def test_section_with_measurements_has_tables_figure_and_placement(tmp_path):
    raw, fits = fake_probe_run()
    md = section_from_tables(raw, fits, tmp_path)
    assert md.startswith("## Hierarchy\n")
    for heading in ("### Probes", "### Fitted links", "### Memory pyramid", "### Where should the data live?"):
        assert heading in md
    assert "![memory pyramid: this machine, workstation_2020, h100_sxm](hierarchy_pyramid.png)" in md
    assert (tmp_path / "hierarchy_pyramid.png").stat().st_size > 10_000
    # the probe table's row for the probe that was not measured, and the fitted row of ram_copy
    assert md_rows(md, "h2d_pinned")[0][:6] == ["h2d_pinned", "pinned_host->device", "–", "–", "–", "not measured"]
    ram = md_rows(md, "ram_copy")
    assert ram[1][:5] == ["ram_copy", "ram->ram", "ok", "1 µs", "15 GB/s"] and ram[1][6:8] == ["0.990", "0.980"]
    assert "100 GFLOP/s" in md
    # placement for this machine: 1.5 × its 16 GB of RAM on its disk
    assert "dataset = 1.5 × RAM (24 GB) on disk, shuffled each epoch" in md
    assert "closed form, LRU" in md


def test_section_of_a_study_fits_the_raw_rows_itself(tmp_path):
    raw, _ = fake_probe_run()
    md = section(Study(tmp_path, raw))
    fits = links.fit_links(raw).set_index("probe")
    row = md_rows(md, "file_read_cold")[1]  # [0] is the probe table's, [1] the fitted link's
    assert row[2] == "ok" and row[4] == format_rate(fits.loc["file_read_cold", "beta_Bps"])
    assert fits.loc["file_read_cold", "beta_Bps"] == pytest.approx(2e9, rel=0.05)
    assert f"Method: {links.FIT_METHOD}." in md
    assert "Hierarchy of this machine from the fits" in md
    assert (tmp_path / "hierarchy_pyramid.png").exists()


def test_section_of_a_study_without_probes_and_with_failed_probes(tmp_path):
    md = section(Study(tmp_path, None))
    assert "python -m experiments probe --preset quick" in md and "### Fitted links" not in md
    with pytest.raises(RuntimeError, match="the probes failed: OSError: disk full"):
        section(Study(tmp_path, None, {"probes": "OSError: disk full"}))


def test_section_reads_the_committed_probe_rows(tmp_path):
    from experiments.results import read_csv_rows
    raw = read_csv_rows(REPO / "tests" / "data" / "probe_golden" / "rows.csv")
    md = section(Study(tmp_path, raw))
    committed = pd.read_csv(REPO / "tests" / "data" / "probe_golden" / "fits.csv").set_index("probe")
    row = md_rows(md, "ram_copy")[1]
    assert row[4] == format_rate(committed.loc["ram_copy", "beta_Bps"])
    assert md_rows(md, "h2d_pinned")[1][2] == "not measured"


def test_section_without_probes_still_draws_presets_and_says_what_to_run(tmp_path):
    md = section_from_tables(None, None, tmp_path)
    assert "python -m experiments probe --preset quick" in md
    assert "### Probes" not in md and "### Fitted links" not in md
    assert "![memory pyramid: workstation_2020, h100_sxm](hierarchy_pyramid.png)" in md
    assert (tmp_path / "hierarchy_pyramid.png").exists()
    assert "same question for `workstation_2020`" in md.replace("\n", " ")


def test_section_rejects_tables_missing_columns(tmp_path):
    raw, fits = fake_probe_run()
    with pytest.raises(ValueError, match=r"probe_fits lacks column\(s\) \['beta_Bps'\]"):
        section_from_tables(raw, fits.drop(columns=["beta_Bps"]), tmp_path)
    with pytest.raises(ValueError, match=r"probe_raw lacks column\(s\) \['seconds'\]"):
        section_from_tables(raw.drop(columns=["seconds"]), fits, tmp_path)
    with pytest.raises(TypeError, match="probe_raw is a dict"):
        section_from_tables({}, fits, tmp_path)


def test_tables_format_rates():
    raw, fits = fake_probe_run()
    pt = probe_table(raw).set_index("probe")
    assert pt.loc["h2d_pinned", "status"] == "not measured"
    assert pt.loc["ram_copy", "sizes"].endswith("(6)")
    ft = fits_table(fits).set_index("probe")
    assert ft.loc["matmul_fp32", "bandwidth B"] == "100 GFLOP/s"
    assert ft.loc["file_read_cold", "α (latency)"] == "100 µs"


def test_measured_hierarchy_goes_beside_the_presets():
    _, fits = fake_probe_run()
    h = Hierarchy.from_probes(fits)
    names = [x.name for x in comparison_hierarchies(h)]
    assert names == ["this machine", "workstation_2020", "h100_sxm"]
    fig = pyramid_figure(comparison_hierarchies(h))
    assert fig.axes[0].get_title() == "this machine" and len(fig.axes[0].collections) == 3
