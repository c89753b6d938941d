import math
from collections import OrderedDict

import numpy as np
import pytest

from memsim.hierarchy import Hierarchy, Link, Tier
from memsim.machines import h100_sxm, workstation_2020
from memsim.placement import (PlacementError, compare_placements, hit_rate_upper_bound,
                              lru_sequential_hit_rate, lru_shuffle_hit_rate, plan_placement)


def simulate_lru(cache_items, dataset_items, epochs, shuffle, seed=0):
    """Hit rate over epochs 2..epochs of an item-granular LRU cache."""
    rng = np.random.default_rng(seed)
    cache: OrderedDict[int, None] = OrderedDict()
    hits = reads = 0
    for e in range(epochs):
        order = rng.permutation(dataset_items) if shuffle else np.arange(dataset_items)
        for item in order.tolist():
            hit = item in cache
            if hit:
                cache.move_to_end(item)
            else:
                cache[item] = None
                if len(cache) > cache_items:
                    cache.popitem(last=False)
            if e > 0:
                hits += hit
                reads += 1
    return hits / reads


@pytest.mark.parametrize("c,d", [(1, 2), (10, 40), (30, 40), (100, 200), (199, 200)])
def test_lru_shuffle_closed_form_matches_a_simulated_lru(c, d):
    epochs = max(30, 40000 // d)
    sim = simulate_lru(c, d, epochs, shuffle=True)
    exact = lru_shuffle_hit_rate(c, d)
    # standard error of a mean of ~40k Bernoulli reads is < 0.003
    assert abs(sim - exact) < 0.01, (sim, exact)
    assert exact <= hit_rate_upper_bound(c, d)


def test_lru_shuffle_is_the_exact_finite_sum_and_far_below_c_over_d():
    for c, d in ((3, 7), (50, 1000), (999, 1000)):
        direct = sum((c - p) / (d - p) for p in range(c)) / d
        assert lru_shuffle_hit_rate(c, d) == pytest.approx(direct, rel=1e-9)
    assert lru_shuffle_hit_rate(100, 10_000) == pytest.approx(0.5 * 0.01**2, rel=0.02)
    assert lru_shuffle_hit_rate(0, 10) == 0.0 and lru_shuffle_hit_rate(10, 10) == 1.0
    # large datasets stay finite and in [0, 1]
    h = lru_shuffle_hit_rate(2e8, 3e8)
    assert 0 < h < 2 / 3


@pytest.mark.parametrize("c,d", [(10, 40), (39, 40), (40, 40)])
def test_sequential_lru_matches_simulation(c, d):
    assert simulate_lru(c, d, 5, shuffle=False) == lru_sequential_hit_rate(c, d)


def test_hit_rate_helpers_reject_bad_counts():
    with pytest.raises(PlacementError, match="dataset_items=0"):
        lru_shuffle_hit_rate(1, 0)
    with pytest.raises(PlacementError, match="cache_items=-1"):
        hit_rate_upper_bound(-1, 10)


def toy():
    """A disk, a page cache in RAM, RAM: round numbers to check the formulas by hand."""
    return Hierarchy(
        tiers=(Tier("disk", 1e12, 1e9, 1e-4), Tier("ram", 10e9, 10e9, 1e-7),
               Tier("page_cache", 10e9, 10e9, 1e-7, part_of="ram")),
        links=(Link("disk", "page_cache", 1e9, 1e-4), Link("page_cache", "ram", 10e9, 1e-6),
               Link("ram", "ram", 10e9, 1e-6)), name="toy")


def test_dataset_smaller_than_the_cache_is_all_hits_after_the_first_epoch():
    p = plan_placement(toy(), 5e9, 1e6, "shuffle", storage="disk")
    assert p.hit_rate == 1.0 and p.hit_rate_first_epoch == 0.0
    t_hit = 1e-6 + 1e6 / 10e9
    t_miss = 1e-4 + 1e-6 + 1e6 / 1e9
    assert p.samples_per_s == pytest.approx(1 / t_hit)
    assert p.epoch_s == pytest.approx(5000 * t_hit)
    assert p.first_epoch_s == pytest.approx(5000 * t_miss)


def test_dataset_larger_than_the_cache_uses_the_closed_forms_by_hand():
    h = toy()
    s = 1e6
    p = plan_placement(h, 20e9, s, "shuffle", storage="disk")
    hr = lru_shuffle_hit_rate(10_000, 20_000)
    assert p.hit_rate == pytest.approx(hr) and p.hit_rate_source == "closed form, LRU"
    assert p.hit_rate_upper_bound == 0.5
    t = hr * (1e-6 + s / 10e9) + (1 - hr) * (1e-4 + 1e-6 + s / 1e9)
    assert p.seconds_per_sample == pytest.approx(t)
    assert p.samples_per_s == pytest.approx(1 / t)
    assert p.epoch_s == pytest.approx(20_000 * t)
    q = plan_placement(h, 20e9, s, "sequential", storage="disk")
    assert q.hit_rate == 0.0
    # sequential: one seek per scan, streaming otherwise
    assert q.epoch_s == pytest.approx(20_000 * (1e-6 + s / 1e9) + 1e-4)


def test_concurrency_hides_latency_until_bandwidth_caps_it():
    h = toy()
    small = 4096.0
    rates = [plan_placement(h, 20e9, small, "shuffle", storage="disk", concurrency=k).samples_per_s
             for k in (1, 2, 4, 1024)]
    assert rates[1] == pytest.approx(2 * rates[0]) and rates[2] == pytest.approx(4 * rates[0])
    p = plan_placement(h, 20e9, small, "shuffle", storage="disk", concurrency=1024)
    assert p.limit == "bandwidth"
    hr = p.hit_rate
    assert p.samples_per_s == pytest.approx(1 / (hr * small / 10e9 + (1 - hr) * small / 1e9))
    assert plan_placement(h, 20e9, small, "shuffle", storage="disk").limit == "latency"


def test_shuffled_reads_from_hdd_are_far_slower_than_sequential_ones():
    h = workstation_2020()
    shuf = plan_placement(h, 48e9, 100e3, "shuffle", storage="hdd")
    seq = plan_placement(h, 48e9, 100e3, "sequential", storage="hdd")
    assert seq.samples_per_s > 5 * shuf.samples_per_s
    ssd = plan_placement(h, 48e9, 100e3, "shuffle", storage="ssd")
    assert ssd.samples_per_s > 50 * shuf.samples_per_s


def test_default_storage_and_holders():
    h = workstation_2020()
    p = plan_placement(h, 2e12, 1e6, "sequential")
    assert p.holders == ("hdd",) and p.storage == "hdd"
    p = plan_placement(h, 10e9, 1e6, "sequential")
    assert p.storage == "ssd" and set(p.holders) == {"gpu", "ram", "ssd", "hdd"}
    r = plan_placement(h, 10e9, 1e6, "shuffle", storage="ram")
    assert r.cache_tier is None and r.hit_rate_source == "resident"
    assert r.samples_per_s == pytest.approx(1 / (1e-6 + 1e6 / 25e9))


def test_given_hit_rate_is_used_and_labelled():
    p = plan_placement(toy(), 20e9, 1e6, "shuffle", storage="disk", hit_rate=0.4,
                       hit_rate_source="cache simulator (trace)")
    assert p.hit_rate == 0.4 and "cache simulator" in p.summary()


def test_summary_reads_like_the_issue():
    p = plan_placement(workstation_2020(), 48e9, 100e3, "shuffle", storage="ssd")
    s = p.summary()
    for part in ("dataset = 1.5 × RAM", "on ssd", "shuffled each epoch", "hit rate 0.3",
                 "closed form, LRU", "any policy ≤ 0.67", "samples/s", "per epoch"):
        assert part in s, (part, s)


def test_compare_placements_sorts_fastest_first():
    df = compare_placements(h100_sxm(), 50e9, 1e6, "shuffle")
    assert list(df["samples_per_s"]) == sorted(df["samples_per_s"], reverse=True)
    assert set(df["storage"]) == {"hbm", "ram", "nvme"}
    assert df["summary"].str.contains("samples/s").all()
    with pytest.raises(PlacementError, match="no file-backed tier|does not fit"):
        compare_placements(workstation_2020(), 5e12, 1e6, "shuffle")


@pytest.mark.parametrize("kwargs,match", [
    (dict(access="random"), "access='random'"),
    (dict(dataset_bytes=0), "dataset_bytes=0"),
    (dict(dataset_bytes=-5.0), "dataset_bytes=-5.0"),
    (dict(sample_bytes=float("nan")), "sample_bytes=nan"),
    (dict(sample_bytes=2e12), "exceeds dataset_bytes"),
    (dict(storage="ram", dataset_bytes=64e9), "does not fit in 'ram'"),
    (dict(storage="tape"), "storage='tape'"),
    (dict(concurrency=0), "concurrency=0"),
    (dict(hit_rate=1.5), "hit_rate=1.5"),
    (dict(reader_tier="sram"), "reader_tier='sram'"),
])
def test_bad_inputs_raise_errors_naming_the_value(kwargs, match):
    args = dict(hierarchy=workstation_2020(), dataset_bytes=10e9, sample_bytes=1e6,
                access="shuffle")
    args.update(kwargs)
    with pytest.raises(PlacementError, match=match.replace("(", r"\(").replace(")", r"\)")):
        plan_placement(**args)


def test_rates_are_finite_and_consistent():
    for h in (workstation_2020(), h100_sxm()):
        for access in ("sequential", "shuffle"):
            df = compare_placements(h, 0.7 * h.tier("ram").capacity_bytes, 256e3, access)
            assert np.isfinite(df[["samples_per_s", "epoch_s", "read_Bps"]].to_numpy()).all()
            assert np.allclose(df["read_Bps"], df["samples_per_s"] * 256e3)
            assert (df["first_epoch_s"] >= df["epoch_s"] * (1 - 1e-12)).all()
            assert math.isclose(df["n_samples"].iloc[0], 0.7 * h.tier("ram").capacity_bytes / 256e3)
