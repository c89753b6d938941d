"""``python -m analysis costmodel holdout``: cv and compare over held-out pairs, with the goal per pair."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest

from analysis.costmodel import holdout as ho
from analysis.costmodel.features import CostModelError
from tests.procs import running

ROOT = Path(__file__).resolve().parents[2]
HOLDOUT = ROOT / "results" / "cpu-2core" / "holdout"
KEYS = ("median_abs_rel_error", "max_abs_rel_error", "kendall_tau", "n", "median_interval_width")


def _committed(pair: str, what: str) -> dict:
    """The last line of a pair's committed ``cv --json`` or ``compare --json`` output."""
    return json.loads((HOLDOUT / pair / f"{what}.txt").read_text().strip().splitlines()[-1])


@pytest.fixture(scope="module")
def two_pairs(tmp_path_factory):
    """The command on two committed pairs, in two worker processes: (status, stdout, stderr, table)."""
    out = tmp_path_factory.mktemp("holdout") / "h.csv"
    errors = out.with_name("errors.csv")
    p = subprocess.run([sys.executable, "-m", "analysis", "costmodel", "holdout", HOLDOUT / "pair37",
                        HOLDOUT / "pair13", "--jobs", "2", "--out", out, "--json", "--by_config",
                        "--errors_out", errors], capture_output=True, text=True, cwd=ROOT, timeout=300)
    return (p.returncode, p.stdout, p.stderr, pd.read_csv(out, dtype={"git_commit": str}) if out.is_file() else None,
            pd.read_csv(errors) if errors.is_file() else None)


def test_each_pair_gets_what_cv_and_compare_wrote_for_it(two_pairs):
    rc, out, err, table, _ = two_pairs
    assert rc == 0, err
    assert table.pair.tolist() == ["pair37", "pair13"]  # the order given
    rows = table.set_index("pair")
    # the committed files are `costmodel cv --json` and `costmodel compare MODEL.json --json` (the model
    # written to JSON and read back): the same numbers, by another path
    for pair, check, short in (("pair37", "cv", "cv"), ("pair37", "cv_kept", "cvk"), ("pair37", "compare", "cmp"),
                               ("pair13", "compare", "cmp")):
        want = _committed(pair, check)
        for k in KEYS:
            assert rows.loc[pair, f"{short}_{k}"] == pytest.approx(want[k], rel=1e-9, abs=1e-12), (pair, check, k)
        met = (want["median_abs_rel_error"] <= 0.05 and want["max_abs_rel_error"] <= 0.15
               and want["kendall_tau"] >= 0.8)
        assert bool(rows.loc[pair, f"{short}_meets"]) == met, (pair, check)
    assert _committed("pair37", "cv_kept")["probes"] == "kept"  # written by `cv --keep_probes --json`
    assert rows.loc["pair37", "cmp_median_work_spread"] == pytest.approx(_committed("pair37", "compare")["median_work_spread"])
    # pair37 (AMD EPYC) misses both checks; pair13 (Intel Xeon) meets cross-validation, and with model
    # versions 22 and 23 miss the comparison's median by 0.35 points (5.35%)
    assert not rows.loc["pair37", "both_meet"] and rows.loc["pair13", "cv_meets"] and not rows.loc["pair13", "cmp_meets"]
    assert rows.loc["pair13", "both_meet"] == (rows.loc["pair13", "cv_meets"] and rows.loc["pair13", "cmp_meets"])
    assert rows.loc["pair37", "cpu_model"].startswith("AMD EPYC") and rows.loc["pair13", "git_commit"] == "6965a78"
    s = json.loads(out.strip().splitlines()[-1])
    assert s["n_pairs"] == 2 and s["n_meeting_both"] == int(table.both_meet.sum())
    assert s["pairs_meeting_both"] == table.pair[table.both_meet].tolist()
    assert s["median_cv"]["max_abs_rel_error"] == pytest.approx(table.cv_max_abs_rel_error.median())
    assert s["median_cv_kept"]["max_abs_rel_error"] == pytest.approx(table.cvk_max_abs_rel_error.median())
    assert s["n_meeting_both_kept"] == int((table.cvk_meets & table.cmp_meets).sum())
    assert s["goal"] == ho.GOAL
    lines = out.splitlines()
    assert any(ln.split()[:1] == ["pair37"] for ln in lines) and "met by both checks" in out
    assert "with cv_kept (cv --keep_probes) for cv" in out
    # each check's noise floor, from its own rows (the study's for cv, the second sweep's for compare)
    from analysis.costmodel.evaluate import noise_floor
    for pair, short, folder in (("pair37", "cv", "study"), ("pair37", "cmp", "second"), ("pair13", "cmp", "second")):
        check = "cv" if short == "cv" else "compare"
        want = noise_floor(pd.read_csv(HOLDOUT / pair / folder / "rows.csv"), observed=_committed(pair, check))
        for k in ho.FLOOR_KEYS:
            assert rows.loc[pair, f"{short}_floor_{k}"] == pytest.approx(want[k]), (pair, short, k)
    assert (rows.cv_floor_p_goal == rows.cvk_floor_p_goal).all()  # the same rows, the same floor
    assert rows.floor_p_both.to_numpy() == pytest.approx((rows.cv_floor_p_goal * rows.cmp_floor_p_goal).to_numpy())
    assert s["exact_meeting_both"] == pytest.approx(rows.floor_p_both.sum())
    assert s["exact_meeting_compare"] == pytest.approx(rows.cmp_floor_p_goal.sum())
    assert {c: e["n_pairs"] for c, e in s["exact_by_cpu"].items()} == table.cpu_model.value_counts().to_dict()
    # pair13's Xeon repeated itself within 1-3%: an exact model meets both checks almost always there;
    # pair37's AMD EPYC spread 10-20% between repeats: it almost never does
    assert rows.loc["pair13", "floor_p_both"] > 0.9 and rows.loc["pair37", "floor_p_both"] < 0.05
    assert "noise floor: a model that predicted every configuration exactly would meet the goal" in out
    assert s["n_max_beyond_noise_cv"] == int((rows.cv_floor_p_max < ho.BEYOND_NOISE).sum())
    assert s["n_median_beyond_noise_compare"] == int((rows.cmp_floor_p_median < ho.BEYOND_NOISE).sum())


def test_each_comparisons_intervals_are_sized_by_its_own_studys_cross_validation(two_pairs):
    rc, out, err, table, errors = two_pairs
    assert rc == 0, err
    rows = table.set_index("pair")
    n_in = n_all = 0
    for pair, g in errors.groupby("pair"):
        # the 80% interval: the ⌈(n + 1)·0.8⌉-th smallest of the study's held-out |log errors| (cv's)
        cv = np.sort(np.abs(np.log1p(g[g.check == "cv"].rel_error.to_numpy(float))))
        q = cv[math.ceil((len(cv) + 1) * 0.8) - 1]
        cmp = np.abs(np.log1p(g[g.check == "compare"].rel_error.to_numpy(float)))
        assert rows.loc[pair, "cmp_n_in_interval"] == (cmp <= q).sum(), pair
        assert rows.loc[pair, "cmp_n_with_interval"] == len(cmp) == rows.loc[pair, "cmp_n"]
        assert rows.loc[pair, "cmp_interval_coverage"] == pytest.approx((cmp <= q).mean())
        assert np.isnan(rows.loc[pair, "cv_interval_coverage"])  # a fold's model keeps no errors of its own
        n_in, n_all = n_in + (cmp <= q).sum(), n_all + len(cmp)
    s = json.loads(out.strip().splitlines()[-1])
    assert s["compare_interval_coverage"] == {"n_in_interval": n_in, "n_with_interval": n_all,
                                              "coverage": pytest.approx(n_in / n_all)}
    assert f"prediction intervals: {n_in} of the comparisons' {n_all} measured medians" in out


def _printed_errors(pair: str) -> dict:
    """config_id -> rel_error as the pair's committed ``compare.txt`` prints them (4 significant digits)."""
    rows = [ln.split() for ln in (HOLDOUT / pair / "compare.txt").read_text().splitlines()]
    return {r[0]: float(r[5]) for r in rows if len(r) > 5 and len(r[0]) == 12 and r[1].replace(".", "").isdigit()}


def test_every_configurations_error_is_listed_and_split_into_shift_and_bias(two_pairs):
    rc, out, err, table, errors = two_pairs
    assert rc == 0, err
    # one row per configuration, pair and check, as many as each check's summary counted
    rows = table.set_index("pair")
    for pair in ("pair37", "pair13"):
        for check, short in ho.CHECKS:
            assert ((errors.pair == pair) & (errors.check == check)).sum() == rows.loc[pair, f"{short}_n"]
    # the comparison's errors are the ones the committed compare.txt printed for the same configurations
    printed = _printed_errors("pair13")
    got = errors[(errors.pair == "pair13") & (errors.check == "compare")].set_index("config_id").rel_error
    assert len(printed) == len(got) and set(printed) == set(got.index)
    for cid, v in printed.items():
        assert got[cid] == pytest.approx(v, rel=1e-3, abs=1e-4), cid
    s = json.loads(out.strip().splitlines()[-1])["by_configuration"]
    assert set(s) == {"cv", "cv_kept", "compare"}
    for check, short in ho.CHECKS:
        # the pairs meeting the goal, recounted from the listed errors, are the table's
        assert s[check]["n_pairs"] == 2 and s[check]["n_meeting"] == int(table[f"{short}_meets"].sum())
        # two pairs are too few for a configuration's bias: none is estimated, none is taken out
        assert s[check]["n_biased"] == 0 and s[check]["rms_bias"] == 0.0
        assert s[check]["n_meeting_without_bias"] == s[check]["n_meeting"]
    assert "compare: where the errors come from over 2 pairs" in out


def test_the_split_recovers_each_pairs_shift_and_each_configurations_bias():
    """Twelve pairs of ten configurations: each pair shifted by up to ±8% (a machine that ran at
    another speed), three configurations off by −12%, +10% and +6% in every pair, 1% noise; one more
    configuration measured in only two pairs has no bias."""
    rng = np.random.default_rng(3)
    true_bias = {0: -0.12, 3: 0.10, 7: 0.06}
    rows = []
    for p in range(12):
        shift = rng.uniform(-0.08, 0.08)
        for c in range(10):
            rows.append({"pair": f"pair{p}", "check": "compare", "model": "mlp", "batch_size": 32 * (c + 1),
                         "measured": 1000.0 + 100 * c, "le": shift + np.log1p(true_bias.get(c, 0.0))
                         + rng.normal(0, 0.01)})
        if p < 2:
            rows.append({"pair": f"pair{p}", "check": "compare", "model": "cnn", "batch_size": 32,
                         "measured": 500.0, "le": shift + 0.3})
    e = pd.DataFrame(rows)
    e["rel_error"] = np.expm1(e.pop("le"))
    e["predicted"] = e.measured * (1 + e.rel_error)
    configs, s = ho.by_configuration(pd.concat([e, e.assign(check="cv", rel_error=0.0)]), "compare")
    by = configs.set_index(["model", "batch_size"])
    for c in range(10):
        assert by.loc[("mlp", 32 * (c + 1)), "bias"] == pytest.approx(true_bias.get(c, 0.0), abs=0.02), c
    assert configs.iloc[0].batch_size == 32  # the largest |bias| first
    worst = e[(e.model == "mlp") & (e.batch_size == 32)].rel_error.abs()
    assert by.loc[("mlp", 32), "past_max"] == (worst > 0.15).sum() > 0 and by.loc[("mlp", 64), "past_max"] == 0
    assert np.isnan(by.loc[("cnn", 32), "bias"]) and by.loc[("cnn", 32), "pairs"] == 2
    assert np.isnan(by.loc[("cnn", 32), "meeting_without"])
    # the unbiased configurations fix nothing; the −12% one alone brings at least one pair in
    assert by.loc[("mlp", 64), "meeting_without"] == s["n_meeting"] < by.loc[("mlp", 32), "meeting_without"]
    assert s["n_pairs"] == 12 and s["n_configurations"] == 11 and s["n_biased"] == 10
    # the rest is the 1% noise and the unbiased cnn's +30% in its two pairs
    assert s["rms_rest"] == pytest.approx(np.sqrt((2 * 0.3 ** 2 + 120 * 0.01 ** 2) / 122), rel=0.1)
    assert s["rms_bias"] == pytest.approx(np.sqrt(12 * (np.log1p(-0.12) ** 2 + np.log(1.1) ** 2 + np.log(1.06) ** 2)
                                                  / 122), rel=0.1)
    assert 0.02 < s["rms_shift"] < 0.08
    # as measured, the cnn configuration and the biases miss the goal; with the biases out, the two
    # pairs holding the unbiased cnn still miss on it (+30%): an upper bound, not a clean sweep
    assert s["n_meeting"] < s["n_meeting_without_bias"] <= s["n_meeting_without_both"] == 10
    with pytest.raises(CostModelError, match="no cv_kept errors"):
        ho.by_configuration(e, "cv_kept")


def test_one_process_gives_the_workers_rows(two_pairs):
    table = ho.holdout(ho.find_pairs([str(HOLDOUT / "pair13")]), jobs=1)
    want = two_pairs[3].set_index("pair").loc["pair13"]
    got = table.set_index("pair").loc["pair13"]
    for k in want.index:
        assert got[k] == want[k] or (pd.isna(got[k]) and pd.isna(want[k])), k


def _pair(root: Path, name: str) -> Path:
    for part in ("study", "second"):
        (root / name / part).mkdir(parents=True)
        (root / name / part / "rows.csv").write_text("config_id\n")
    return root / name


def test_pairs_are_found_in_natural_order_and_bad_folders_are_refused(tmp_path):
    for n in ("pair10", "pair2", "pair9"):
        _pair(tmp_path / "h", n)
    (tmp_path / "h" / "second").mkdir()  # a folder of the parent that is not a pair
    found = ho.find_pairs([str(tmp_path / "h")])
    assert [n for n, _, _ in found] == ["pair2", "pair9", "pair10"]
    assert found[0][1:] == (str(tmp_path / "h" / "pair2" / "study"), str(tmp_path / "h" / "pair2" / "second"))
    one = ho.find_pairs([str(tmp_path / "h" / "pair9")], [(str(tmp_path / "h" / "pair2" / "study"),
                                                           str(tmp_path / "h" / "pair10" / "second"))])
    assert [n for n, _, _ in one] == ["pair9", str(tmp_path / "h" / "pair2" / "study")]
    with pytest.raises(CostModelError, match="holds no pair"):
        ho.find_pairs([str(tmp_path / "h" / "second")])
    with pytest.raises(CostModelError, match="given twice: pair9"):
        ho.find_pairs([str(tmp_path / "h"), str(tmp_path / "h" / "pair9")])
    with pytest.raises(CostModelError, match="no pairs given"):
        ho.find_pairs([])
    with pytest.raises(CostModelError, match="jobs=0"):
        ho.holdout(found, jobs=0)


def _main(capsys, *args):
    from analysis.__main__ import main
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("args, names", [
    (["{tmp}/missing"], "'{tmp}/missing' is not a folder"),
    (["{tmp}"], "'{tmp}' holds no pair"),
    (["{pair}", "--goal", "0.05,0.15"], "--goal '0.05,0.15': expected MEDIAN,MAX,TAU"),
    (["{pair}", "--goal", "0.2,0.1,0.8"], "--goal '0.2,0.1,0.8'"),
    (["{pair}", "--jobs", "0"], "--jobs 0"),
    (["--pair", "{pair}/study", "{tmp}"], "the second sweep folder '{tmp}' has no rows.csv"),
    (["{pair}", "--out", "{tmp}/no/such/h.csv"], "--out '{tmp}/no/such/h.csv': its folder does not exist"),
    (["{pair}", "--by_config", "--errors_out", "{tmp}/no/such/e.csv"],
     "--errors_out '{tmp}/no/such/e.csv': its folder does not exist"),
])
def test_bad_input_is_one_line_and_exit_2_before_any_work(tmp_path, capsys, args, names):
    pair = _pair(tmp_path / "p", "pairA")  # rows.csv without rows: any fitting would fail otherwise
    fill = {"tmp": tmp_path, "pair": pair}
    rc, out, err = _main(capsys, "costmodel", "holdout", *[a.format(**fill) for a in args])
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert names.format(**fill) in err


def test_ctrl_c_stops_the_command_and_its_workers(shm_guard):
    p = subprocess.Popen([sys.executable, "-m", "analysis", "costmodel", "holdout", HOLDOUT, "--jobs", "2"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        me = psutil.Process(p.pid)
        deadline = time.monotonic() + 120
        while len(me.children()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2.0)  # the workers into their first pairs
        kids = me.children(recursive=True)
        assert len(kids) >= 2, "the pool's workers never started"
        os.killpg(p.pid, signal.SIGINT)
        t0 = time.monotonic()
        out, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1] == "costmodel: interrupted"
    assert "met by both checks" not in out
    assert took < 10, took
    deadline = time.monotonic() + 5
    while (alive := running(kids)) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive, f"orphaned processes: {alive}"
