import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from experiments import results, sweep, train
from experiments.configs import ConfigError
from tests.procs import running

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _smoke(data_cache, **kw):
    return dataclasses.replace(sweep.smoke(), cache_dir=data_cache, **kw)


def _cli(root, data_cache, *extra):
    return [sys.executable, "-m", "experiments", "sweep", "--preset", "smoke", f"--results_root={root}",
            f"--cache_dir={data_cache}", "--num_workers=0,1,2", "--feed=none", *extra]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_interrupted_sweep_keeps_rows_and_resumes_without_duplicates(tmp_path, data_cache, sig, shm_guard):
    rows_csv = tmp_path / "sweep" / "r1" / "rows.csv"
    # its own session, so that the signal can go to the whole process group, as a Ctrl-C in a terminal does
    proc = subprocess.Popen(_cli(tmp_path, data_cache, "--run_id=r1"), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 180
        while time.time() < deadline:
            if rows_csv.exists() and len(results.read_csv_rows(rows_csv)) >= 2:
                break
            time.sleep(0.1)
        tree = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)  # a Ctrl-C reaches every process of the group
        else:
            proc.send_signal(sig)  # a kill -9 or the OOM killer hits the sweep alone; its children must follow
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if sig == signal.SIGINT:
        assert proc.returncode == 130, (proc.returncode, err[-2000:])
        assert "rerun with --run_id=r1" in err
    else:
        assert proc.returncode == -signal.SIGKILL
    deadline = time.time() + 15
    while True:
        alive = []
        for p in running(tree):
            try:
                alive.append((p.pid, " ".join(p.cmdline())[:120]))
            except psutil.NoSuchProcess:
                pass
        if not alive or time.time() > deadline:
            break
        time.sleep(0.25)
    assert not alive, f"processes left running after {sig.name}: {alive}"
    # its temporary folder: removed by the interrupted sweep itself, or by the next sweep when it was killed
    left = list(Path(tempfile.gettempdir()).glob(f"{sweep.TMP_PREFIX}{proc.pid}-*"))
    assert len(left) == (1 if sig == signal.SIGKILL else 0), left
    before = results.read_csv_rows(rows_csv)
    assert 2 <= len(before) < 3 and (before.status == "ok").all() and before.samples_per_s.notna().all()
    # rerun with the same id: finishes the rest, no duplicates
    p = subprocess.run(_cli(tmp_path, data_cache, "--run_id=r1"), cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    after = results.read_csv_rows(rows_csv)
    assert len(after) == 3 and after.config_id.is_unique
    assert not any(d.exists() for d in left)
    pd.testing.assert_frame_equal(after.iloc[: len(before)], before)


def test_failed_configuration_is_recorded_and_sweep_continues(tmp_path, data_cache, monkeypatch):
    from experiments import train
    real = train.run_detailed

    def flaky(cfg):
        if cfg.feed == "none":
            raise MemoryError("simulated out of memory")
        return real(cfg)

    monkeypatch.setattr(train, "run_detailed", flaky)
    rows = sweep.run(_smoke(data_cache, isolate=False), tmp_path, progress=False).sort_values("feed")
    assert list(rows.feed) == ["double_buffer", "none"] and list(rows.status) == ["ok", "failed"]
    assert "MemoryError: simulated out of memory" in rows.error.iloc[1]
    assert rows.batch_size.iloc[1] == 16


def test_isolated_child_that_times_out_becomes_a_failed_row(tmp_path, data_cache):
    rows = sweep.run(_smoke(data_cache, config_timeout_s=0.05), tmp_path, progress=False)
    assert len(rows) == 2 and (rows.status == "failed").all()
    assert rows.error.str.contains("timed out").all()


def test_a_run_that_times_out_says_where_it_was_and_keeps_its_threads_stacks(tmp_path, data_cache):
    # busy in a 60 s measured window when its 12 s run out: the sweep asks it for its stacks first
    cfg = _smoke(data_cache, feed=("none",), min_measure_s=60.0, config_timeout_s=12)
    rows = sweep.run(cfg, tmp_path, progress=False)
    assert len(rows) == 1 and rows.status.iloc[0] == "failed"
    error = rows.error.iloc[0]
    assert error.startswith("timed out after 12 s (config_timeout_s); its main thread was in "), error
    assert "(experiments/" in error, error  # a frame of the run's own code
    stacks = sorted((tmp_path / "failed").glob("*.stacks.txt"))
    assert [p.name for p in stacks] == [f"{rows.config_id.iloc[0]}-r0-a1.stacks.txt"]
    assert str(stacks[0]) in error
    text = stacks[0].read_text()
    assert "(most recent call first)" in text and "experiments/runone.py" in text and "experiments/train.py" in text


_SLOW_DUMPER = r"""
import os, signal, sys, time
def dump(*_):  # a dump whose writer is preempted mid-line for 0.3 s, as on a loaded 2-core machine
    with open(sys.argv[1], "a") as f:
        f.write('Thread 0x01 (most recent call first):\n  File "/x/threading.py", line 320 in wait\n  File'); f.flush()
        time.sleep(0.3)
        f.write(' "/repo/experiments/runone.py", line 80 in main\n'); f.flush()
signal.signal(signal.SIGUSR1, dump)
open(sys.argv[1] + ".ready", "w").close()
while True:
    time.sleep(0.01)
"""


def test_asking_for_stacks_waits_out_a_writer_preempted_mid_dump(tmp_path):
    # the sweep must not keep a dump cut after "  File" because one poll saw the file stand still
    err = tmp_path / "stderr.txt"
    err.write_text("earlier output\n")
    child = subprocess.Popen([sys.executable, "-c", _SLOW_DUMPER, str(err)])
    try:
        deadline = time.monotonic() + 30
        while not Path(str(err) + ".ready").exists():
            assert time.monotonic() < deadline and child.poll() is None, "the dumping child did not start"
            time.sleep(0.02)
        text = sweep.ask_stacks(child, err)
    finally:
        child.kill()
        child.wait()
    assert text.startswith("Thread 0x01") and text.endswith('"/repo/experiments/runone.py", line 80 in main'), text
    assert "earlier output" not in text


@pytest.mark.parametrize("text, whole", [
    ('Thread 0x01 (most recent call first):\n  File "/x/a.py", line 3 in f\n', True),
    ('Thread 0x01 (most recent call first):\n  <no Python frame>\n', True),
    ('Thread 0x01 (most recent call first):\n  File "/x/a.py", line 3 in f\n  File', False),
    ('Thread 0x01 (most recent call first):\n  File "/x/a.py", line 3 in f', False),
    ('Thread 0x01 (most recent call first):\n', False),
])
def test_a_dump_is_whole_only_after_a_whole_frame_line(text, whole):
    assert sweep._dump_ends_whole(text) is whole


def test_a_multi_process_run_that_times_out_is_a_failed_row_and_leaves_nothing(tmp_path, data_cache, monkeypatch):
    # the sweep kills the run's child (the launcher) at the timeout: its ranks die with it, and the
    # folder they exchanged files through goes with the job's folder, not left in the temp folder
    sys_tmp = tmp_path / "sys_tmp"
    sys_tmp.mkdir()
    # multiprocessing's own folder (the fork server's socket) is made once per process, in the temp
    # folder of the moment: made here, under tmp_path, the socket's path passed the 108 bytes AF_UNIX
    # allows, and every later sweep of this process failed to start its fork server (pytest -n 2
    # without --dist loadfile, where this test can be a worker's first sweep). Made before, it stays
    # where it was; the memsim folders this test checks still go to TMPDIR.
    import multiprocessing.util
    multiprocessing.util.get_temp_dir()
    monkeypatch.setenv("TMPDIR", str(sys_tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    cfg = _smoke(data_cache, num_processes=(2,), feed=("double_buffer",), min_measure_s=60.0, config_timeout_s=8)
    (tmp_path / "out").mkdir()
    rows = sweep.run(cfg, tmp_path / "out", progress=False)
    assert len(rows) == 1 and rows.status.iloc[0] == "failed" and "timed out" in rows.error.iloc[0]
    assert not list(sys_tmp.glob("memsim-*")), sorted(p.name for p in sys_tmp.iterdir())
    deadline = time.monotonic() + 10
    while (left := [p for p in me.children(recursive=True) if p.pid not in before
                    and "experiments.distributed" in " ".join(p.cmdline())]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, "orphaned ranks"


def test_child_killed_by_a_signal_becomes_a_failed_row_naming_it(tmp_path, data_cache):
    import threading
    me = psutil.Process()
    stop = threading.Event()

    def killer():  # kills the first run: a child of the fork server, which is a child of this process
        while not stop.is_set():
            for fs in me.children():
                if "forkserver" in " ".join(fs.cmdline()):
                    for run in fs.children():
                        run.send_signal(signal.SIGKILL)
                        return
            time.sleep(0.02)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        rows = sweep.run(_smoke(data_cache, feed=("none",)), tmp_path, progress=False)
    finally:
        stop.set()
    assert len(rows) == 1 and rows.status.iloc[0] == "failed"
    assert rows.error.iloc[0].startswith("killed by SIGKILL"), rows.error.iloc[0]


def test_child_error_report_becomes_the_row_error(tmp_path, data_cache):
    # a learning rate that makes the loss non-finite: the child writes its own error, the sweep keeps it
    cfg = _smoke(data_cache, feed=("none",))
    tc = dataclasses.replace(cfg.train_configs()[0], learning_rate=1e30, min_steps=20)
    runner = sweep.Runner()
    try:
        out = runner.run(tc, 120)
    finally:
        runner.close()
    assert out["error"].startswith("NonFiniteLoss: loss is") and "at step" in out["error"], out


def test_collect_reports_exit_codes_and_stderr(tmp_path):
    (tmp_path / "stderr.txt").write_text("something\nSegmentation fault in foo\n")
    assert sweep.collect(tmp_path, 3)["error"] == "exit code 3: something | Segmentation fault in foo"
    assert sweep.collect(tmp_path, -signal.SIGSEGV)["error"].startswith("killed by SIGSEGV: something")
    assert "(out of memory?)" in sweep.collect(tmp_path, -signal.SIGKILL)["error"]


def _fake_run(calls, fail=lambda cfg: False):
    import pandas as pd

    def run_detailed(cfg):
        calls.append((cfg.num_workers, cfg.feed))
        if fail(cfg):
            raise RuntimeError(f"simulated failure of {cfg.feed}")
        from experiments import configs
        row = {**configs.to_flat_dict(cfg), "status": "ok", "error": "", "samples_per_s": 100.0 + len(calls),
               "feed_efficiency": 0.5, "feed_efficiency_lo": 0.4, "feed_efficiency_hi": 0.6}
        return train.RunResult(pd.DataFrame([row]), pd.DataFrame(), pd.DataFrame())
    return run_detailed


def test_repeats_run_round_robin_in_seeded_order_and_resume_skips_finished_pairs(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(train, "run_detailed", _fake_run(calls))
    cfg = dataclasses.replace(sweep.smoke(), isolate=False, num_workers=(0, 1), repeats=3, order_seed=7)
    todo = cfg.train_configs()
    rows = sweep.run(cfg, tmp_path, progress=False)
    expected = [(todo[i].num_workers, todo[i].feed) for i, _ in sweep.schedule(len(todo), 3, 7)]
    assert calls == expected and len(set(calls[:4])) == 4, "each round runs every configuration once"
    assert calls[:4] != calls[4:8] or calls[4:8] != calls[8:], "the order is reshuffled per round"
    assert len(rows) == 12 and sorted(rows.repeat.unique()) == [0, 1, 2]
    assert rows.groupby("config_id").repeat.nunique().eq(3).all()
    calls.clear()
    again = sweep.run(cfg, tmp_path, progress=False)
    assert calls == [] and len(again) == 12
    summ = results.summarize(again)
    assert len(summ) == 4 and (summ.repeats == 3).all()
    assert (summ.samples_per_s_lo <= summ.samples_per_s).all() and (summ.samples_per_s <= summ.samples_per_s_hi).all()


def test_failed_pairs_are_skipped_on_resume_and_retried_with_retry_failed(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(train, "run_detailed", _fake_run(calls, fail=lambda c: c.feed == "none"))
    cfg = dataclasses.replace(sweep.smoke(), isolate=False, repeats=2)
    rows = sweep.run(cfg, tmp_path, progress=False)
    assert (rows.status == "failed").sum() == 2 and len(rows) == 4
    calls.clear()
    sweep.run(cfg, tmp_path, progress=False)
    assert calls == [], "a plain resume does not retry failed rows"
    monkeypatch.setattr(train, "run_detailed", _fake_run(calls))
    rows = sweep.run(cfg, tmp_path, progress=False, retry_failed=True)
    assert sorted(calls) == [(0, "none"), (0, "none")]
    assert len(rows) == 6, "rows are append-only: the failed ones stay"
    retried = rows[rows.feed == "none"].sort_values(["repeat", "attempt"])
    assert list(retried.attempt) == [1, 2, 1, 2] and list(retried.status) == ["failed", "ok"] * 2
    cur = results.current(rows)
    assert len(cur) == 4 and (cur.status == "ok").all()


def test_sweep_where_every_run_failed_exits_nonzero_with_a_summary(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(train, "run_detailed", _fake_run(calls, fail=lambda c: True))
    cfg = dataclasses.replace(sweep.smoke(), isolate=False)
    code = sweep.main(cfg, "smoke", run_id="x", results_root=str(tmp_path))
    err = capsys.readouterr().err
    assert code == 1 and len(calls) == 2
    assert "2 of 2 runs failed" in err and "simulated failure of none" in err and "--retry_failed" in err
    assert len(results.load(tmp_path / "sweep" / "x")) == 2


def test_interruptible_remembers_a_signal_even_if_swallowed():
    with sweep.interruptible() as sig:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        except KeyboardInterrupt:
            pass  # a library that swallows it
    assert sig.caught == signal.SIGTERM and sig.exit_code == 143


def test_designed_sample_is_balanced_seeded_and_valid():
    cfg = dataclasses.replace(sweep.quick(), sample_size=12)
    designed = cfg.designed_configs()
    sample = [tc for d, tc in designed if d == "sample"]
    assert len([d for d, _ in designed if d == "grid"]) == 2 * 2 * 2 and len(sample) == 12  # workers × prefetch × feed
    for k in sweep.SAMPLE_KEYS:
        levels = getattr(cfg, f"sample_{k}")
        counts = [sum(getattr(tc, k) == v for tc in sample) for v in levels]
        assert max(counts) - min(counts) <= 1, (k, counts)
    assert all(tc.width == cfg.cnn_width for tc in sample if tc.model == "cnn")
    again = dataclasses.replace(sweep.quick(), sample_size=12).designed_configs()
    assert [tc for _, tc in again] == [tc for _, tc in designed]
    other = dataclasses.replace(sweep.quick(), sample_size=12, sample_seed=1).sample_configs()
    assert other != sample


@pytest.mark.parametrize("args, key", [
    (["train", "--num_devices=8"], "num_devices=8"),
    (["train", "--cache_dir=/proc/nope"], "cache_dir='/proc/nope'"),
    (["train", "--image_size=0"], "image_size=0"),
    (["sweep", "--preset", "smoke", "--repeats=0"], "repeats=0"),
])
def test_bad_input_is_one_line_exit_2_before_any_work(tmp_path, args, key):
    p = subprocess.run([sys.executable, "-m", "experiments", *args, f"--results_root={tmp_path}"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2, p.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and key in lines[0], p.stderr
    assert not any(tmp_path.iterdir()), "no results folder for a rejected run"


def test_existing_results_folder_is_never_overwritten(tmp_path):
    a = results.run_dir("sweep", None, tmp_path)
    (a / "rows.csv").write_text("x\n")
    b = results.run_dir("sweep", None, tmp_path)
    assert a != b and (a / "rows.csv").read_text() == "x\n"
    with pytest.raises(results.ResultsError, match="already exists"):
        results.run_dir("sweep", a.name, tmp_path, resume=False)
    assert results.run_dir("sweep", a.name, tmp_path, resume=True) == a


def test_resuming_under_another_malloc_setting_is_refused(tmp_path, monkeypatch):
    # rows measured with the thresholds fixed, resumed by a process with glibc's own: refused before
    # any work (a configuration's id does not include the setting, so its repeats would mix them)
    from experiments import heap
    monkeypatch.setattr(heap, "_state", "glibc default")
    d = results.run_dir("sweep", "r1", tmp_path)
    (d / "step_probe").mkdir()
    for p in (d / "rows.csv", d / "step_probe" / "rows.csv"):
        results.RowWriter(p.parent).append({"config_id": "a", "repeat": 0, "status": "ok", "malloc": "glibc default"})
    assert results.run_dir("sweep", "r1", tmp_path, resume=True) == d  # the same setting: resumes
    results.RowWriter(d / "step_probe").append({"config_id": "b", "repeat": 0, "status": "ok",
                                                "malloc": "steady (mmap 64 MiB, trim 128 MiB)"})
    with pytest.raises(results.ResultsError, match=r"step_probe/rows.csv: measured with malloc 'steady \(mmap 64 MiB, "
                                                   r"trim 128 MiB\)', and this process has 'glibc default' "
                                                   r"\(MEMSIM_MALLOC=.*\); resume with MEMSIM_MALLOC as it was"):
        results.run_dir("sweep", "r1", tmp_path, resume=True)
    # rows from before the column existed resume as before
    (d / "step_probe" / "rows.csv").unlink()
    (d / "step_probe" / "rows.columns.json").unlink()
    results.RowWriter(d / "step_probe").append({"config_id": "b", "repeat": 0, "status": "ok"})
    assert results.run_dir("sweep", "r1", tmp_path, resume=True) == d


def test_impossible_grid_is_rejected_before_work():
    with pytest.raises(ConfigError, match="grad_accum_steps=3"):
        dataclasses.replace(sweep.smoke(), grad_accum_steps=(1, 3))
    with pytest.raises(ConfigError, match="num_workers"):
        dataclasses.replace(sweep.smoke(), num_workers=())


def test_load_concatenates_runs_and_restores_dtypes(tmp_path):
    for rid in ("a", "b"):
        w = results.RowWriter(results.run_dir("sweep", rid, tmp_path))
        for i in range(3):
            w.append({"config_id": f"{rid}{i}", "num_workers": i, "feed": "none", "samples_per_s": 10.0 * i,
                      "ok": i > 0})
    # a writer killed mid-line leaves a partial last line: it is ignored
    with open(tmp_path / "sweep" / "b" / "rows.csv", "a") as f:
        f.write("b9,4,no")
    df = results.load(tmp_path / "sweep" / "*")
    assert len(df) == 6
    assert str(df.num_workers.dtype) == "Int64" and df.samples_per_s.dtype == "float64"
    assert str(df.ok.dtype) == "boolean" and str(df.feed.dtype) == "string"
    assert df.groupby("num_workers").samples_per_s.mean().tolist() == [0.0, 10.0, 20.0]


def test_rss_stays_flat_over_12_configurations_with_workers(tmp_path, data_cache):
    # In-process (isolate=False), so any memory leak would accumulate in this process. /dev/shm is not
    # checked here: in one process Grain's shared-memory batches outlive their runs until exit, which
    # is why sweeps isolate each configuration by default; the CLI tests above check /dev/shm.
    cfg = _smoke(data_cache, isolate=False, grain_stats=False, num_workers=(1,), feed=("double_buffer",),
                 batch_size=(8, 16), prefetch_buffer_size=(1, 2, 3), device_buffer_size=(1, 2))
    assert len(cfg.train_configs()) == 12
    me = psutil.Process()
    rss = []
    sweep.run(cfg, tmp_path, progress=False, on_config_done=lambda row: rss.append(me.memory_info().rss))
    assert len(rss) == 12
    base = min(rss[2:6])  # after the first configurations have warmed caches and compiled
    growth = max(rss[6:]) / base - 1
    assert growth < 0.10, f"RSS grew {growth:.1%} over the sweep: {[r >> 20 for r in rss]} MiB"
    assert not [c for c in me.children() if "resource_tracker" not in " ".join(c.cmdline())], "workers left running"


def test_stale_sweep_folders_are_removed_and_live_ones_kept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"{sweep.TMP_PREFIX}{dead.pid}-abc"
    live = tmp_path / f"{sweep.TMP_PREFIX}{os.getpid()}-def"
    other = tmp_path / f"{sweep.TMP_PREFIX}nopid"
    for d in (stale, live, other):
        (d / "xla-cache").mkdir(parents=True)
    assert sweep.remove_stale_dirs(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and live.exists() and other.exists()


def test_config_ids_that_look_like_numbers_are_read_back_as_written(tmp_path):
    # a 12-hex config_id can be all digits, or digits around one 'e' (a float's exponent): read by
    # inference, '20644e397835' came back as inf beside an ordinary id, and a resumed sweep ran that
    # finished pair again
    ids = ["20644e397835", "8f59a68c3220", "012345678901", "1e5"]
    w = results.RowWriter(tmp_path)
    for i, cid in enumerate(ids):
        w.append({"config_id": cid, "repeat": 0, "status": "ok", "samples_per_s": 1.0 + i})
    back = results.read_csv_rows(tmp_path / "rows.csv")
    assert back.config_id.tolist() == ids
    assert results.done_pairs(tmp_path) == {(cid, 0) for cid in ids}
    # every id numeric-looking, and no column schema beside the rows: still text
    (tmp_path / "rows.columns.json").unlink()
    (tmp_path / "rows.csv").write_text("config_id,repeat\n20644e397835,0\n012345678901,1\n")
    assert results.read_csv_rows(tmp_path / "rows.csv").config_id.tolist() == ["20644e397835", "012345678901"]


def test_the_quick_sweeps_bound_measures_half_a_second_and_earlier_ids_stay():
    from experiments import configs
    tcs = sweep.quick().train_configs()
    assert {tc.resident_min_measure_s for tc in tcs} == {0.5} and {tc.min_measure_s for tc in tcs} == {1.0}
    # a configuration at the field's default keeps the id it had before the field existed
    flat = configs.to_flat_dict(train.TrainConfig())
    assert results.config_id(flat) == results.config_id({k: v for k, v in flat.items() if k != "resident_min_measure_s"})
    assert results.config_id({**flat, "resident_min_measure_s": 0.5}) != results.config_id(flat)
