"""experiments.rules: the runs each claim needs, the study's rows it reuses, and its faults."""

import json
from pathlib import Path

import pytest

from experiments import results, rules
from experiments.__main__ import main as cli
from experiments.configs import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_unknown_preset_and_part_are_one_line_errors(capsys):
    assert cli(["rules", "--preset", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "preset='nope'" in err[0]
    with pytest.raises(ConfigError, match="bogus"):
        rules.RulesConfig(parts=("workers", "bogus"))
    with pytest.raises(ConfigError, match="device_put_bytes"):
        rules.RulesConfig(device_put_bytes=1 << 20)


def test_quick_runs_one_baseline_for_every_claim():
    its = rules.quick().items(cores=2)
    assert len(its) == 12 and len({it.config_id for it in its}) == 12
    base = its[0]
    assert base.claims == {"1", "3", "4a", "5", "6"} and base.tier == "ram"
    workers = sorted(it.tc.num_workers for it in its if "1" in it.claims)
    assert workers == [0, 1, 2, 3]
    tiers = {it.tier: it for it in its if "6" in it.claims}
    assert set(tiers) == {"ram", "page_cache", "cold"}
    assert tiers["cold"].tc == tiers["page_cache"].tc and tiers["cold"].config_id != tiers["page_cache"].config_id


def test_study_rows_tag_the_grids_controlled_comparisons():
    tagged = rules.study_rows(REPO / "results/cpu-2core/study")
    ok = tagged[tagged.status == "ok"]
    w = ok[ok.claims.str.contains("1")]
    assert sorted(w.num_workers.unique()) == [0, 2]
    assert w.prefetch_buffer_size.nunique() == 1 and w.feed.nunique() == 1
    p = ok[ok.claims.str.contains("3")]
    assert sorted(p.prefetch_buffer_size.unique()) == [1, 4] and p.num_workers.nunique() == 1
    assert tagged.claims.str.contains("9").all()


def test_memory_configs_hold_the_effective_batch():
    mc = rules.memory_configs(rules.quick())
    acc = [tc for what, tc in mc if what == "grad_accum"]
    micro = [tc for what, tc in mc if what == "micro_batch"]
    assert {tc.batch_size for tc in acc} == {64} and sorted(tc.grad_accum_steps for tc in acc) == [1, 2, 4]
    assert sorted(tc.batch_size for tc in micro) == [16, 32]


def _stages(monkeypatch, fail_with):
    def bad(cfg, out):
        raise fail_with

    def good(cfg, out):
        results.RowWriter(out, "device_put").append({"nbytes": 1})

    monkeypatch.setitem(rules.STAGES, "memory", bad)
    monkeypatch.setitem(rules.STAGES, "device_put", good)


def test_a_failed_part_keeps_the_others_and_exits_1(tmp_path, monkeypatch, capsys):
    _stages(monkeypatch, RuntimeError("compile broke"))
    cfg = rules.RulesConfig(parts=("memory", "device_put"))
    assert rules.main(cfg, "quick", run_id="r", results_root=str(tmp_path)) == 1
    out = tmp_path / "rules" / "r"
    meta = json.loads((out / "rules.json").read_text())
    assert meta["errors"] == {"memory": "RuntimeError: compile broke"} and meta["preset"] == "quick"
    assert (out / "device_put.csv").exists()
    assert "part memory: RuntimeError: compile broke" in capsys.readouterr().err


def test_an_interrupt_keeps_finished_tables_and_exits_non_zero(tmp_path, monkeypatch, capsys):
    _stages(monkeypatch, KeyboardInterrupt())
    monkeypatch.setattr(rules, "STAGES", {"device_put": rules.STAGES["device_put"], "memory": rules.STAGES["memory"]})
    cfg = rules.RulesConfig(parts=("memory", "device_put"))
    assert rules.main(cfg, "quick", run_id="r", results_root=str(tmp_path)) == 130
    out = tmp_path / "rules" / "r"
    assert (out / "device_put.csv").exists() and (out / "rules.json").exists()
    assert "interrupted" in capsys.readouterr().err
