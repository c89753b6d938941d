"""``python -m analysis scaling``: prints the fit table, writes figures and tables."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pandas as pd
import pytest

from analysis import __main__ as cli
from analysis.scaling import plots as scaling_plots

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "gadre2024" / "final_losses.csv"
PNG = b"\x89PNG\r\n\x1a\n"


def test_cli_prints_the_fit_and_writes_figures(tmp_path, capsys):
    out = tmp_path / "fit"
    status = cli.main(
        ["scaling", str(DATA), "--n", "params", "--d", "tokens", "--loss", "loss_openlm",
         "--query", "dataset == 'rpj'", "--bootstrap", "8", "--seed", "3", "--out", str(out)]
    )
    assert status == 0
    text = capsys.readouterr().out
    for needle in ("[[Parameters]]", "alpha", "beta", "8 bootstrap resamples", "[[Compute-optimal]]",
                   "N_opt ∝ C^a", "starts at best=", "none dropped"):
        assert needle in text
    for name in scaling_plots.FIGURES.values():
        data = (out / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, name
    params = pd.read_csv(out / "scaling_params.csv")
    assert list(params["param"]) == ["E", "A", "B", "alpha", "beta"]
    assert params["ci_low"].notna().all()
    assert len(pd.read_csv(out / "scaling_bootstrap.csv")) == 8
    assert (pd.read_csv(out / "scaling_compute_optimal.csv")["n_opt"] > 0).all()


def test_cli_errors_name_the_problem(tmp_path, capsys):
    rows = pd.DataFrame({"params": [1e6, 2e6, 4e6, 8e6, 1.6e7, 3.2e7], "tokens": [1e8, 1e8, 2e8, 2e8, 4e8, 4e8],
                         "val_loss": [4.0, 3.8, 3.5, float("nan"), 3.1, 3.0]})
    path = tmp_path / "rows.csv"
    rows.to_csv(path, index=False)
    assert cli.main(["scaling", str(path), "--bootstrap", "0"]) == 2
    assert "column 'val_loss' has NaN at rows [3]" in capsys.readouterr().err
    assert cli.main(["scaling", str(path), "--loss", "loss", "--bootstrap", "0"]) == 2
    assert "missing column(s) ['loss']" in capsys.readouterr().err
    assert cli.main(["scaling", str(tmp_path / "absent.csv")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_subcommands_are_a_registry():
    assert set(cli.SUBCOMMANDS) >= {"scaling", "report"}
    help_text, add_args, run = cli.SUBCOMMANDS["scaling"]
    assert callable(add_args) and callable(run) and help_text
    with pytest.raises(SystemExit) as exc:
        cli.main(["no-such-command"])
    assert exc.value.code == 2


def test_module_entry_point_runs():
    done = subprocess.run([sys.executable, "-m", "analysis", "scaling", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "--bootstrap" in done.stdout
