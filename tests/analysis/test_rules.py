"""analysis.rules: verdicts follow the measured rows; bad input is a one-line error."""

import json

import pandas as pd
import pytest

from analysis import rules
from analysis.rules import RulesData, verdicts
from experiments import results
from memsim.knobs import ConfigError


def _summary(workers_sps: dict, wait: float = 0.3, compute_s: float = 0.01) -> pd.DataFrame:
    return pd.DataFrame([{"config_id": f"w{w}", "status": "ok", "claims": "1;9", "num_workers": w,
                          "prefetch_buffer_size": 2, "samples_per_s": s, "samples_per_s_lo": 0.98 * s,
                          "samples_per_s_hi": 1.02 * s, "data_wait_frac": wait, "compute_time_median_s": compute_s,
                          "cpu_count": 2} for w, s in workers_sps.items()])


def _data(rows=None, **tables) -> RulesData:
    rows = pd.DataFrame() if rows is None else rows
    return RulesData(path=rules.Path("."), runs=rows, rows=rows, meta={"cpu_count": 2}, **tables)


def _verdict(data, claim, predict=None) -> pd.Series:
    df = verdicts(data, predict)
    return df[df.claim == claim].iloc[0]


def test_workers_verdict_changes_with_the_measured_rows():
    held = _verdict(_data(_summary({0: 100.0, 1: 120.0, 2: 130.0, 3: 125.0})), "1")
    assert held.verdict == "holds" and held.measured == pytest.approx(1.3)
    assert "2 workers" in held.reason
    slower = _verdict(_data(_summary({0: 100.0, 1: 101.0, 2: 90.0, 3: 85.0})), "1")
    assert slower.verdict == "does not hold"
    # one worker count meets the claim, the core count does not: it depends on the setting
    some = _verdict(_data(_summary({0: 100.0, 1: 135.0, 2: 100.0, 3: 95.0})), "1")
    assert some.verdict == "depends"


def test_workers_reason_names_contention_when_the_step_slows():
    rows = _summary({0: 100.0, 2: 105.0})
    rows.loc[rows.num_workers == 2, "compute_time_median_s"] = 0.02
    assert "compete with the step" in _verdict(_data(rows), "1").reason


def test_predicted_effect_comes_from_the_predict_callable():
    def predict(configs):  # a stand-in cost model: linear in the workers
        return pd.DataFrame({"samples_per_s": 100.0 * (1 + configs["num_workers"].astype(float)),
                             "bottleneck": "loader"})
    row = _verdict(_data(_summary({0: 100.0, 2: 130.0})), "1", predict)
    assert row.predicted == pytest.approx(3.0) and row.predicted_from == "calibrated cost model"
    assert pd.isna(_verdict(_data(_summary({0: 100.0, 2: 130.0})), "1").predicted)


def _device_put(after_put: float, n: float = 1e8) -> pd.DataFrame:
    return pd.DataFrame([{"repeat": r, "nbytes": n, "rss_before": 1e9, "rss_host_array": 1e9 + n,
                          "rss_after_device_put": 1e9 + after_put * n, "rss_host_dropped": 1e9 + (after_put - 1) * n,
                          "rss_end": 1e9, "aliased": False, "platform": "cpu"} for r in range(3)])


def test_device_put_verdict_follows_rss():
    assert _verdict(_data(device_put=_device_put(2.0)), "8").verdict == "holds"
    aliased = _verdict(_data(device_put=_device_put(1.0)), "8")
    assert aliased.verdict == "does not hold" and aliased.measured == pytest.approx(1.0)


def test_pinned_on_cpu_is_untestable_never_measured():
    pinned = pd.DataFrame([{"round": -1, "size_bytes": 1 << 20, "platform": "cpu", "device_kind": "cpu",
                            "status": "not measured", "note": "platform cpu: no bus"}])
    row = _verdict(_data(pinned=pinned), "2")
    assert row.verdict == "untestable here" and pd.isna(row.measured)


def test_mmap_needs_the_limit_to_bind():
    base = {"limit_kind": "RLIMIT_DATA", "samples_read": 1000, "num_samples": 1000, "read_s": 1.0,
            "read_error": "", "rss_anon_before": 0, "rss_anon_after": 0, "limit_bytes": 100, "file_bytes": 200,
            "ram_load": "MemoryError: no"}
    assert _verdict(_data(mmap=pd.DataFrame([base])), "7").verdict == "holds"
    assert _verdict(_data(mmap=pd.DataFrame([{**base, "ram_load": "loaded (200 bytes)"}])), "7").verdict == "inconclusive"
    assert _verdict(_data(mmap=pd.DataFrame([{**base, "read_error": "MemoryError: x"}])), "7").verdict == "does not hold"


def test_missing_parts_say_not_measured_and_how():
    df = verdicts(_data(), None)
    assert list(df.claim) == list(rules.CLAIMS) and set(df.verdict) == {"not measured"}
    assert all("python -m experiments rules" in r for r in df.reason)


def test_load_rejects_a_folder_without_rules_rows(tmp_path):
    with pytest.raises(ConfigError, match="not a rules folder"):
        RulesData.load(tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        RulesData.load(tmp_path / "nope")


def test_load_names_missing_columns(tmp_path):
    results.RowWriter(tmp_path, "device_put").append({"nbytes": 1, "rss_before": 0})
    with pytest.raises(ConfigError, match=r"lacks column\(s\) \['rss_after_device_put'"):
        RulesData.load(tmp_path)


def test_cli_writes_rules_csv_and_json(tmp_path, capsys):
    w = results.RowWriter(tmp_path, "device_put")
    for rec in _device_put(2.0).to_dict("records"):
        w.append(rec)
    from analysis.__main__ import main
    assert main(["rules", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    by = {r["claim"]: r for r in out["rules"]}
    assert by["8"]["verdict"] == "holds" and (tmp_path / "rules.csv").exists()
    assert main(["rules", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing" in err[0]


def test_section_says_how_to_measure_without_a_rules_folder(tmp_path):
    from analysis.report import StudyResults
    text = rules.section(StudyResults.load(tmp_path))
    assert text.startswith("## Rules of thumb") and "python -m experiments rules --preset quick" in text


def test_section_builds_table_and_figures(tmp_path):
    from analysis.report import StudyResults
    w = results.RowWriter(tmp_path / "rules" if (tmp_path / "rules").mkdir() is None else tmp_path, "device_put")
    for rec in _device_put(2.0).to_dict("records"):
        w.append(rec)
    text = rules.section(StudyResults.load(tmp_path))
    assert "**holds**" in text and "rules/rules_device_put.png" in text
    assert (tmp_path / "rules" / "rules_device_put.png").exists() and (tmp_path / "rules" / "rules.csv").exists()
