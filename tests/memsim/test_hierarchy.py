import math

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import memsim.hierarchy as hierarchy
from memsim.hierarchy import Hierarchy, HierarchyError, Link, Tier, hockney_time
from memsim.machines import PRESETS, h100_sxm, h200, pcie_bandwidth_Bps, workstation_2020
from memsim.units import GB, MB, TB, format_bytes, format_rate


def test_units_format_picks_the_largest_unit_below_the_value():
    assert format_bytes(999) == "999 B"
    assert format_bytes(1000) == "1 kB"
    assert format_bytes(1.5 * GB) == "1.5 GB"
    assert format_bytes(-2 * MB) == "-2 MB"
    assert format_rate(12.5 * GB) == "12.5 GB/s"
    assert format_bytes(3 * TB) == "3 TB"


def test_presets_live_in_machines_not_in_the_model():
    # the model module holds the model only: no preset or unit names left behind
    for name in ("workstation_2020", "h100_sxm", "h200", "PRESETS", "format_bytes", "GB"):
        assert not hasattr(hierarchy, name), name


def toy(chain_latency=1e-3):
    return Hierarchy(
        tiers=(Tier("a", 1e12, 1e9, 0.0), Tier("b", 1e12, 1e9, 0.0), Tier("c", 1e12, 1e9, 0.0)),
        links=(Link("a", "b", 1e9, chain_latency), Link("b", "c", 4e9, 2 * chain_latency)))


# ---- validation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("field,value", [
    ("capacity_bytes", 0), ("capacity_bytes", -1.0), ("capacity_bytes", float("nan")),
    ("capacity_bytes", float("inf")), ("bandwidth_Bps", 0), ("bandwidth_Bps", -3e9),
    ("latency_s", -1e-6), ("cost_per_GB", -1.0), ("capacity_bytes", "big"),
])
def test_tier_rejects_bad_numbers_naming_field_and_value(field, value):
    kw = dict(name="ram", capacity_bytes=32e9, bandwidth_Bps=50e9, latency_s=1e-7)
    kw[field] = value
    with pytest.raises(HierarchyError) as e:
        Tier(**kw)
    assert f"{field}={value!r}" in str(e.value) and "'ram'" in str(e.value)


@pytest.mark.parametrize("field,value", [("bandwidth_Bps", 0), ("bandwidth_Bps", -1),
                                         ("latency_s", -0.1), ("latency_s", float("nan"))])
def test_link_rejects_bad_numbers(field, value):
    kw = dict(src="ram", dst="gpu", bandwidth_Bps=25e9, latency_s=1e-5)
    kw[field] = value
    with pytest.raises(HierarchyError, match=f"ram->gpu: {field}="):
        Link(**kw)


def test_link_rejects_unknown_memory_kind():
    with pytest.raises(HierarchyError, match="memory_kind='pinned'"):
        Link("ram", "gpu", 1e9, 0.0, memory_kind="pinned")


def test_link_to_unknown_tier_names_it_and_the_known_tiers():
    with pytest.raises(HierarchyError) as e:
        Hierarchy(tiers=(Tier("ram", 1e9, 1e9, 0),), links=(Link("ram", "gpu", 1e9, 0),))
    msg = str(e.value)
    assert "dst='gpu'" in msg and "known tiers: 'ram'" in msg


def test_duplicate_tiers_links_and_bad_part_of_are_rejected():
    t = Tier("ram", 1e9, 1e9, 0)
    with pytest.raises(HierarchyError, match="'ram' appears twice"):
        Hierarchy(tiers=(t, t))
    with pytest.raises(HierarchyError, match="ram->ram appears twice"):
        Hierarchy(tiers=(t,), links=(Link("ram", "ram", 1e9, 0), Link("ram", "ram", 2e9, 0)))
    with pytest.raises(HierarchyError, match="part_of='dram'"):
        Hierarchy(tiers=(t, Tier("page_cache", 1e9, 1e9, 0, part_of="dram")))
    with pytest.raises(HierarchyError, match="exceeds"):
        Hierarchy(tiers=(t, Tier("page_cache", 2e9, 1e9, 0, part_of="ram")))
    with pytest.raises(HierarchyError, match="tiers=\\(\\) is empty"):
        Hierarchy(tiers=())


def test_lookups_name_what_exists():
    h = toy()
    with pytest.raises(HierarchyError, match="no tier 'z'; known tiers: 'a', 'b', 'c'"):
        h.tier("z")
    with pytest.raises(HierarchyError, match="no link a->c; known links: a->b, b->c"):
        h.link("a", "c")
    with pytest.raises(HierarchyError, match="at least two"):
        h.chain(["a"])


# ---- the α-β model ------------------------------------------------------------------------------

def test_hockney_single_link_is_latency_plus_bytes_over_bandwidth():
    link = Link("a", "b", 2e9, 5e-6)
    for n in (0.0, 1.0, 4096.0, 3e9):
        assert link.time(n) == pytest.approx(5e-6 + n / 2e9, rel=1e-12)


def test_negative_or_nan_bytes_are_rejected():
    with pytest.raises(HierarchyError, match="n_bytes=-1"):
        hockney_time(-1, 0.0, 1e9)
    with pytest.raises(HierarchyError, match="n_bytes="):
        toy().chain_time(np.array([1.0, np.nan]), ["a", "b"])


def test_vectorised_over_n_with_numpy_and_jax_including_jit_and_vmap():
    h = toy()
    n = np.geomspace(1, 1e10, 7)
    expect = np.array([h.chain_time(float(v), ["a", "b", "c"]) for v in n])
    np.testing.assert_allclose(h.chain_time(n, ["a", "b", "c"]), expect, rtol=1e-12)
    nj = jnp.asarray(n, dtype=jnp.float32)
    f = jax.jit(lambda m: h.chain_time(m, ["a", "b", "c"], "pipelined", chunk_bytes=1e6))
    got = f(nj)
    ref = h.chain_time(n, ["a", "b", "c"], "pipelined", chunk_bytes=1e6)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5)
    v = jax.vmap(lambda m: h.transfer_time(m, "a", "b"))(nj)
    np.testing.assert_allclose(np.asarray(v), 1e-3 + n / 1e9, rtol=1e-5)


def test_store_and_forward_sums_hops_and_ideal_pipeline_takes_the_slowest():
    h = toy()
    n = 8e9
    assert h.chain_time(n, ["a", "b", "c"]) == pytest.approx((1e-3 + n / 1e9) + (2e-3 + n / 4e9))
    assert h.chain_time(n, ["a", "b", "c"], "pipelined") == pytest.approx(3e-3 + n / 1e9)
    assert h.chain_bandwidth(["a", "b", "c"]) == pytest.approx(1 / (1 / 1e9 + 1 / 4e9))
    assert h.chain_bandwidth(["a", "b", "c"], "pipelined") == 1e9
    big = 1e15
    assert h.chain_time(big, ["a", "b", "c"]) / big == pytest.approx(1 / h.chain_bandwidth(["a", "b", "c"]), rel=1e-9)


def _simulate_pipeline(n_chunks, taus):
    # finish[i][j] = max(finish[i-1][j], finish[i][j-1]) + tau_i: chunk j leaves hop i.
    prev = [0.0] * n_chunks
    for tau in taus:
        cur, t = [], 0.0
        for j in range(n_chunks):
            t = max(prev[j], t) + tau
            cur.append(t)
        prev = cur
    return prev[-1]


@pytest.mark.parametrize("n,c", [(64e6, 4e6), (1e9, 1e8), (3e6, 1e6), (5e5, 1e6)])
def test_chunked_pipeline_matches_an_event_simulation(n, c):
    h = toy(chain_latency=2e-4)
    links = h.chain(["a", "b", "c"])
    chunk = min(n, c)
    k = max(1, math.ceil(n / c))
    taus = [link.latency_s + chunk / link.bandwidth_Bps for link in links]
    got = h.chain_time(n, ["a", "b", "c"], "pipelined", chunk_bytes=c)
    assert got == pytest.approx(_simulate_pipeline(k, taus), rel=1e-12)
    # One chunk is store-and-forward; pipelining never loses to it.
    assert got <= h.chain_time(n, ["a", "b", "c"]) * (1 + 1e-12)


def test_chain_mode_errors():
    h = toy()
    with pytest.raises(HierarchyError, match="mode='cut'"):
        h.chain_time(1.0, ["a", "b"], mode="cut")
    with pytest.raises(HierarchyError, match="chunk_bytes=1000"):
        h.chain_time(1.0, ["a", "b"], chunk_bytes=1000)
    with pytest.raises(HierarchyError, match="chunk_bytes=0"):
        h.chain_time(1.0, ["a", "b"], "pipelined", chunk_bytes=0)


# ---- presets ------------------------------------------------------------------------------------

def test_workstation_2020_is_the_textbook_table():
    h = workstation_2020()
    want = {"cpu_cache": (32 * MB, 1 * TB), "ram": (32 * GB, 50 * GB), "gpu": (24 * GB, 1000 * GB),
            "ssd": (1 * TB, 3 * GB), "hdd": (4 * TB, 100 * MB)}
    for name, (cap, bw) in want.items():
        assert (h.tier(name).capacity_bytes, h.tier(name).bandwidth_Bps) == (cap, bw)
    assert {t.name for t in h.physical_tiers()} == set(want)


def test_h100_and_h200_match_their_datasheets_and_split_pinned_from_pageable():
    assert pcie_bandwidth_Bps(5) == pytest.approx(63.0e9, rel=2e-3)
    assert pcie_bandwidth_Bps(3) == pytest.approx(15.75e9, rel=2e-3)
    for h, cap, bw in ((h100_sxm(), 80e9, 3.35e12), (h200(), 141e9, 4.8e12)):
        assert (h.tier("hbm").capacity_bytes, h.tier("hbm").bandwidth_Bps) == (cap, bw)
        assert h.tier("l2").capacity_bytes == 50e6
        pinned, pageable = h.link("pinned_host", "hbm"), h.link("ram", "hbm")
        assert pinned.memory_kind == "pinned_host" and pageable.memory_kind == "unpinned_host"
        assert pageable.bandwidth_Bps < pinned.bandwidth_Bps < pcie_bandwidth_Bps(5)
        # the staged pageable path is the store-and-forward of its two hops
        staged = h.chain_bandwidth(["ram", "pinned_host", "hbm"])
        assert pageable.bandwidth_Bps == pytest.approx(staged)
    assert h100_sxm().link("pinned_host", "hbm") == h200().link("pinned_host", "hbm")


def test_every_preset_number_has_a_source():
    for make in PRESETS.values():
        h = make()
        assert h.source
        assert all(t.source for t in h.tiers), [t.name for t in h.tiers if not t.source]
        assert all(link.source for link in h.links), [lk.name for lk in h.links if not lk.source]


def test_pcie_rejects_unknown_generation():
    with pytest.raises(HierarchyError, match="gen=7"):
        pcie_bandwidth_Bps(7)


# ---- from_probes --------------------------------------------------------------------------------

def fits_frame(**over):
    rows = {
        "probe": ["file_read_cold", "file_read_warm", "ram_copy", "h2d_pageable", "h2d_pinned",
                  "d2h", "device_copy", "matmul_fp32"],
        "status": ["ok", "ok", "ok", "ok", "not measured", "ok", "ok", "ok"],
        "alpha_s": [2e-4, 2e-6, 1e-6, 9e-5, np.nan, 1.5e-5, 1.2e-5, 3e-4],
        "beta_Bps": [2.9e9, 7.8e9, 1.6e10, 1.5e9, np.nan, 9e9, 1.8e9, np.nan],
    }
    df = pd.DataFrame(rows)
    df["platform"] = "cpu"
    df["ram_total_bytes"] = 25e9
    df["disk_total_bytes"] = 270e9
    df["device_memory_bytes"] = np.nan
    for k, v in over.items():
        df[k] = v
    return df


def test_from_probes_builds_tiers_and_links_from_the_fits():
    h = Hierarchy.from_probes(fits_frame())
    assert [t.name for t in h.tiers] == ["disk", "page_cache", "ram", "device"]
    assert h.tier("disk").bandwidth_Bps == 2.9e9 and h.tier("disk").latency_s == 2e-4
    assert h.tier("disk").capacity_bytes == 270e9
    assert h.tier("page_cache").part_of == "ram"
    assert h.tier("device").capacity_bytes == 25e9  # CPU: the device is host RAM
    link = h.link("ram", "device")
    assert (link.bandwidth_Bps, link.latency_s, link.memory_kind) == (1.5e9, 9e-5, "unpinned_host")
    assert h.link("device", "ram").bandwidth_Bps == 9e9
    assert not h.has_tier("pinned_host")
    assert "pinned_host (h2d_pinned not measured" in h.source
    # the chain of this machine: disk → page cache → ram → device
    t = h.chain_time(1e9, ["disk", "page_cache", "ram", "device"])
    assert t == pytest.approx(2e-4 + 1e9 / 2.9e9 + 2e-6 + 1e9 / 7.8e9 + 9e-5 + 1e9 / 1.5e9)


def test_from_probes_capacities_override_and_gpu_device_memory():
    df = fits_frame(platform="gpu", device_memory_bytes=80e9)
    h = Hierarchy.from_probes(df, capacities={"disk": 1e12})
    assert h.tier("device").capacity_bytes == 80e9 and h.tier("disk").capacity_bytes == 1e12


def test_from_probes_leaves_out_what_was_not_measured_and_never_invents():
    df = fits_frame()
    df.loc[df["probe"] == "file_read_cold", "status"] = "not measured"
    df.loc[df["probe"] == "device_copy", "beta_Bps"] = np.nan
    h = Hierarchy.from_probes(df)
    assert not h.has_tier("disk") and not h.has_tier("device")
    assert not h.has_link("ram", "device")
    assert "disk (file_read_cold" in h.source and "device (device_copy" in h.source
    df2 = fits_frame(device_memory_bytes=np.nan, platform="gpu")
    h2 = Hierarchy.from_probes(df2)
    assert not h2.has_tier("device") and "capacity unknown" in h2.source


def test_from_probes_bad_input_errors():
    with pytest.raises(HierarchyError, match=r"lacks column\(s\) \['beta_Bps'\]"):
        Hierarchy.from_probes(fits_frame().drop(columns=["beta_Bps"]))
    with pytest.raises(HierarchyError, match="not a DataFrame|pass the DataFrame"):
        Hierarchy.from_probes([1, 2])
    none_ok = fits_frame(status="not measured")
    with pytest.raises(HierarchyError, match="no usable tier"):
        Hierarchy.from_probes(none_ok)


def test_frames_list_every_tier_and_link():
    h = h100_sxm()
    assert len(h.tiers_frame()) == len(h.tiers)
    lf = h.links_frame()
    assert list(lf["link"]) == [lk.name for lk in h.links]
    assert set(lf.columns) >= {"src", "dst", "bandwidth_Bps", "latency_s", "memory_kind"}
