import json
import os

import numpy as np
import pandas as pd
import pytest

from experiments import probes
from experiments.configs import ConfigError, apply_overrides
from memsim.hierarchy import Hierarchy


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("probe-tmp")
    cfg = apply_overrides(probes.smoke(), {"tmp_dir": str(tmp)})
    raw = probes.run(cfg)
    return cfg, raw, tmp


def test_smoke_rows_are_tidy_and_cover_every_probe(smoke_run):
    cfg, raw, tmp = smoke_run
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
    assert set(n) == set(cfg.matmul_sizes)
    np.testing.assert_allclose(mm["flop_rate"], 2 * n**3 / mm["seconds"])
    # every size of every transfer probe is measured `repeats` times
    per = ok[~ok["probe"].str.startswith("matmul")].groupby(["probe", "size_bytes"]).size()
    assert (per == cfg.repeats).all()
    sizes = sorted(ok.loc[ok["probe"] == "ram_copy", "size_bytes"].unique())
    assert sizes[0] == 4096 and sizes[-1] == cfg.max_bytes
    assert (raw.loc[raw["phase"] == "warmup", "status"] == "ok").all()
    assert not any(p.name.startswith("memsim-probe-") for p in tmp.iterdir()), "temp dir left behind"


def test_medians_are_per_probe_and_size(smoke_run):
    cfg, raw, _ = smoke_run
    med = probes.medians(raw)
    ram = med[med["probe"] == "ram_copy"].set_index("size_bytes")
    ok = raw[(raw["probe"] == "ram_copy") & (raw["phase"] == "measure")]
    for size, g in ok.groupby("size_bytes"):
        assert ram.loc[size, "seconds_median"] == pytest.approx(g["seconds"].median())
        assert ram.loc[size, "repeats"] == cfg.repeats
    assert "h2d_pinned" not in set(med["probe"]) or raw["platform"].iloc[0] != "cpu"


def test_pinned_host_is_not_measured_on_cpu_with_a_reason(smoke_run):
    _, raw, _ = smoke_run
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
    _, raw, _ = smoke_run
    cold = raw[(raw["probe"] == "file_read_cold") & (raw["phase"] == "measure")]
    assert cold["note"].str.contains("POSIX_FADV_DONTNEED").all()
    assert (raw["phase"] == "first_read").sum() == 1


def test_fit_links_gives_alpha_beta_r2_per_link(smoke_run):
    _, raw, _ = smoke_run
    fits = probes.fit_links(raw)
    assert list(fits["probe"]) == list(probes.PROBES)
    for col in ("alpha_s", "beta_Bps", "r2", "r2_log", "n_points", "method", "status", "src", "dst",
                "alpha_stderr_s", "beta_ci_low_Bps", "beta_ci_high_Bps", "platform"):
        assert col in fits.columns, col
    ok = fits[fits["status"] == "ok"]
    transfers = ok[ok["x_unit"] == "bytes"]
    assert len(transfers) >= 5
    assert (transfers["beta_Bps"] > 0).all() and (transfers["alpha_s"] >= 0).all()
    assert transfers["r2"].notna().all()
    flops = ok[ok["x_unit"] == "flop"]
    assert (flops["flop_rate"] > 0).all() and flops["beta_Bps"].isna().all()
    assert fits.loc[fits["probe"] == "h2d_pinned", "status"].iloc[0] in ("not measured", "ok")
    # the measured machine as a memsim hierarchy
    h = Hierarchy.from_probes(fits)
    assert {"disk", "page_cache", "ram", "device"} <= {t.name for t in h.tiers}


def synthetic_raw(alpha, bw, noise=0.03, outliers=0.1, repeats=5, seed=0, probe="file_read_cold"):
    rng = np.random.default_rng(seed)
    n = np.repeat(4096 * 4.0 ** np.arange(9), repeats)
    t = (alpha + n / bw) * np.exp(rng.normal(0, noise, n.size))
    bad = rng.random(n.size) < outliers
    t[bad] *= rng.uniform(2, 5, bad.sum())  # a noisy neighbour: some runs 2-5x slower
    return pd.DataFrame({"probe": probe, "phase": "measure", "status": "ok", "size_bytes": n,
                         "seconds": t, "flops": np.nan, "note": ""}), bad.sum()


@pytest.mark.parametrize("alpha,bw", [(50e-6, 2e9), (1e-6, 15e9), (2e-3, 100e6)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_recovers_alpha_and_bandwidth_despite_noise_and_outliers(alpha, bw, seed):
    raw, n_bad = synthetic_raw(alpha, bw, seed=seed)
    assert n_bad >= 1
    f = probes.fit_links(raw).iloc[0]
    assert f["status"] == "ok"
    assert f["beta_Bps"] == pytest.approx(bw, rel=0.04)
    assert f["alpha_s"] == pytest.approx(alpha, rel=0.15)
    assert f["beta_ci_low_Bps"] <= bw * 1.04 and f["beta_ci_high_Bps"] >= bw * 0.96
    assert f["n_points"] == 45 and f["n_sizes"] == 9


def test_fit_without_noise_is_exact():
    raw, _ = synthetic_raw(20e-6, 4e9, noise=0.0, outliers=0.0)
    f = probes.fit_links(raw).iloc[0]
    assert f["beta_Bps"] == pytest.approx(4e9, rel=1e-9)
    assert f["alpha_s"] == pytest.approx(20e-6, rel=1e-6)
    assert f["r2"] == pytest.approx(1.0) and f["r2_log"] == pytest.approx(1.0)


def test_too_few_sizes_is_not_fitted_and_not_measured_stays_so():
    raw, _ = synthetic_raw(1e-5, 1e9, outliers=0.0)
    two = raw[raw["size_bytes"] <= 16384]
    nm = pd.DataFrame({"probe": ["h2d_pinned"], "phase": ["measure"], "status": ["not measured"],
                       "size_bytes": [np.nan], "seconds": [np.nan], "flops": [np.nan],
                       "note": ["platform cpu: no bus"]})
    fits = probes.fit_links(pd.concat([two, nm], ignore_index=True))
    by = fits.set_index("probe")
    assert by.loc["file_read_cold", "status"] == "not fitted"
    assert "needs >= 3" in by.loc["file_read_cold", "note"]
    assert by.loc["h2d_pinned", "status"] == "not measured"
    assert by.loc["h2d_pinned", "note"] == "platform cpu: no bus"
    assert np.isnan(by.loc["h2d_pinned", "beta_Bps"])


def test_fit_bad_inputs_raise():
    raw, _ = synthetic_raw(1e-5, 1e9)
    nan = raw.copy()
    nan.loc[3, "seconds"] = np.nan
    with pytest.raises(ValueError, match="NaN in an 'ok' row: probe='file_read_cold'"):
        probes.fit_links(nan)
    zero = raw.copy()
    zero.loc[0, "seconds"] = 0.0
    with pytest.raises(ValueError, match="seconds=0.0 <= 0"):
        probes.fit_links(zero)
    with pytest.raises(ValueError, match=r"lack column\(s\) \['seconds'\]"):
        probes.fit_links(raw.drop(columns=["seconds"]))
    with pytest.raises(ValueError, match="unknown probe"):
        probes.fit_links(raw.assign(probe="tape_read"))
    with pytest.raises(TypeError, match="pass the DataFrame"):
        probes.fit_links({"probe": []})


@pytest.mark.parametrize("over,match", [
    ({"probes": "ram_copy,tape"}, "unknown probe"),
    ({"min_bytes": "1000"}, "min_bytes=1000"),
    ({"max_bytes": "1024", "min_bytes": "4096"}, "max_bytes=1024"),
    ({"repeats": "0"}, "repeats=0"),
    ({"memory_fraction": "2"}, "memory_fraction=2.0"),
    ({"cold_method": "dd"}, "cold_method='dd'"),
    ({"tmp_dir": "/no/such/dir"}, "tmp_dir='/no/such/dir'"),
    ({"repeat": "3"}, "unknown config key 'repeat'"),
])
def test_config_errors_name_the_key(over, match):
    with pytest.raises(ConfigError, match=match):
        apply_overrides(probes.quick(), over)


def test_presets_are_ordered_by_effort():
    s, q, f = probes.smoke(), probes.quick(), probes.full()
    assert q.max_bytes >= 256 * 2**20 and q.min_bytes == 4096
    assert s.max_bytes < q.max_bytes <= f.max_bytes and s.repeats <= q.repeats <= f.repeats
    assert probes.sizes(q, cap_bytes=10**12)[-1] == 256 * 2**20
    assert probes.sizes(q, cap_bytes=100 * 2**20)[-1] == 64 * 2**20  # capped by free memory


def test_interrupt_cleans_up_the_temp_dir(tmp_path):
    cfg = apply_overrides(probes.smoke(), {"tmp_dir": str(tmp_path), "probes": "file_read_warm"})

    def interrupt(_msg):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        probes.run(cfg, log=interrupt)
    assert list(tmp_path.iterdir()) == []


def test_o_direct_is_measured_or_explained(tmp_path):
    cfg = apply_overrides(probes.smoke(), {"tmp_dir": str(tmp_path), "probes": "file_read_cold",
                                           "cold_method": "o_direct", "repeats": "1"})
    raw = probes.run(cfg)
    assert set(raw["probe"]) == {"file_read_cold"}
    measured = raw[raw["phase"] == "measure"]
    assert len(measured) and measured["note"].str.contains("O_DIRECT").all()
    assert list(tmp_path.iterdir()) == []


def test_write_is_all_or_nothing_and_never_overwrites(tmp_path):
    raw, _ = synthetic_raw(1e-5, 1e9)
    fits = probes.fit_links(raw)
    out = probes.write(tmp_path / "run1", raw, fits, probes.quick())
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "fits.csv", "rows.csv"]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["experiment"] == "probe" and cfg["config"]["repeats"] == 5
    back = pd.read_csv(out / "fits.csv")
    assert back["beta_Bps"].iloc[0] == pytest.approx(fits["beta_Bps"].iloc[0])
    assert len(pd.read_csv(out / "rows.csv")) == len(raw)
    with pytest.raises(FileExistsError, match="run1"):
        probes.write(out, raw, fits, probes.quick())

    class Broken:
        def to_csv(self, *a, **k):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        probes.write(tmp_path / "run2", raw, Broken(), probes.quick())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run1"]  # no partial folder left
    with pytest.raises(ValueError, match="pass cfg="):
        probes.write(tmp_path / "run3", raw, fits)


def test_write_recovers_the_config_from_the_rows(smoke_run, tmp_path):
    cfg, raw, _ = smoke_run
    out = probes.write(tmp_path / "r", raw, probes.fit_links(raw))
    saved = json.loads((out / "config.json").read_text())
    assert saved["config"]["max_bytes"] == cfg.max_bytes
    assert saved["environment"]["platform"] == raw["platform"].iloc[0]


def test_cli_rejects_unknown_keys_before_measuring(capsys):
    with pytest.raises(SystemExit) as e:
        probes.main(["--preset", "smoke", "--repeatz=3"])
    assert e.value.code == 2
    assert "unknown config key 'repeatz'" in capsys.readouterr().err


def test_cli_refuses_an_existing_output_folder(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "rows.csv").write_text("")
    with pytest.raises(FileExistsError):
        probes.main(["--preset", "smoke", "--out", str(tmp_path / "x")])
    assert os.listdir(tmp_path / "x") == ["rows.csv"]


@pytest.mark.latest
def test_experiment_writes_the_pinned_vs_pageable_table(tmp_path, capsys):
    import jax
    from experiments import compat
    cfg = apply_overrides(probes.smoke(), {"probes": "h2d_pageable,h2d_pinned", "tmp_dir": str(tmp_path)})
    assert probes.experiment_main(cfg, "smoke", out=str(tmp_path / "run")) == 0
    out = tmp_path / "run"
    files = json.loads((out / "config.json").read_text())["files"]
    assert files == ["rows.csv", "fits.csv", "pinned_vs_pageable.csv"]
    table = pd.read_csv(out / "pinned_vs_pageable.csv")
    raw = pd.read_csv(out / "rows.csv")
    measured = raw[(raw.probe == "h2d_pageable") & (raw.status == "ok")]
    if "pinned_host" in compat.memory_kinds(jax.devices()[0]):
        assert sorted(table["size_bytes"]) == sorted(measured["size_bytes"].unique())
        assert (table["status"] == "ok").all() and "pinned vs pageable" in capsys.readouterr().out
    else:
        assert (table["status"] == "not measured").all()
    with pytest.raises(ValueError, match="rows"):
        probes.write(tmp_path / "bad", raw, probes.fit_links(raw), cfg, {"rows": table})
