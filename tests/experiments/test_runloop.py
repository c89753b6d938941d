"""The shared run loop on its own, with plain Python jobs (no training): the contract sweeps and
scaling runs rely on."""

import json

import pandas as pd
import pytest

from experiments import results, runloop


def _jobs(n=3, repeats=1):
    return [runloop.Job(f"c{i}", r, f"i={i}", i) for r in range(repeats) for i in range(n)]


def _failed(job, error, wall_s):
    return {"config_id": job.config_id, "repeat": job.repeat, "status": "failed", "error": error, "wall_s": wall_s}


def _run(tmp_path, jobs, work, **kw):
    return runloop.run_jobs(tmp_path, jobs, work, _failed, header=kw.pop("header", {"experiment": "t"}),
                            desc="t", unit="job", progress=False, **kw)


def _ok(calls, fail=()):
    def work(job):
        calls.append((job.config_id, job.repeat))
        if job.payload in fail:
            raise ValueError(f"bad {job.payload}")
        return runloop.Outcome({"config_id": job.config_id, "repeat": job.repeat, "status": "ok", "error": "",
                                "x": job.payload * 10},
                               {"steps": pd.DataFrame({"step": [0, 1], "t": [0.5, 0.25]})})
    return work


def test_rows_side_tables_and_config_are_written(tmp_path):
    calls, seen = [], []
    rows = runloop.run_jobs(tmp_path, _jobs(), _ok(calls), _failed, header={"experiment": "t", "n": 3},
                            desc="t", unit="job", progress=False, on_row=seen.append)
    assert calls == [("c0", 0), ("c1", 0), ("c2", 0)], "jobs run in the order given"
    assert list(rows.x) == [0, 10, 20] and (rows.status == "ok").all()
    assert [r["config_id"] for r in seen] == ["c0", "c1", "c2"]
    steps = results.read_csv_rows(tmp_path / "steps.csv")
    assert list(steps.config_id) == ["c0", "c0", "c1", "c1", "c2", "c2"] and (steps.repeat == 0).all()
    assert json.loads((tmp_path / "config.json").read_text()) == {"experiment": "t", "n": 3}
    _run(tmp_path, _jobs(), _ok([]), header={"experiment": "other"})
    assert json.loads((tmp_path / "config.json").read_text())["experiment"] == "t", "a resumed run keeps the first"


def test_an_exception_becomes_a_failed_row_and_the_run_goes_on(tmp_path):
    calls = []
    rows = _run(tmp_path, _jobs(), _ok(calls, fail={1}))
    assert list(rows.status) == ["ok", "failed", "ok"] and len(calls) == 3
    assert rows.error.iloc[1] == "ValueError: bad 1" and rows.wall_s.iloc[1] >= 0
    assert not (results.read_csv_rows(tmp_path / "steps.csv").config_id == "c1").any()


def test_resume_skips_finished_jobs_and_retry_failed_reruns_failed_ones(tmp_path):
    _run(tmp_path, _jobs(repeats=2), _ok([], fail={1}))
    calls = []
    rows = _run(tmp_path, _jobs(repeats=2), _ok(calls))
    assert calls == [] and len(rows) == 6, "a plain resume runs nothing and duplicates nothing"
    rows = _run(tmp_path, _jobs(repeats=2), _ok(calls), retry_failed=True)
    assert calls == [("c1", 0), ("c1", 1)]
    assert len(rows) == 8 and len(results.current(rows)) == 6 and (results.current(rows).status == "ok").all()


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_interrupt_ends_the_run_keeping_finished_rows(tmp_path, stop):
    def work(job):
        if job.payload == 2:
            raise stop()
        return _ok([])(job)

    with pytest.raises(stop):
        _run(tmp_path, _jobs(4), work)
    assert list(results.read_csv_rows(tmp_path / "rows.csv").config_id) == ["c0", "c1"]
    calls = []
    rows = _run(tmp_path, _jobs(4), _ok(calls))
    assert calls == [("c2", 0), ("c3", 0)] and list(rows.config_id) == ["c0", "c1", "c2", "c3"]
