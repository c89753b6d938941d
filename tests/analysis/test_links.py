"""analysis.links: the α-β fit of the probes' raw rows, its table, and ``python -m analysis links``."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import links
from analysis.__main__ import main as analysis_main
from experiments.probes import PROBES
from memsim.knobs import ConfigError

# probe rows and fits.csv committed by a 2-core CPU study before the fitting moved to analysis.links
COMMITTED = Path(__file__).resolve().parents[1] / "data" / "probe_golden"


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
    f = links.fit_links(raw).iloc[0]
    assert f["status"] == "ok"
    assert f["beta_Bps"] == pytest.approx(bw, rel=0.04)
    assert f["alpha_s"] == pytest.approx(alpha, rel=0.15)
    assert f["beta_ci_low_Bps"] <= bw * 1.04 and f["beta_ci_high_Bps"] >= bw * 0.96
    assert f["n_points"] == 45 and f["n_sizes"] == 9


def test_fit_without_noise_is_exact():
    raw, _ = synthetic_raw(20e-6, 4e9, noise=0.0, outliers=0.0)
    f = links.fit_links(raw).iloc[0]
    assert f["beta_Bps"] == pytest.approx(4e9, rel=1e-9)
    assert f["alpha_s"] == pytest.approx(20e-6, rel=1e-6)
    assert f["r2"] == pytest.approx(1.0) and f["r2_log"] == pytest.approx(1.0)


def test_matmul_rows_are_fitted_against_flops():
    n = np.repeat([128.0, 256.0, 512.0, 1024.0], 3)
    raw = pd.DataFrame({"probe": "matmul_fp32", "phase": "measure", "status": "ok",
                        "size_bytes": 12 * n * n, "flops": 2 * n**3, "seconds": 1e-4 + 2 * n**3 / 5e10})
    f = links.fit_links(raw).iloc[0]
    assert f["x_unit"] == "flop" and np.isnan(f["beta_Bps"])
    assert f["flop_rate"] == pytest.approx(5e10, rel=1e-9) and f["alpha_s"] == pytest.approx(1e-4, rel=1e-6)


def test_too_few_sizes_is_not_fitted_and_not_measured_stays_so():
    raw, _ = synthetic_raw(1e-5, 1e9, outliers=0.0)
    two = raw[raw["size_bytes"] <= 16384]
    nm = pd.DataFrame({"probe": ["h2d_pinned"], "phase": ["measure"], "status": ["not measured"],
                       "size_bytes": [np.nan], "seconds": [np.nan], "flops": [np.nan],
                       "note": ["platform cpu: no bus"]})
    fits = links.fit_links(pd.concat([two, nm], ignore_index=True))
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
        links.fit_links(nan)
    zero = raw.copy()
    zero.loc[0, "seconds"] = 0.0
    with pytest.raises(ValueError, match="seconds=0.0 <= 0"):
        links.fit_links(zero)
    with pytest.raises(ValueError, match=r"lack column\(s\) \['seconds'\]"):
        links.fit_links(raw.drop(columns=["seconds"]))
    with pytest.raises(ValueError, match="unknown probe"):
        links.fit_links(raw.assign(probe="tape_read"))
    with pytest.raises(TypeError, match="pass the DataFrame"):
        links.fit_links({"probe": []})


def test_fitting_the_committed_rows_reproduces_the_committed_fits():
    # fits.csv was written by the fitting code as it stood in experiments.probes; the same rows must
    # give the same table (every column, to the last digit CSV keeps).
    fits = links.fit_links(pd.read_csv(COMMITTED / "rows.csv"))
    committed = pd.read_csv(COMMITTED / "fits.csv")
    assert list(fits["probe"]) == list(PROBES)
    again = pd.read_csv(pd.io.common.StringIO(fits.to_csv(index=False)))
    pd.testing.assert_frame_equal(again, committed)
    # and through the loader of a probe folder (dtypes as results.read_csv_rows gives them)
    loaded = links.fit_links(links.load_rows(COMMITTED))
    np.testing.assert_array_equal(loaded["beta_Bps"].to_numpy(float), committed["beta_Bps"].to_numpy(float))


def test_cli_prints_the_links_of_a_probe_folder_and_writes_the_table(tmp_path, capsys):
    assert analysis_main(["links", str(COMMITTED), "--csv", str(tmp_path / "f" / "fits.csv")]) == 0
    out = capsys.readouterr().out
    committed = pd.read_csv(COMMITTED / "fits.csv").set_index("probe")
    line = next(ln for ln in out.splitlines() if ln.startswith("ram_copy "))
    assert f"{committed.loc['ram_copy', 'beta_Bps']:.3g}" in line and line.endswith("ok")
    assert next(ln for ln in out.splitlines() if ln.startswith("h2d_pinned ")).endswith("not measured")
    assert "8 of 9 links fitted" in out
    written = pd.read_csv(tmp_path / "f" / "fits.csv")
    assert written["beta_Bps"].to_numpy(float)[:4] == pytest.approx(committed["beta_Bps"].to_numpy(float)[:4])


def test_cli_on_a_folder_without_rows_is_a_one_line_error(tmp_path, capsys):
    assert analysis_main(["links", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"probe_dir='{tmp_path}'" in err and "rows.csv" in err
    with pytest.raises(ConfigError, match="no rows.csv there"):
        links.load_rows(tmp_path)
