"""Data-parallel training over several JAX processes (``jax.distributed``), on one machine or a cluster.

``launch(cfg, num_processes, per_process=..., timeout_s=..., results_dir=...) -> MultiResult`` starts
``num_processes`` local processes (``python -m experiments.distributed DIR I``), joined through a
coordinator on a free 127.0.0.1 port and each pinned (``os.sched_setaffinity``) to its share of the
cores; with more processes than cores they share cores round-robin, and the table says so
(``cpus_shared``). ``join(...)`` is one process of a cluster: ``--coordinator=HOST:PORT
--process_id=I --num_processes=N`` on every host, or nothing at all where the scheduler's
environment (SLURM, Open MPI, ...) lets ``jax.distributed.initialize()`` find them itself.

Each process runs ``train.run_detailed`` on its own Grain loader (shard ``process_index`` of
``num_processes``, ``batch_size / num_processes`` samples a step); the step's batch is one global
array over every process's devices (``jax.make_array_from_process_local_data``) and the same jitted
step averages the gradients through XLA's collectives (gloo on CPU). The fed loop and the bound stop
at the same step on every process (process 0 decides, ``train.measure_window``).

Per-process statistics reach process 0 through JAX itself (``multihost_utils.process_allgather`` of
each process's statistics as JSON bytes): the same path works across hosts, where no launcher could
read the other processes' files. Process 0 then writes the run's row (process 0's measurements, the
global batch) and the per-process table (``processes``: one row per process).

Faults are bounded in time. The launcher polls its processes every ``POLL_S``; when one fails (a
non-zero exit or a signal) the others get ``GRACE_S`` to exit on their own (a dead peer ends their
gloo collectives with an error), then SIGTERM, then after ``KILL_WAIT_S`` SIGKILL of each process
group: every process is gone within ``STOP_BOUND_S`` of the first failure, and the launcher raises
``DistributedError`` naming the process that failed first. A process that hangs without dying stops
sending heartbeats: JAX's coordination service ends the others after ``HEARTBEAT_TIMEOUT_S`` (they
abort, SIGABRT, naming the silent task in their logs), the launcher names that process and stops it.
A process whose Python code stalls while its heartbeat thread runs is ended by its own bounds: a
loader that delivers nothing for ``data_timeout_s`` raises in that process (whose exit then stops the
others); ``timeout_s`` bounds the whole run (a sweep passes its ``config_timeout_s``), and without
it a stall elsewhere is bounded only by gloo's own timeouts. Each process is a session leader (its loader workers in its
group) and dies with the launcher (PR_SET_PDEATHSIG); a rank is killed before its group, so that its
multiprocessing resource tracker unlinks the shared memory its Grain workers left.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from experiments import configs
from experiments.configs import ConfigError, check
from experiments.train import TrainConfig

HEARTBEAT_TIMEOUT_S = 10   # jax.distributed: a process silent this long is declared dead
SHUTDOWN_TIMEOUT_S = 10    # jax.distributed: the exit barrier waits at most this long
INIT_TIMEOUT_S = 60.0      # jax.distributed.initialize: every process must join within this
POLL_S = 0.1
GRACE_S = 3.0
KILL_WAIT_S = 2.0
STOP_BOUND_S = POLL_S + GRACE_S + 2 * KILL_WAIT_S + 1.0  # first failure → every process gone

# Knobs one process may set differently from the others (its loader and feed). The rest shape the
# step or the windows, which every process must share.
PER_PROCESS_KNOBS = ("num_workers", "per_worker_buffer_size", "read_threads", "read_buffer_size",
                     "prefetch_buffer_size", "augment_cost", "feed", "cpu_buffer_size", "device_buffer_size",
                     "source")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


class DistributedError(RuntimeError):
    """A multi-process run failed; the first line names the process."""


@dataclasses.dataclass
class MultiResult:
    """``row``: the run's one-row DataFrame (process 0's measurements on the global batch);
    ``processes``: one row per process (``process_id``, local ``samples_per_s``, ``step_s_median``,
    ``data_wait_s_median``, ``data_wait_frac``, its knobs, its cores, its batch layout); process 0's
    ``steps`` and ``grain_stats``."""

    row: pd.DataFrame
    processes: pd.DataFrame
    steps: pd.DataFrame
    grain_stats: pd.DataFrame


# ------------------------------------------------------------------------------------- checking

def parse_coordinator(text: str) -> tuple[str, int]:
    """``HOST:PORT`` → (host, port); ConfigError naming the value otherwise.

    >>> parse_coordinator("10.0.0.1:1234")
    ('10.0.0.1', 1234)
    """
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"coordinator={text!r}: expected HOST:PORT with a port in 1..65535, "
                          "e.g. --coordinator=10.0.0.1:1234")
    return host.strip("[]"), int(port)


def check_launch(cfg: TrainConfig, num_processes: int, per_process: dict | None) -> list[TrainConfig]:
    """Each process's TrainConfig, or ConfigError (bad count, batch, process id or knob)."""
    check(isinstance(num_processes, int) and not isinstance(num_processes, bool) and num_processes >= 1,
          "num_processes", num_processes, "must be an integer >= 1")
    base = dataclasses.replace(cfg, num_processes=num_processes)  # __post_init__: batch_size divisible
    out = []
    per_process = dict(per_process or {})
    for pid in per_process:
        check(isinstance(pid, int) and 0 <= pid < num_processes, "per_process", pid,
              f"no such process: ids are 0..{num_processes - 1}")
    for i in range(num_processes):
        over = dict(per_process.get(i) or {})
        for k in over:
            check(k in PER_PROCESS_KNOBS, f"per_process[{i}]", k,
                  f"only loader and feed knobs may differ between processes: {', '.join(PER_PROCESS_KNOBS)}")
        out.append(configs.apply_overrides(base, over))
    return out


def cpu_shares(n: int, cores=None) -> list[tuple[tuple[int, ...], bool]]:
    """(cores, shared) for each of ``n`` processes: contiguous blocks of ``cores`` when there are
    enough, else one core each, round-robin (``shared`` true). No cores known: no pinning.

    >>> cpu_shares(2, [0, 1, 2])
    [((0, 1), False), ((2,), False)]
    >>> cpu_shares(3, [0, 1])
    [((0,), True), ((1,), True), ((0,), True)]
    """
    if cores is None:
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    cores = [int(c) for c in cores]
    if not cores:
        return [((), False)] * n
    if n <= len(cores):
        return [(tuple(int(c) for c in part), False) for part in np.array_split(cores, n)]
    return [((cores[i % len(cores)],), True) for i in range(n)]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_port_free(host: str, port: int) -> None:
    """DistributedError if ``port`` cannot be bound (the coordinator listens on every interface)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # as the coordinator's own server binds: a port whose last connections linger in TIME_WAIT
        # (a rerun on the same --coordinator port) is free for it
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError as e:
            raise DistributedError(f"coordinator {host}:{port}: port {port} is not free ({e.strerror}); choose "
                                   "another --coordinator port, or leave --coordinator out to use a free one") from None


def wait_reachable(host: str, port: int, timeout_s: float) -> None:
    """Waits until the coordinator accepts a TCP connection; DistributedError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(1.0, timeout_s)):
                return
        except OSError as e:
            if time.monotonic() > deadline:
                raise DistributedError(f"coordinator {host}:{port} did not answer within {timeout_s:g} s "
                                       f"(init_timeout_s; {e.strerror or e}): start process 0 first, or check "
                                       "the address and the firewall") from None
            time.sleep(0.2)


def cluster_env() -> str | None:
    """The scheduler whose environment lets ``jax.distributed.initialize()`` find the processes
    itself (a multi-task SLURM step, an Open MPI job), or None."""
    if os.environ.get("SLURM_STEP_ID") is not None and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        return "slurm"
    if int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")) > 1:
        return "openmpi"
    return None


# ----------------------------------------------------------------------------- inside a process

def initialize(coordinator: str | None, num_processes: int | None, process_id: int | None,
               init_timeout_s: float = INIT_TIMEOUT_S) -> None:
    """``jax.distributed.initialize`` with gloo collectives on CPU and bounded timeouts; with no
    ``coordinator``, JAX's own cluster detection. A busy port or a silent coordinator is a one-line
    ``DistributedError`` within ``init_timeout_s``."""
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    kw = {"initialization_timeout": int(max(1, init_timeout_s)), "heartbeat_timeout_seconds": HEARTBEAT_TIMEOUT_S,
          "shutdown_timeout_seconds": SHUTDOWN_TIMEOUT_S}
    accepted = inspect.signature(jax.distributed.initialize).parameters
    kw = {k: v for k, v in kw.items() if k in accepted}
    if coordinator is None:
        jax.distributed.initialize(**kw)
        return
    host, port = parse_coordinator(coordinator)
    if process_id == 0:
        check_port_free(host, port)
    else:
        wait_reachable(host, port, init_timeout_s)
    jax.distributed.initialize(coordinator_address=f"{host}:{port}", num_processes=num_processes,
                               process_id=process_id, **kw)


def _jsonable(o):
    return o.item() if hasattr(o, "item") else str(o)


def process_stats(cfg: TrainConfig, res, cpus=(), shared: bool = False, overrides: dict | None = None) -> dict:
    """This process's line of the per-process table."""
    import jax
    steps = res.steps
    fed = steps[(steps.phase == "fed") & ~steps.warmup.astype(bool)]
    wall = float(fed.step_time_s.sum())
    local_batch = cfg.batch_size // cfg.num_processes
    r = res.row.iloc[0]
    return {"process_id": jax.process_index(), "host": socket.gethostname(), "pid": os.getpid(),
            "cpus": ",".join(map(str, cpus)), "cpus_shared": bool(shared),
            "shard_index": jax.process_index(), "shard_count": cfg.num_processes,
            "local_batch_size": local_batch, "local_devices": jax.local_device_count(),
            "steps_measured": len(fed), "samples_per_s": local_batch * len(fed) / wall,
            "step_s_median": float(fed.step_time_s.median()),
            "step_s_p90": float(fed.step_time_s.quantile(0.9)),
            "data_wait_s_median": float(fed.data_wait_s.median()),
            "data_wait_frac": float(fed.data_wait_s.sum()) / wall,
            "compute_s_median": float(fed.compute_s.median()),
            "time_to_first_batch_s": float(r.time_to_first_batch_s), "compile_s": float(r.compile_s),
            "host_cpu_util": float(r.host_cpu_util), "peak_rss_bytes": int(r.peak_rss_bytes),
            "shm_segments_left": int(r.shm_segments_left), **res.batch_layout,
            **{k: getattr(cfg, k) for k in PER_PROCESS_KNOBS},
            "overrides": json.dumps(overrides or {}, sort_keys=True)}


def gather(stats: dict) -> list[dict]:
    """Every process's ``stats`` on every process, in process order (a JAX all-gather of JSON bytes)."""
    from jax.experimental import multihost_utils
    blob = np.frombuffer(json.dumps(stats, default=_jsonable).encode(), np.uint8)
    sizes = np.asarray(multihost_utils.process_allgather(np.array([blob.size], np.int32))).reshape(-1)
    buf = np.zeros(int(sizes.max()), np.uint8)
    buf[:blob.size] = blob
    every = np.asarray(multihost_utils.process_allgather(buf))
    return [json.loads(bytes(every[i, :int(sizes[i])])) for i in range(len(sizes))]


def global_row(row0: dict, base: TrainConfig, procs: list[dict]) -> dict:
    """Process 0's row with the run's own knobs and what the processes did, side by side."""
    from experiments import results
    flat = configs.to_flat_dict(base)
    sps = [p["samples_per_s"] for p in procs]
    wait = [p["data_wait_frac"] for p in procs]
    over = {p["process_id"]: json.loads(p["overrides"]) for p in procs if json.loads(p["overrides"])}
    return {**row0, **flat, "config_id": results.config_id(flat),
            "process_samples_per_s_min": min(sps), "process_samples_per_s_max": max(sps),
            "process_data_wait_frac_max": max(wait), "process_data_wait_frac_max_id": int(np.argmax(wait)),
            "per_process_overrides": json.dumps(over, sort_keys=True)}


def run_process(cfg: TrainConfig, base: TrainConfig | None = None, cpus=(), shared: bool = False,
                overrides: dict | None = None):
    """Runs this process's part; returns (RunResult, MultiResult on process 0 else None)."""
    import jax
    from experiments import train
    res = train.run_detailed(cfg)
    procs = gather(process_stats(cfg, res, cpus, shared, overrides))
    if jax.process_index() != 0:
        return res, None
    row = global_row(res.row.iloc[0].to_dict(), base or cfg, procs)
    return res, MultiResult(pd.DataFrame([row]), pd.DataFrame(procs), res.steps, res.grain_stats)


def write_results(out_dir: Path, multi: MultiResult) -> None:
    """Appends the row to ``rows.csv`` and the per-process rows to ``processes.csv`` (tagged with the
    row's ``config_id``), and process 0's steps and Grain statistics likewise."""
    from experiments import results
    out_dir = Path(out_dir)
    row = multi.row.iloc[0].to_dict()
    cid = row["config_id"]
    results.RowWriter(out_dir).append(row)
    for name, frame in (("processes", multi.processes), ("steps", multi.steps), ("grain_stats", multi.grain_stats)):
        if frame is not None and len(frame):
            w = results.RowWriter(out_dir, name)
            for rec in frame.assign(config_id=cid).to_dict("records"):
                w.append(rec)


def allreduce_timings(sizes_bytes, repeats: int, warmup: int) -> list[dict]:
    """Inside a process of a launch: times one jitted all-reduce per size over every process's devices.

    A size is B (one operand) or a list of B's (the operands of one all-reduce, as the gradients of
    a model's parameters are: XLA combines them into one tuple ``all-reduce``, but gloo on CPU then
    reduces operand by operand, so each operand pays the collective's latency). Each operand of B
    bytes is a global float32 array of shape (devices, B / 4) sharded on axis 0 (each device holds
    B bytes, as each holds a full gradient in the data-parallel step), summed over axis 0 into a
    replicated result: XLA lowers that to an ``all-reduce`` (checked on the compiled HLO). ``warmup`` calls (compilation included) are left out; before each of the
    ``repeats`` timed calls every process meets at a barrier (``sync_global_devices``), and each
    call is timed to ``block_until_ready``. The processes' times reach every process (``gather``);
    a repeat's time is the shortest over the processes (the last to arrive waits for no one: the
    collective's own time, not the skew at the barrier). Returns one dict per size.
    """
    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    devices = np.array(jax.devices())
    mesh = Mesh(devices, ("processes",))
    src, dst = NamedSharding(mesh, P("processes")), NamedSharding(mesh, P())
    reduce = jax.jit(lambda xs: [jnp.sum(x, axis=0) for x in xs], out_shardings=dst)
    mine = []
    for k, b in enumerate(sizes_bytes):
        operands = [int(v) // 4 for v in (b if isinstance(b, (list, tuple)) else [b])]
        local = [np.full((jax.local_device_count(), m), jax.process_index() + 1, np.float32) for m in operands]
        xs = [jax.make_array_from_process_local_data(src, v, (len(devices), m)) for v, m in zip(local, operands)]
        compiled = reduce.lower(xs).compile()  # compiled once; the program checked is the one timed
        if "all-reduce" not in compiled.as_text():
            raise RuntimeError(f"size_bytes={b}: the compiled reduction holds no all-reduce")
        for _ in range(warmup):
            ys = jax.block_until_ready(compiled(xs))
        expect = sum((d.process_index + 1) for d in devices)
        got = [float(np.asarray(y.addressable_data(0))[0]) for y in ys]
        if any(g != expect for g in got):
            raise RuntimeError(f"size_bytes={b}: the all-reduce gave {got}, expected {expect} for every operand")
        times = []
        for r in range(repeats):
            multihost_utils.sync_global_devices(f"allreduce-{k}-{r}")
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(xs))
            times.append(time.perf_counter() - t0)
        mine.append(times)
    every = gather({"times": mine})
    out = []
    for k, b in enumerate(sizes_bytes):
        t = np.array([p["times"][k] for p in every], float)  # (processes, repeats)
        per_repeat = t.min(axis=0)
        operands = [4 * (int(v) // 4) for v in (b if isinstance(b, (list, tuple)) else [b])]
        out.append({"num_processes": jax.process_count(), "devices": len(devices), "size_bytes": sum(operands),
                    "operands": len(operands),
                    "seconds_median": float(np.median(per_repeat)),
                    "seconds_p90": float(np.quantile(per_repeat, 0.9)),
                    "seconds_min": float(per_repeat.min()),
                    "seconds_slowest_process_median": float(np.median(t.max(axis=0))),
                    "repeats": int(repeats), "warmup": int(warmup), "collective": "all-reduce",
                    "platform": devices[0].platform})
    return out


def worker_main(argv: list[str]) -> int:
    """``python -m experiments.distributed DIR I``: process I of a launch (DIR/launch.json; its
    ``mode``: ``train``, a training run, or ``allreduce``, the collective probe)."""
    d, i = Path(argv[0]), int(argv[1])
    from experiments.loader import die_with_parent
    die_with_parent()
    spec = json.loads((d / "launch.json").read_text())
    cpus = tuple(spec["cpus"][i])
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)  # before JAX starts its thread pools
    try:
        if spec.get("mode", "train") == "allreduce":
            initialize(spec["coordinator"], spec["num_processes"], i, spec["init_timeout_s"])
            rows = allreduce_timings(spec["sizes_bytes"], spec["repeats"], spec["warmup"])
            if i == 0:
                rows = [{**r, "cpus_shared": bool(any(spec["shared"]))} for r in rows]
                tmp = d / "allreduce.json.tmp"
                tmp.write_text(json.dumps(rows))
                os.replace(tmp, d / "allreduce.json")
            return 0
        cfg = TrainConfig(**json.loads((d / f"config_{i}.json").read_text()))
        base = TrainConfig(**spec["base_config"])
        initialize(spec["coordinator"], spec["num_processes"], i, spec["init_timeout_s"])
        res, multi = run_process(cfg, base, cpus, spec["shared"][i], spec["overrides"].get(str(i), {}))
        if multi is not None:
            for name in ("processes", "steps", "grain_stats"):
                getattr(multi, name).to_csv(d / f"{name}.csv", index=False)
            tmp = d / "row.json.tmp"
            tmp.write_text(json.dumps(multi.row.iloc[0].to_dict(), default=_jsonable))
            os.replace(tmp, d / "row.json")
    except BaseException as e:  # noqa: BLE001 — reported to the launcher; a peer's collectives then fail
        tmp = d / f"error_{i}.json.tmp"
        tmp.write_text(json.dumps({"error": f"{type(e).__name__}: {e}".strip(), "traceback": traceback.format_exc()}))
        os.replace(tmp, d / f"error_{i}.json")  # whole or absent, even if this process is killed meanwhile
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # not jax.distributed.shutdown: its barrier would wait for the failed peers
    return 0


def join(cfg: TrainConfig, coordinator: str | None, process_id: int | None,
         init_timeout_s: float = INIT_TIMEOUT_S) -> tuple:
    """One process of a cluster (``coordinator`` None: JAX's own detection). Returns (RunResult,
    MultiResult on process 0 else None); the caller writes process 0's results."""
    import jax
    initialize(coordinator, cfg.num_processes if coordinator is not None else None, process_id, init_timeout_s)
    if coordinator is None:
        cfg = dataclasses.replace(cfg, num_processes=jax.process_count())
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else ()
    return run_process(cfg, cfg, cpus, False, {})


# ----------------------------------------------------------------------------------- launching

def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def _alive(p: subprocess.Popen) -> bool:
    return p.poll() is None


def _group_empty(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def stop_all(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each live process, SIGKILL it after KILL_WAIT_S, then SIGKILL whatever is left in its
    process group (its loader workers die with it anyway: PR_SET_PDEATHSIG)."""
    live = [p for p in procs if _alive(p)]
    for p in live:
        try:
            os.kill(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + KILL_WAIT_S
    while any(_alive(p) for p in live) and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in live:
        if _alive(p):
            p.kill()
        p.wait()
    # the rank is gone; its resource tracker unlinks leaked shared memory, then exits
    deadline = time.monotonic() + KILL_WAIT_S
    while not all(_group_empty(p.pid) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in procs:
        if not _group_empty(p.pid):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


_COLLECTIVE_ERR = re.compile(r"gloo|all-reduce|collective|connection reset|connection closed|coordination|"
                             r"heartbeat|barrier", re.I)
_HEARTBEAT = re.compile(r"Task (\d+) heartbeat timeout|stopped sending heartbeats\):\s*(\d+)")
# what JAX's client prints when it aborts its own process because a peer failed
_PEER_ABORT = re.compile(r"distributed service detected fatal errors|another task died", re.I)


def describe_exit(d: Path, i: int, rc: int | None, stopped: bool) -> tuple[str, str]:
    """(short description, error text) of rank i's end, from the launch folder ``d``: its error file
    (written whole by the rank), else the last fatal line of its log."""
    err = ""
    ef = d / f"error_{i}.json"
    try:
        err = json.loads(ef.read_text())["error"].splitlines()[0][:300] if ef.exists() else ""
    except (ValueError, KeyError, IndexError, OSError):
        err = ""
    if not err:
        log = d / f"process_{i}.log"
        lines = [ln for ln in (log.read_text(errors="replace").splitlines() if log.exists() else [])
                 if ln.strip() and not ln.startswith("    @")]
        fatal = [ln for ln in lines if ln.startswith(("F", "E")) and re.match(r"^[FE]\d{4}", ln)]
        err = ((fatal or lines or [""])[-1])[:300]
    if rc is None:
        what = "was still running"
    elif stopped:
        what = f"was stopped by the launcher ({_signal_name(rc) if rc < 0 else f'exit code {rc}'})"
    elif rc < 0:
        what = f"was killed by {_signal_name(rc)}" + (" (out of memory?)" if rc == -signal.SIGKILL else "")
    else:
        what = f"exited with code {rc}"
    return what, err


def _heartbeat_named(d: Path, failed: list[tuple[float, int, int]], n: int) -> int | None:
    """The process JAX's coordination service named as unhealthy (no heartbeats) in a failed
    process's log, if any."""
    for _, i, _rc in failed:
        log = d / f"process_{i}.log"
        m = _HEARTBEAT.search(log.read_text(errors="replace")) if log.exists() else None
        if m and 0 <= int(m.group(1) or m.group(2)) < n:
            return int(m.group(1) or m.group(2))
    return None


def _culprit(d: Path, failed: list[tuple[float, int, int]], n: int) -> int:
    """The process whose failure came first in cause: the one JAX's heartbeats named (a process
    that hung or died: the others then abort on their own), else one killed by a signal other than
    that abort, else one whose error is not a failed collective (a peer's symptom), else the first."""
    named = _heartbeat_named(d, failed, n)
    if named is not None:
        return named
    texts = {i: describe_exit(d, i, rc, False)[1] for _, i, rc in failed}
    for _, i, rc in failed:
        if rc < 0 and not (rc == -signal.SIGABRT and _PEER_ABORT.search(texts[i])):
            return i
    for _, i, rc in failed:
        if texts[i] and not _COLLECTIVE_ERR.search(texts[i]):
            return i
    return failed[0][1]


def _describe(d: Path, procs, failed, stopped: set[int], culprit: int, lead: str) -> str:
    lines = [lead]
    for i, p in enumerate(procs):
        what, err = describe_exit(d, i, p.returncode, i in stopped)
        lines.append(f"  process {i} (pid {p.pid}) {what}" + (f": {err}" if err else ""))
    return "\n".join(lines)


def run_local(num_processes: int, spec: dict, *, files: dict[str, str] | None = None, collect=None,
              timeout_s: float | None = None, coordinator: str | None = None,
              init_timeout_s: float = INIT_TIMEOUT_S, on_start=None, work_dir=None):
    """Starts ``num_processes`` local ranks (``python -m experiments.distributed DIR I``), waits for
    every one of them under the fault bounds, and returns ``collect(DIR)`` (None without it).

    ``DIR/launch.json`` holds ``spec`` (its ``mode`` picks what a rank runs: ``train`` or
    ``allreduce``) with the coordinator, the process count and each rank's cores added; ``files``
    (name → text) are written beside it. Every rank is pinned, joined and stopped the same way
    whatever it runs. DIR is a fresh folder in ``work_dir`` (default: the system's temporary
    folder), removed at the end; a caller that may be killed before then passes a folder it cleans
    up itself (the sweep passes its job's folder). Raises ConfigError on bad input (before any
    process starts) and DistributedError when a rank fails or ``timeout_s`` passes (every rank
    then stopped).
    """
    check(isinstance(num_processes, int) and not isinstance(num_processes, bool) and num_processes >= 1,
          "num_processes", num_processes, "must be an integer >= 1")
    check(timeout_s is None or timeout_s > 0, "timeout_s", timeout_s, "must be a positive number of seconds or None")
    check(init_timeout_s > 0, "init_timeout_s", init_timeout_s, "must be a positive number of seconds")
    if coordinator is not None:
        host, port = parse_coordinator(coordinator)
        check(host in LOCAL_HOSTS, "coordinator", coordinator,
              "a local launch listens on this machine: use 127.0.0.1:PORT (or give --process_id to join a cluster)")
        check_port_free(host, port)
        address = f"127.0.0.1:{port}"
    else:
        address = f"127.0.0.1:{free_port()}"
    shares = cpu_shares(num_processes)
    d = Path(tempfile.mkdtemp(prefix="memsim-mp-", dir=work_dir))
    procs: list[subprocess.Popen] = []
    stopped: set[int] = set()
    try:
        (d / "launch.json").write_text(json.dumps(
            {"mode": "train", **spec, "coordinator": address, "num_processes": num_processes,
             "init_timeout_s": init_timeout_s, "cpus": [list(c) for c, _ in shares],
             "shared": [s for _, s in shares]}))
        for name, text in (files or {}).items():
            (d / name).write_text(text)
        from experiments.loader import die_with_parent
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for i in range(num_processes):
            with open(d / f"process_{i}.log", "wb") as log, warnings.catch_warnings():
                # A launcher that has loaded JAX gets JAX's warning that os.fork() and threads may
                # deadlock. It does not apply here: the child only sets PR_SET_PDEATHSIG
                # (die_with_parent) and then execs a fresh interpreter.
                warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
                procs.append(subprocess.Popen([sys.executable, "-m", "experiments.distributed", str(d), str(i)],
                                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                              env=env, start_new_session=True, preexec_fn=die_with_parent))
        if on_start is not None:
            on_start(procs)
        t0 = time.monotonic()
        failed: list[tuple[float, int, int]] = []
        while True:
            now = time.monotonic()
            for i, p in enumerate(procs):
                rc = p.poll()
                if rc not in (None, 0) and all(i != j for _, j, _ in failed):
                    failed.append((now, i, rc))
            if failed:
                deadline = failed[0][0] + GRACE_S
                while any(_alive(p) for p in procs) and time.monotonic() < deadline:
                    time.sleep(POLL_S)
                for i, p in enumerate(procs):
                    rc = p.poll()
                    if rc is None:
                        stopped.add(i)
                    elif rc != 0 and all(i != j for _, j, _ in failed):
                        failed.append((time.monotonic(), i, rc))
                stop_all(procs)
                culprit = _culprit(d, failed, num_processes)
                if culprit in stopped and _heartbeat_named(d, failed, num_processes) == culprit:
                    what = (f"stopped responding (no heartbeats for {HEARTBEAT_TIMEOUT_S} s: hung or stopped), "
                            f"so JAX ended the others")
                    err = ""
                else:
                    what, err = describe_exit(d, culprit, procs[culprit].returncode, culprit in stopped)
                raise DistributedError(_describe(
                    d, procs, failed, stopped, culprit,
                    f"process {culprit} of {num_processes} {what}" + (f" ({err})" if err else "")
                    + "; every process was stopped"))
            if all(p.returncode == 0 for p in procs):
                break
            if timeout_s is not None and now - t0 > timeout_s:
                stopped.update(i for i, p in enumerate(procs) if _alive(p))
                stop_all(procs)
                raise DistributedError(_describe(
                    d, procs, failed, stopped, -1,
                    f"timed out after {timeout_s:g} s (timeout_s) with process(es) "
                    f"{', '.join(map(str, sorted(stopped)))} still running; every process was stopped"))
            time.sleep(POLL_S)
        return collect(d) if collect is not None else None
    finally:
        if procs:
            stop_all(procs)
        shutil.rmtree(d, ignore_errors=True)


def launch(cfg: TrainConfig, num_processes: int, *, per_process: dict[int, dict] | None = None,
           timeout_s: float | None = None, results_dir=None, coordinator: str | None = None,
           init_timeout_s: float = INIT_TIMEOUT_S, on_start=None, work_dir=None) -> MultiResult:
    """Runs ``cfg`` as ``num_processes`` local JAX processes; returns the run's row and per-process table.

    Args:
        cfg: the run (its ``num_processes`` is replaced by ``num_processes``).
        num_processes: processes to start; ``cfg.batch_size`` must be divisible by it.
        per_process: process id → TrainConfig overrides for that process only (``PER_PROCESS_KNOBS``),
            e.g. ``{1: {"augment_cost": 8}}``.
        timeout_s: the whole run's limit (None: none beyond the fault bounds).
        results_dir: a run folder to append ``rows.csv`` and ``processes.csv`` (and steps,
            grain_stats) to.
        coordinator: ``127.0.0.1:PORT`` to use that port (default: a free one).
        init_timeout_s: every process must have joined within this.
        on_start: called with the list of started ``Popen`` objects.
        work_dir: where the processes exchange their files (see :func:`run_local`).

    Raises:
        ConfigError: bad input, before any process starts.
        DistributedError: a process failed or the run timed out; every process has been stopped.
    """
    from experiments import data as data_lib
    cfgs = check_launch(cfg, num_processes, per_process)
    base = dataclasses.replace(cfg, num_processes=num_processes)
    data_lib.check_cache_dir(base.cache_dir)

    def collect(d: Path) -> MultiResult:
        if not (d / "row.json").exists():
            raise DistributedError(f"process 0 of {num_processes} exited without writing its row; its last "
                                   f"output: {describe_exit(d, 0, 0, False)[1] or '(none)'}")
        row = pd.DataFrame([json.loads((d / "row.json").read_text())])
        frames = {}
        for name in ("processes", "steps", "grain_stats"):
            p = d / f"{name}.csv"
            frames[name] = pd.read_csv(p, dtype={"config_id": str}) if p.exists() and p.stat().st_size > 1 else pd.DataFrame()
        return MultiResult(row, frames["processes"], frames["steps"], frames["grain_stats"])

    spec = {"mode": "train", "base_config": dataclasses.asdict(base),
            "overrides": {str(k): v for k, v in (per_process or {}).items()}}
    files = {f"config_{i}.json": json.dumps(dataclasses.asdict(c)) for i, c in enumerate(cfgs)}
    multi = run_local(num_processes, spec, files=files, collect=collect, timeout_s=timeout_s,
                      coordinator=coordinator, init_timeout_s=init_timeout_s, on_start=on_start,
                      work_dir=work_dir)
    if results_dir is not None:
        write_results(Path(results_dir), multi)
    return multi


def allreduce_probe(num_processes: int, sizes_bytes, *, repeats: int = 20, warmup: int = 3,
                    timeout_s: float | None = 120.0, coordinator: str | None = None,
                    init_timeout_s: float = INIT_TIMEOUT_S, on_start=None, work_dir=None) -> pd.DataFrame:
    """Times the cross-process all-reduce on its own: ``num_processes`` local processes, started,
    pinned and joined as :func:`launch` starts a training run (gloo on CPU), each reducing B bytes
    of float32 per device for each B in ``sizes_bytes`` (:func:`allreduce_timings`).

    Args:
        num_processes: processes (>= 2: one process has nothing to reduce with).
        sizes_bytes: bytes per device, each an integer >= 4 (rounded down to whole float32s), or a
            list of them: the operands of one all-reduce (e.g. the bytes of each gradient leaf).
        repeats: timed calls per size (>= 1), after ``warmup`` untimed ones (>= 1, compilation
            included).
        timeout_s, coordinator, init_timeout_s, on_start, work_dir: as for :func:`launch`.

    Returns:
        One row per size: ``num_processes``, ``devices``, ``size_bytes`` (all operands together),
        ``operands``, ``seconds_median`` and
        ``seconds_p90`` over the repeats (each repeat the shortest over the processes),
        ``seconds_min``, ``seconds_slowest_process_median``, ``repeats``, ``warmup``,
        ``collective``, ``platform``, ``cpus_shared``.

    Raises:
        ConfigError: bad input, before any process starts.
        DistributedError: a process failed or the probe timed out; every process has been stopped.
    """
    check(isinstance(num_processes, int) and not isinstance(num_processes, bool) and num_processes >= 2,
          "num_processes", num_processes, "an all-reduce needs an integer >= 2 processes")
    sizes = list(sizes_bytes) if isinstance(sizes_bytes, (list, tuple, np.ndarray)) else None
    check(sizes is not None and len(sizes) > 0, "sizes_bytes", sizes_bytes, "give a non-empty list of byte counts")
    for b in sizes:
        parts = list(b) if isinstance(b, (list, tuple)) else [b]
        check(len(parts) > 0 and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 4
                                     for v in parts), "sizes_bytes", sizes_bytes,
              f"every size must be an integer >= 4 bytes, or a non-empty list of them ({b!r} is not)")
    check(isinstance(repeats, int) and repeats >= 1, "repeats", repeats, "must be an integer >= 1")
    check(isinstance(warmup, int) and warmup >= 1, "warmup", warmup, "must be an integer >= 1")

    def collect(d: Path) -> pd.DataFrame:
        if not (d / "allreduce.json").exists():
            raise DistributedError(f"process 0 of {num_processes} exited without writing its timings; its last "
                                   f"output: {describe_exit(d, 0, 0, False)[1] or '(none)'}")
        return pd.DataFrame(json.loads((d / "allreduce.json").read_text()))

    spec = {"mode": "allreduce", "repeats": repeats, "warmup": warmup,
            "sizes_bytes": [[int(v) for v in b] if isinstance(b, (list, tuple)) else int(b) for b in sizes]}
    return run_local(num_processes, spec, collect=collect, timeout_s=timeout_s, coordinator=coordinator,
                     init_timeout_s=init_timeout_s, on_start=on_start, work_dir=work_dir)


def summary(multi: MultiResult) -> str:
    """The per-process table, readable."""
    cols = ["process_id", "cpus", "local_batch_size", "samples_per_s", "step_s_median", "data_wait_s_median",
            "data_wait_frac"]
    extra = [k for k in PER_PROCESS_KNOBS if k in multi.processes and multi.processes[k].nunique() > 1]
    return multi.processes[cols + extra].to_string(index=False, float_format=lambda v: f"{v:.4g}")


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
