"""Several data-parallel JAX processes: sharding, the global batch, one real 2-process run, faults.

The real runs are subprocesses (`python -m experiments train --num_processes=2`); one run is
shared by the assertions about it (module-scoped fixture).
"""

import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

from experiments import __main__ as cli
from experiments import distributed, loader, results
from experiments.configs import ConfigError
from experiments.train import smoke
from tests.procs import running

PY = sys.executable


def _cmd(*args):
    return [PY, "-m", "experiments", "train", "--preset", "smoke", *args]


# --------------------------------------------------------------------------- sharding (no JAX processes)

class _IndexSource:
    """Images whose label is their own index, so a batch says which samples it holds."""

    def __init__(self, n, size):
        self.n, self.size = n, size

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"image": np.full((self.size, self.size, 3), i % 256, np.uint8), "label": np.int32(i)}


@pytest.mark.latest
@pytest.mark.parametrize("count", [1, 2, 3])
def test_shards_see_every_sample_exactly_once_per_epoch(monkeypatch, count):
    n, local_batch = 48, 4
    monkeypatch.setattr(loader, "build_source", lambda cfg: _IndexSource(cfg.num_samples, cfg.image_size))
    epochs = {0: [], 1: []}
    for i in range(count):
        cfg = loader.LoaderConfig(num_samples=n, image_size=8, batch_size=local_batch, prefetch_buffer_size=0,
                                  shard_index=i, shard_count=count)
        it = iter(loader.build_dataset(cfg, stage_timing=False))
        per_epoch = n // count // local_batch
        for e in (0, 1):
            seen = [int(x) for _ in range(per_epoch) for x in next(it)["label"]]
            assert len(set(seen)) == len(seen) == n // count  # no repeats within a shard's epoch
            epochs[e] += seen
    for e in (0, 1):  # together the shards hold every sample once, every epoch
        assert sorted(epochs[e]) == list(range(n))
    # what a training process's loader gets: its shard, and batch_size / num_processes samples a step
    cfgs = distributed.check_launch(smoke(), 2, None)
    lc = [c.loader_config(i) for i, c in enumerate(cfgs)]
    assert [(c.shard_index, c.shard_count, c.batch_size) for c in lc] == [(0, 2, 16), (1, 2, 16)]


# ---------------------------------------------------------------------------------- bad input

@pytest.mark.latest
@pytest.mark.parametrize("args, names", [
    (["--num_processes=0"], "num_processes=0"),
    (["--num_processes=3"], "batch_size=32"),
    (["--num_processes=2", "--coordinator=127.0.0.1:1234", "--process_id=2"], "process_id=2"),
    (["--num_processes=2", "--process_id=1"], "process_id=1"),
    (["--num_processes=2", "--coordinator=127.0.0.1"], "coordinator='127.0.0.1'"),
    (["--num_processes=2", "--feed=grain_device_put"], "feed='grain_device_put'"),
])
def test_bad_input_is_one_line_before_any_work(capsys, args, names):
    assert cli.main(["train", "--preset", "smoke", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and names in err and "\n" not in err


@pytest.mark.latest
def test_per_process_overrides_are_checked():
    cfgs = distributed.check_launch(smoke(), 2, {1: {"augment_cost": 8}})
    assert [c.augment_cost for c in cfgs] == [0, 8] and all(c.num_processes == 2 for c in cfgs)
    with pytest.raises(ConfigError, match="per_process=2"):
        distributed.check_launch(smoke(), 2, {2: {"augment_cost": 8}})
    with pytest.raises(ConfigError, match="width"):
        distributed.check_launch(smoke(), 2, {1: {"width": 8}})


def test_busy_port_is_one_line(capsys, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.monotonic()
        rc = cli.main(["train", "--preset", "smoke", "--num_processes=2", f"--coordinator=127.0.0.1:{port}",
                       f"--results_root={tmp_path}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and time.monotonic() - t0 < 5
    assert err[-1].startswith("error: ") and f"port {port} is not free" in err[-1]


def test_a_port_whose_last_connection_lingers_is_free_for_the_coordinator():
    # a rerun on the same --coordinator port: the earlier run's connections sit in TIME_WAIT, which the
    # coordinator's server (SO_REUSEADDR) binds over; the check must not refuse it
    with socket.socket() as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        c = socket.create_connection(("127.0.0.1", port))
        conn, _ = srv.accept()
        conn.close()  # the server side closes first: its end lingers in TIME_WAIT
        c.close()
    distributed.check_port_free("127.0.0.1", port)


def test_a_truncated_error_file_falls_back_to_the_log(tmp_path):
    (tmp_path / "error_0.json").write_text('{"error": "ValueError: bad')  # cut off mid-write
    (tmp_path / "process_0.log").write_text("starting\nE1123 12:00:00.0 x.cc:1] the real cause\n")
    what, err = distributed.describe_exit(tmp_path, 0, 1, False)
    assert what == "exited with code 1" and "the real cause" in err


def test_unreachable_coordinator_is_one_line_within_its_timeout(tmp_path):
    port = distributed.free_port()
    t0 = time.monotonic()
    p = subprocess.run(_cmd("--num_processes=2", "--process_id=1", f"--coordinator=127.0.0.1:{port}",
                            "--init_timeout_s=2", f"--results_root={tmp_path}"),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and time.monotonic() - t0 < 30
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("error: process 1:") and f"127.0.0.1:{port} did not answer within 2 s" in last
    assert "Traceback" not in p.stderr


# ------------------------------------------------------------------------------ one real run

@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    root = tmp_path_factory.mktemp("mp")
    cache = tmp_path_factory.mktemp("mp-cache")
    p = subprocess.run(_cmd("--num_processes=2", f"--results_root={root}", f"--cache_dir={cache}"),
                       capture_output=True, text=True, timeout=240)
    return p, root


def test_two_processes_write_one_row_and_a_table_per_process(two_processes):
    p, root = two_processes
    assert p.returncode == 0, p.stderr[-3000:]
    (run,) = list((root / "train").iterdir())
    rows = results.read_csv_rows(run / "rows.csv")
    procs = results.read_csv_rows(run / "processes.csv")
    assert len(rows) == 1
    r = rows.iloc[0]
    assert r.status == "ok" and r.num_processes == 2 and r.batch_size == 32 and r.trace_count == 1
    assert r.device_count == 2 and r.num_devices_used == 2 and np.isfinite(r.final_loss)
    assert sorted(procs.process_id) == [0, 1] and (procs.config_id == r.config_id).all()
    for col in ("samples_per_s", "step_s_median", "data_wait_s_median", "data_wait_frac"):
        assert procs[col].notna().all()
    assert (procs.samples_per_s > 0).all() and procs.data_wait_frac.between(0, 1).all()
    assert r.process_samples_per_s_min == pytest.approx(procs.samples_per_s.min())
    # each process read its own shard: shard i of 2, half the batch
    assert list(procs.sort_values("process_id").shard_index) == [0, 1] and (procs.shard_count == 2).all()
    assert (procs.local_batch_size == 16).all() and (procs.steps_measured == r.steps_measured).all()
    if len(os.sched_getaffinity(0)) >= 2:
        assert procs.cpus.nunique() == 2 and not procs.cpus_shared.any()


def test_the_step_batch_is_one_global_array_sharded_over_processes(two_processes):
    p, root = two_processes
    assert p.returncode == 0, p.stderr[-3000:]
    (run,) = list((root / "train").iterdir())
    procs = results.read_csv_rows(run / "processes.csv")
    # global shape = batch_size; each process holds only its own 16 rows
    assert (procs.global_batch_shape == "32x32x32x3").all()
    assert (procs.local_shard_shapes == "16x32x32x3").all()
    assert not procs.batch_fully_addressable.any()


# ------------------------------------------------------------------------------------ faults

def _descendants(pid):
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _ranks(launcher, timeout=60.0, with_worker=False):
    """The launcher's rank processes, once started (and, with ``with_worker``, once each has a loader
    worker, i.e. is past compiling and in the fed loop)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ranks = [c for c in _descendants(launcher.pid) if "experiments.distributed" in " ".join(c.cmdline())]
        if len(ranks) == 2 and (not with_worker or all(
                any("resource_tracker" not in " ".join(g.cmdline()) for g in _descendants(r.pid)) for r in ranks)):
            return sorted(ranks, key=lambda r: int(r.cmdline()[-1]))
        time.sleep(0.1)
    raise AssertionError("the ranks did not start")


def _gone(procs, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = running(procs)
        if not alive:
            return []
        time.sleep(0.1)
    return alive


def _shm_mapped(procs) -> set[str]:
    """The /dev/shm names (Grain's shared-memory batches, multiprocessing's semaphores) these
    processes have mapped: the segments that are theirs on a machine where others run too."""
    out = set()
    for p in procs:
        try:
            with open(f"/proc/{p.pid}/maps") as f:
                out |= {ln.split("/dev/shm/", 1)[1].strip().removesuffix(" (deleted)") for ln in f
                        if "/dev/shm/" in ln and not ln.rstrip().endswith("(deleted)")}
        except OSError:
            pass
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self") or not os.path.isdir("/dev/shm"), reason="needs Linux /proc")
def test_a_killed_process_stops_every_process_and_names_it(tmp_path, data_cache):
    launcher = subprocess.Popen(_cmd("--num_processes=2", "--num_workers=1", "--min_measure_s=120",
                                     f"--results_root={tmp_path}", f"--cache_dir={data_cache}"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        ranks = _ranks(launcher, with_worker=True)
        deadline = time.monotonic() + 60
        while not all(_shm_mapped([r]) for r in ranks) and time.monotonic() < deadline:
            time.sleep(0.1)  # until batches flow through shared memory (the fed loop)
        every = [d for r in ranks for d in [r] + _descendants(r.pid)]
        theirs = set()
        for _ in range(5):
            theirs |= _shm_mapped(every)
            time.sleep(0.1)
        ranks[1].send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        out, err = launcher.communicate(timeout=distributed.STOP_BOUND_S + 20)
        took = time.monotonic() - t0
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == 1
    assert took < distributed.STOP_BOUND_S + 5, took
    first = [ln for ln in err.splitlines() if ln.startswith("error:")][0]
    assert "process 1 of 2 was killed by SIGKILL" in first
    assert not _gone(every), "orphaned processes"
    assert not list((tmp_path / "train").glob("*/rows.csv"))
    assert theirs, "the ranks' loader workers map shared memory: the check below is not empty"
    deadline = time.monotonic() + 10
    while (left := theirs & loader.shm_segments()) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert not left, f"shared memory left in /dev/shm: {sorted(left)}"


def test_a_hung_process_is_named_and_every_process_stops(tmp_path, data_cache):
    # SIGSTOP: alive but silent. JAX's coordination service misses its heartbeats and aborts the
    # others; the launcher names the silent process and stops it too.
    launcher = subprocess.Popen(_cmd("--num_processes=2", "--num_workers=1", "--min_measure_s=120",
                                     f"--results_root={tmp_path}", f"--cache_dir={data_cache}"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        ranks = _ranks(launcher, with_worker=True)
        every = [d for r in ranks for d in [r] + _descendants(r.pid)]
        ranks[1].send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        _, err = launcher.communicate(timeout=distributed.HEARTBEAT_TIMEOUT_S + distributed.STOP_BOUND_S + 30)
        took = time.monotonic() - t0
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == 1, err[-2000:]
    assert took < distributed.HEARTBEAT_TIMEOUT_S + distributed.STOP_BOUND_S + 10, took
    first = [ln for ln in err.splitlines() if ln.startswith("error:")][0]
    assert "process 1 of 2 stopped responding" in first, first
    assert not _gone(every), "orphaned processes"


def _sigint_default():
    # A terminal's Ctrl-C reaches a foreground command whose SIGINT is at its default. A test suite
    # started in the background (`make test &`, nohup) has SIGINT ignored, and the launcher would
    # inherit that and never see the signal (seen: the launcher still in its wait loop 30 s after
    # SIGINT, /proc status SigIgn 0x1001007), so the launcher gets the default back, as from a shell.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_every_process_and_exits_130(tmp_path, data_cache):
    launcher = subprocess.Popen(_cmd("--num_processes=2", "--min_measure_s=120", f"--results_root={tmp_path}",
                                     f"--cache_dir={data_cache}"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                preexec_fn=_sigint_default)
    try:
        ranks = _ranks(launcher)
        time.sleep(1.0)
        every = [d for r in ranks for d in [r] + _descendants(r.pid)]
        os.killpg(launcher.pid, signal.SIGINT)
        t0 = time.monotonic()
        _, err = launcher.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == 130, err[-2000:]
    assert took < 2 * distributed.KILL_WAIT_S + 3, took
    assert "interrupted" in err
    assert not _gone(every), "orphaned processes"


# ---------------------------------------------------------------------------- the collective probe

@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_allreduce_probe_times_a_real_all_reduce_and_leaves_no_process():
    started = []
    t0 = time.monotonic()
    table = distributed.allreduce_probe(2, [64, [4096, 40, 4]], repeats=5, warmup=1, timeout_s=60,
                                        on_start=lambda procs: started.extend(psutil.Process(p.pid) for p in procs))
    assert time.monotonic() - t0 < 30
    assert table.size_bytes.tolist() == [64, 4140] and table.operands.tolist() == [1, 3]
    assert (table.num_processes == 2).all() and (table.devices == 2).all()
    assert (table.collective == "all-reduce").all() and (table.repeats == 5).all()
    assert (table.seconds_median > 0).all() and (table.seconds_p90 >= table.seconds_median).all()
    assert len(started) == 2 and not _gone(started, timeout=2), "orphaned processes"


@pytest.mark.latest
def test_allreduce_probe_bad_input_is_one_line():
    for kw, name in (({"num_processes": 1, "sizes_bytes": [64]}, "num_processes=1"),
                     ({"num_processes": 2, "sizes_bytes": [2]}, "sizes_bytes=[2]"),
                     ({"num_processes": 2, "sizes_bytes": []}, "sizes_bytes=[]"),
                     ({"num_processes": 2, "sizes_bytes": [[64, 2]]}, "sizes_bytes=[[64, 2]]"),
                     ({"num_processes": 2, "sizes_bytes": [64], "repeats": 0}, "repeats=0")):
        with pytest.raises(ConfigError, match=name.replace("[", r"\[").replace("]", r"\]")) as e:
            distributed.allreduce_probe(**kw)
        assert "\n" not in str(e.value)
