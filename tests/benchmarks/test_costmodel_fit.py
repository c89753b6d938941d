"""The cost-model fit benchmark: both sides fit the same step, and bad folders are refused."""

import pytest

from benchmarks import costmodel_fit


def test_one_repeat_reports_both_sides_and_the_same_fit(capsys):
    result = costmodel_fit.main(["--repeats", "1", "--cv-repeats", "0", "--json"])
    assert result["identical"] is True
    for key in ("step", "grid_step"):
        assert result[f"{key}_fit_s"]["median"] > 0 and result[f"scipy_{key}_fit_s"]["median"] > 0
        assert result[f"{key}_ratio"] == pytest.approx(
            result[f"scipy_{key}_fit_s"]["median"] / result[f"{key}_fit_s"]["median"])
    assert result["grid_step_params"] >= result["step_params"] > 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("{")


@pytest.mark.parametrize("args, match", [(["--study", "/nonexistent"], "--study /nonexistent: no rows.csv"),
                                         (["--grid", "/nonexistent"], "--grid /nonexistent: no step_probe"),
                                         (["--repeats", "0"], "--repeats 0")])
def test_bad_arguments_are_one_line(args, match, capsys):
    with pytest.raises(SystemExit):
        costmodel_fit.main(args)
    assert match in capsys.readouterr().err
