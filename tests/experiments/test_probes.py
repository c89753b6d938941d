import dataclasses
import errno
import json
import os

import numpy as np
import pandas as pd
import pytest

from analysis.links import fit_links, medians
from experiments import compat, probes
from experiments.__main__ import main as experiments_main
from experiments.configs import ConfigError, apply_overrides
from experiments.results import read_csv_rows
from memsim.hierarchy import Hierarchy


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("probe-tmp")
    out = tmp_path_factory.mktemp("probe-out") / "run"
    cfg = apply_overrides(probes.smoke(), {"tmp_dir": str(tmp)})
    raw = probes.run(cfg, out_dir=out)
    return cfg, raw, tmp, out


def o_direct_opens(folder) -> bool:
    """Whether this filesystem lets a file in ``folder`` be opened with O_DIRECT."""
    path = os.path.join(folder, "o_direct_check")
    with open(path, "wb") as f:
        f.write(b"\0" * 4096)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return False
    finally:
        os.remove(path)
    os.close(fd)
    return True


def test_smoke_rows_are_tidy_and_cover_every_probe(smoke_run):
    cfg, raw, tmp, _ = smoke_run
    for col in ("probe", "src", "dst", "link", "phase", "size_bytes", "seconds", "bandwidth_Bps",
                "repeat", "status", "note", "platform", "device_kind", "cpu_count", "jax_version",
                "ram_total_bytes", "disk_total_bytes", "git_commit", "repeats", "max_bytes"):
        assert col in raw.columns, col
    assert set(raw["probe"]) == set(probes.PROBES)
    assert set(raw["status"]) <= {"ok", "not measured"}
    ok = raw[(raw["status"] == "ok") & (raw["phase"] == "measure")]
    assert (ok["seconds"] > 0).all()
    mm = ok[ok["probe"].str.startswith("matmul")]
    tr = ok[~ok["probe"].str.startswith("matmul")]
    np.testing.assert_allclose(tr["bandwidth_Bps"], tr["size_bytes"] / tr["seconds"])
    assert tr["flop_rate"].isna().all() and mm["bandwidth_Bps"].isna().all()
    n = np.round(np.cbrt(mm["flops"] / 2))
    assert set(n) == set(cfg.matmul_sizes_on(raw["platform"].iloc[0]))
    np.testing.assert_allclose(mm["flop_rate"], 2 * n**3 / mm["seconds"])
    # every size of every transfer probe is measured `repeats` times
    per = ok[~ok["probe"].str.startswith("matmul")].groupby(["probe", "size_bytes"]).size()
    assert (per == cfg.repeats).all()
    sizes = sorted(ok.loc[ok["probe"] == "ram_copy", "size_bytes"].unique())
    assert sizes[0] == 4096 and sizes[-1] == cfg.max_bytes
    assert (raw.loc[raw["phase"] == "warmup", "status"] == "ok").all()
    assert not any(p.name.startswith("memsim-probe-") for p in tmp.iterdir()), "temp dir left behind"


def test_rows_are_appended_to_rows_csv_as_they_were_measured(smoke_run):
    _, raw, _, out = smoke_run
    assert sorted(p.name for p in out.iterdir()) == ["rows.columns.json", "rows.csv"]
    back = read_csv_rows(out / "rows.csv")
    assert len(back) == len(raw) and list(back.columns) == list(raw.columns)
    assert list(back["probe"]) == list(raw["probe"]) and list(back["phase"]) == list(raw["phase"])
    np.testing.assert_array_equal(back["seconds"].to_numpy(float), raw["seconds"].to_numpy(float))
    # analysis fits the file exactly as it fits the rows in memory
    a, b = fit_links(raw), fit_links(back)
    for col in ("status", "n_points"):
        assert list(a[col]) == list(b[col])
    np.testing.assert_array_equal(a["beta_Bps"].to_numpy(float), b["beta_Bps"].to_numpy(float))
    np.testing.assert_array_equal(a["alpha_s"].to_numpy(float), b["alpha_s"].to_numpy(float))


def test_medians_are_per_probe_and_size(smoke_run):
    cfg, raw, _, _ = smoke_run
    med = medians(raw)
    ram = med[med["probe"] == "ram_copy"].set_index("size_bytes")
    ok = raw[(raw["probe"] == "ram_copy") & (raw["phase"] == "measure")]
    for size, g in ok.groupby("size_bytes"):
        assert ram.loc[size, "seconds_median"] == pytest.approx(g["seconds"].median())
        assert ram.loc[size, "repeats"] == cfg.repeats
    pinned_measured = raw.loc[raw["probe"] == "h2d_pinned", "status"].eq("ok").any()
    assert ("h2d_pinned" in set(med["probe"])) == pinned_measured


def test_pinned_host_is_not_measured_on_cpu_with_a_reason(smoke_run):
    _, raw, _, _ = smoke_run
    if raw["platform"].iloc[0] != "cpu":
        pytest.skip("the CPU-specific row only appears on a CPU platform")
    row = raw[raw["probe"] == "h2d_pinned"]
    assert len(row) == 1 and row["status"].iloc[0] == "not measured"
    assert np.isnan(row["seconds"].iloc[0]) and np.isnan(row["bandwidth_Bps"].iloc[0])
    assert "platform cpu" in row["note"].iloc[0]


@pytest.mark.latest
def test_pinned_vs_pageable_runs_the_pinned_host_path_for_real():
    import jax
    from experiments import compat
    dev = jax.devices()[0]
    if "pinned_host" not in compat.memory_kinds(dev):
        pytest.skip(f"platform {dev.platform}: jax {jax.__version__} exposes no pinned_host memory kind here "
                    f"({compat.memory_kinds(dev)}), so there is no pinned path to run")
    df = probes.pinned_vs_pageable([4096, 65536], repeats=3, warmup=1)
    assert list(df.columns) == list(probes.PINNED_COLUMNS) and list(df["size_bytes"]) == [4096, 65536]
    assert (df["status"] == "ok").all() and (df["repeats"] == 3).all()
    for col in ("pageable_s", "staging_s", "pinned_s"):
        assert (df[col] > 0).all(), col
    np.testing.assert_allclose(df["pinned_speedup"], df["pageable_s"] / df["pinned_s"])
    np.testing.assert_allclose(df["staged_speedup"], df["pageable_s"] / (df["staging_s"] + df["pinned_s"]))
    np.testing.assert_allclose(df["pinned_Bps"], df["size_bytes"] / df["pinned_s"])
    if dev.platform == "cpu":
        assert df["note"].str.contains("RAM copy").all()
    # the staged array really lives in pinned_host and the transfer lands in device memory, intact
    from jax.sharding import SingleDeviceSharding
    host = np.arange(1000, dtype=np.float32)
    p = jax.device_put(host, SingleDeviceSharding(dev, memory_kind="pinned_host"))
    x = jax.device_put(p, SingleDeviceSharding(dev, memory_kind="device"))
    assert (p.sharding.memory_kind, x.sharding.memory_kind) == ("pinned_host", "device")
    np.testing.assert_array_equal(np.asarray(x), host)


class _NoPinnedDevice:
    platform, device_kind = "fakegpu", "Fake GPU"

    def addressable_memories(self):
        raise NotImplementedError("no memories API")


@pytest.mark.latest
def test_pinned_vs_pageable_without_pinned_memory_is_not_measured_with_the_reason():
    df = probes.pinned_vs_pageable([4096], device=_NoPinnedDevice())
    assert len(df) == 1 and df["status"].iloc[0] == "not measured"
    assert "no 'pinned_host' memory kind" in df["note"].iloc[0] and np.isnan(df["pinned_s"].iloc[0])
    assert "not measured" in probes.format_pinned(df)


@pytest.mark.parametrize("kw, needle", [(dict(sizes_bytes=[]), "sizes_bytes=[]"),
                                        (dict(sizes_bytes=[0]), "sizes_bytes=[0]"),
                                        (dict(sizes_bytes=[8], repeats=0), "repeats=0")])
def test_pinned_vs_pageable_rejects_bad_arguments(kw, needle):
    with pytest.raises(ConfigError) as e:
        probes.pinned_vs_pageable(**kw)
    assert needle in str(e.value)


def test_cold_read_note_says_how_the_cache_was_bypassed(smoke_run):
    _, raw, _, _ = smoke_run
    cold = raw[(raw["probe"] == "file_read_cold") & (raw["phase"] == "measure")]
    assert cold["note"].str.contains("POSIX_FADV_DONTNEED").all()
    assert (raw["phase"] == "first_read").sum() == 1


def test_fit_links_gives_alpha_beta_r2_per_link(smoke_run):
    import jax
    _, raw, _, _ = smoke_run
    fits = fit_links(raw)
    assert list(fits["probe"]) == list(probes.PROBES)
    for col in ("alpha_s", "beta_Bps", "r2", "r2_log", "n_points", "method", "status", "src", "dst",
                "alpha_stderr_s", "beta_ci_low_Bps", "beta_ci_high_Bps", "platform"):
        assert col in fits.columns, col
    ok = fits[fits["status"] == "ok"]
    transfers = ok[ok["x_unit"] == "bytes"]
    # the host-to-device sweep copies on every run: a buffer JAX could alias measured no slope
    assert not raw["note"].astype(str).str.contains("aliased the numpy").any()
    assert len(transfers) >= 5
    assert (transfers["beta_Bps"] > 0).all() and (transfers["alpha_s"] >= 0).all()
    assert transfers["r2"].notna().all()
    flops = ok[ok["x_unit"] == "flop"]
    assert (flops["flop_rate"] > 0).all() and flops["beta_Bps"].isna().all()
    # pinned host-to-device: measured exactly where there is a bus and a pinned_host memory kind
    dev = jax.devices()[0]
    pinned_possible = dev.platform != "cpu" and "pinned_host" in compat.memory_kinds(dev)
    assert fits.loc[fits["probe"] == "h2d_pinned", "status"].iloc[0] == ("ok" if pinned_possible else "not measured")
    # the measured machine as a memsim hierarchy: a tier for each defining probe whose link fitted
    # (on a loaded machine a smoke-sized sweep may leave one "not fitted"; then its tier is left out)
    h = Hierarchy.from_probes(fits)
    fitted = set(ok["probe"])
    want = {tier for probe, tier in (("ram_copy", "ram"), ("file_read_cold", "disk"), ("device_copy", "device"))
            if probe in fitted}
    if "ram" in want:
        want |= {tier for probe, tier in (("file_read_warm", "page_cache"), ("h2d_pinned", "pinned_host"))
                 if probe in fitted}
    assert {t.name for t in h.tiers} == want and "ram" in want


@pytest.mark.parametrize("over,match", [
    ({"probes": "ram_copy,tape"}, "unknown probe"),
    ({"min_bytes": "1000"}, "min_bytes=1000"),
    ({"max_bytes": "1024", "min_bytes": "4096"}, "max_bytes=1024"),
    ({"repeats": "0"}, "repeats=0"),
    ({"memory_fraction": "2"}, "memory_fraction=2.0"),
    ({"cold_method": "dd"}, "cold_method='dd'"),
    ({"tmp_dir": "/no/such/dir"}, "tmp_dir='/no/such/dir'"),
    ({"repeat": "3"}, "unknown config key 'repeat'"),
    ({"accelerator_matmul_sizes": "1024,0"}, "accelerator_matmul_sizes='1024,0'"),
])
def test_config_errors_name_the_key(over, match):
    with pytest.raises(ConfigError, match=match):
        apply_overrides(probes.quick(), over)


def test_presets_sweep_what_they_promise():
    # each preset's sizes: min_bytes · size_factor^k up to max_bytes when memory allows, and a
    # smaller preset measures no size and no matmul that a larger one leaves out of its range
    big = 10**13
    sweeps = {name: probes.sizes(probes.PRESETS[name](), cap_bytes=big) for name in ("smoke", "quick", "full")}
    for name, sz in sweeps.items():
        cfg = probes.PRESETS[name]()
        assert sz[0] == cfg.min_bytes and sz[-1] == cfg.max_bytes
        assert all(b == a * cfg.size_factor for a, b in zip(sz, sz[1:]))
    assert set(sweeps["smoke"]) <= set(sweeps["quick"]) <= set(sweeps["full"])
    s, q, f = probes.smoke(), probes.quick(), probes.full()
    assert s.repeats <= q.repeats <= f.repeats
    assert max(s.matmul_sizes) <= max(q.matmul_sizes) <= max(f.matmul_sizes)
    assert max(s.accelerator_matmul_sizes) <= max(q.accelerator_matmul_sizes) <= max(f.accelerator_matmul_sizes)
    # an accelerator's matmuls are larger than the CPU's: n <= 1024 was launch-bound on an H200
    for c in (q, f):
        assert c.matmul_sizes_on("cpu") == c.matmul_sizes
        assert min(c.matmul_sizes_on("gpu")) >= 1024 and c.matmul_sizes_on("gpu") == c.matmul_sizes_on("tpu")
    # the quick sweep reaches past a 64 MiB last-level cache (4 KiB … 256 MiB, as its docstring says)
    assert sweeps["quick"][0] == 4 * 2**10 and sweeps["quick"][-1] == 256 * 2**20


@pytest.mark.parametrize("cap", [100 * 2**20, 4096, 1])
def test_sizes_are_capped_by_free_memory_but_keep_the_smallest(cap):
    q = probes.quick()
    sz = probes.sizes(q, cap_bytes=cap)
    assert sz[0] == q.min_bytes
    assert sz[-1] <= max(cap, q.min_bytes) and sz[-1] * q.size_factor > min(cap, q.max_bytes)


def test_interrupt_cleans_up_the_temp_dir(tmp_path):
    cfg = apply_overrides(probes.smoke(), {"tmp_dir": str(tmp_path), "probes": "file_read_warm"})

    def interrupt(_msg):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        probes.run(cfg, log=interrupt)
    assert list(tmp_path.iterdir()) == []


def test_o_direct_cold_reads_are_measured_where_the_filesystem_allows_it(tmp_path):
    cfg = apply_overrides(probes.smoke(), {"tmp_dir": str(tmp_path), "probes": "file_read_cold",
                                           "cold_method": "o_direct", "repeats": "1"})
    works = o_direct_opens(tmp_path)
    raw = probes.run(cfg)
    assert set(raw["probe"]) == {"file_read_cold"}
    measured = raw[raw["phase"] == "measure"]
    if works:  # this filesystem takes O_DIRECT: every size is measured through it
        assert (measured["status"] == "ok").all()
        assert sorted(measured["size_bytes"]) == probes.sizes(cfg, cap_bytes=10**13)
        assert measured["note"].str.contains("page cache bypassed with O_DIRECT").all()
    else:  # it does not (tmpfs, some overlays): one row says so and nothing is timed
        assert list(measured["status"]) == ["not measured"] and "O_DIRECT open failed" in measured["note"].iloc[0]
    assert list(tmp_path.iterdir()) == []


def test_o_direct_refused_is_one_not_measured_row_with_the_way_out(tmp_path, monkeypatch):
    real_open = os.open

    def no_direct(path, flags, *a, **k):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", no_direct)
    cfg = apply_overrides(probes.smoke(), {"tmp_dir": str(tmp_path), "probes": "file_read_cold,file_read_warm",
                                           "cold_method": "o_direct", "repeats": "1"})
    raw = probes.run(cfg)
    cold = raw[raw["probe"] == "file_read_cold"]
    assert len(cold) == 1 and cold["status"].iloc[0] == "not measured" and np.isnan(cold["seconds"].iloc[0])
    note = cold["note"].iloc[0]
    assert "O_DIRECT open failed" in note and "Invalid argument" in note and "cold_method=fadvise" in note
    # the other file probe still runs
    warm = raw[(raw["probe"] == "file_read_warm") & (raw["phase"] == "measure")]
    assert len(warm) and (warm["status"] == "ok").all()
    fits = fit_links(raw).set_index("probe")
    assert fits.loc["file_read_cold", "status"] == "not measured" and "O_DIRECT" in fits.loc["file_read_cold", "note"]


def test_an_interrupted_run_keeps_the_rows_of_the_probes_it_finished(tmp_path):
    cfg = apply_overrides(probes.smoke(), {"tmp_dir": str(tmp_path), "probes": "file_read_warm,ram_copy,d2h"})

    def stop_after_ram(msg):
        if msg.startswith("ram probes done"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        probes.run(cfg, log=stop_after_ram, out_dir=tmp_path / "run")
    kept = read_csv_rows(tmp_path / "run" / "rows.csv")
    assert set(kept["probe"]) == {"file_read_warm", "ram_copy"}
    ok = kept[(kept["phase"] == "measure") & (kept["status"] == "ok")]
    assert (ok.groupby(["probe", "size_bytes"]).size() == cfg.repeats).all()


def _cli(tmp_path, *args):
    return experiments_main(["probe", "--preset", "smoke", f"--results_root={tmp_path / 'results'}", *args])


def test_cli_rejects_unknown_keys_before_measuring(tmp_path, capsys):
    assert _cli(tmp_path, "--repeatz=3") == 2
    assert "unknown config key 'repeatz'" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_cli_refuses_a_run_id_that_has_rows_before_measuring(tmp_path, capsys):
    d = tmp_path / "results" / "probe" / "x"
    d.mkdir(parents=True)
    (d / "rows.csv").write_text("probe\n")
    assert _cli(tmp_path, "--run_id=x") == 2
    assert "not resumed" in capsys.readouterr().err
    assert os.listdir(d) == ["rows.csv"] and (d / "rows.csv").read_text() == "probe\n"


def test_cli_interrupted_keeps_the_finished_probes_and_exits_130(tmp_path, monkeypatch, capsys):
    real_run = probes.run

    def run_until_ram_is_done(cfg, log=None, out_dir=None):
        def stop(msg):
            if msg.startswith("ram probes done"):
                raise KeyboardInterrupt
        return real_run(cfg, log=stop, out_dir=out_dir)

    monkeypatch.setattr(probes, "run", run_until_ram_is_done)
    assert _cli(tmp_path, "--probes=ram_copy,d2h", f"--tmp_dir={tmp_path}", "--run_id=i") == 130
    out = tmp_path / "results" / "probe" / "i"
    assert set(read_csv_rows(out / "rows.csv")["probe"]) == {"ram_copy"}
    assert not (out / "pinned_vs_pageable.csv").exists() and "interrupted (SIGINT)" in capsys.readouterr().err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("memsim-probe-")]


@pytest.mark.latest
def test_cli_writes_rows_config_and_the_pinned_vs_pageable_table(tmp_path, capsys):
    import jax
    assert _cli(tmp_path, "--probes=h2d_pageable,h2d_pinned", f"--tmp_dir={tmp_path}", "--run_id=r") == 0
    out = tmp_path / "results" / "probe" / "r"
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "pinned_vs_pageable.columns.json",
                                                      "pinned_vs_pageable.csv", "rows.columns.json", "rows.csv"]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["experiment"] == "probe" and cfg["preset"] == "smoke"
    assert cfg["config"]["probes"] == "h2d_pageable,h2d_pinned" and cfg["config"]["repeats"] == probes.smoke().repeats
    assert cfg["files"] == ["rows.csv", "pinned_vs_pageable.csv"]
    table = read_csv_rows(out / "pinned_vs_pageable.csv")
    raw = read_csv_rows(out / "rows.csv")
    measured = raw[(raw.probe == "h2d_pageable") & (raw.status == "ok")]
    printed = capsys.readouterr().out
    assert f"fit the links: python -m analysis links {out}" in printed
    if "pinned_host" in compat.memory_kinds(jax.devices()[0]):
        assert sorted(table["size_bytes"]) == sorted(measured["size_bytes"].unique())
        assert (table["status"] == "ok").all() and "pinned vs pageable" in printed
    else:
        assert (table["status"] == "not measured").all()


def test_the_study_appends_raw_probe_rows_and_keeps_them_when_resumed(tmp_path, capsys):
    from experiments import study
    cfg = study.PRESETS["smoke"]()
    assert cfg.probe_preset == "smoke"
    raw = study.run_probes(cfg, tmp_path)
    d = tmp_path / "probe"
    assert sorted(p.name for p in d.iterdir()) == ["config.json", "rows.columns.json", "rows.csv"]
    back = read_csv_rows(d / "rows.csv")
    assert len(back) == len(raw) and set(back["probe"]) == set(probes.PROBES)
    saved = json.loads((d / "config.json").read_text())
    assert saved["config"]["max_bytes"] == probes.smoke().max_bytes and saved["files"] == ["rows.csv"]
    again = study.run_probes(cfg, tmp_path)  # a resumed study measures nothing new
    assert "kept" in capsys.readouterr().out and len(again) == len(raw)
    assert len(read_csv_rows(d / "rows.csv")) == len(raw)
    assert study.run_probes(dataclasses.replace(cfg, probe_preset="none"), tmp_path / "other") is None
    assert not (tmp_path / "other").exists()
