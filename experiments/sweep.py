"""Sweeps: a grid of training runs, one row per configuration, resumable, safe to interrupt.

Each (configuration, repeat) runs in its own child process (``Runner``), so a crash or an
out-of-memory kill of one becomes a failed row and the sweep goes on; the sweeping process stays
small (flat RSS), and whatever a run leaves behind (Grain's shared memory, semaphores, worker
processes) goes with its process. Children and their loader workers are tied to their parent with
PR_SET_PDEATHSIG, so killing the sweep leaves no orphans. Repeats run round-robin over the
configurations in a seeded shuffled order (``schedule``), so the drift of a shared machine spreads
over every configuration instead of biasing one. Rows are written, skipped on resume and retried
by the run loop sweeps share with scaling runs (``experiments.runloop``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import signal
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from experiments import configs, env as env_lib, results, runloop
from experiments.configs import ConfigError, check
from experiments.train import TrainConfig

GRID_KEYS = ("model", "source", "image_size", "batch_size", "grad_accum_steps", "precision", "augment_cost",
             "num_workers", "prefetch_buffer_size", "device_buffer_size", "feed", "num_processes")
# The knobs the designed sample varies (each has a ``sample_<knob>`` tuple of levels).
SAMPLE_KEYS = ("model", "source", "image_size", "batch_size", "grad_accum_steps", "precision", "augment_cost",
               "num_workers", "prefetch_buffer_size", "feed")


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    # the grid (comma-separated on the command line): every combination is a configuration
    model: tuple[str, ...] = ("mlp",)
    source: tuple[str, ...] = ("arrayrecord",)
    image_size: tuple[int, ...] = (32,)
    batch_size: tuple[int, ...] = (64,)
    grad_accum_steps: tuple[int, ...] = (1,)
    precision: tuple[str, ...] = ("fp32",)
    augment_cost: tuple[int, ...] = (2,)
    num_workers: tuple[int, ...] = (0, 1, 2)
    prefetch_buffer_size: tuple[int, ...] = (1, 4)
    device_buffer_size: tuple[int, ...] = (2,)
    feed: tuple[str, ...] = ("none", "double_buffer", "grain_device_put")
    num_processes: tuple[int, ...] = (1,)  # > 1: data-parallel processes (experiments.distributed)
    # a designed sample added to the grid: sample_size configurations whose knobs are drawn from the
    # sample_* levels, each level used equally often, combined at random (seeded; see design_sample)
    sample_size: int = 0
    sample_seed: int = 0
    sample_model: tuple[str, ...] = ("mlp", "cnn")
    sample_source: tuple[str, ...] = ("ram", "memmap", "arrayrecord")
    sample_image_size: tuple[int, ...] = (16, 32, 48)
    sample_batch_size: tuple[int, ...] = (32, 64, 128)
    sample_grad_accum_steps: tuple[int, ...] = (1, 2)
    sample_precision: tuple[str, ...] = ("fp32", "bf16")
    sample_augment_cost: tuple[int, ...] = (0, 2, 4)
    sample_num_workers: tuple[int, ...] = (0, 1, 2)
    sample_prefetch_buffer_size: tuple[int, ...] = (1, 4)
    sample_feed: tuple[str, ...] = ("none", "double_buffer", "grain_device_put")
    # fixed for every configuration
    width: int = 512
    depth: int = 2
    cnn_width: int = 16
    cnn_depth: int = 3
    num_samples: int = 2048
    min_steps: int = 30
    min_measure_s: float = 1.0
    resident_min_measure_s: float = 0.0  # the device-resident bound's window (0: min_measure_s)
    warmup_steps: int = 3
    warmup_time_s: float = 0.0
    max_warmup_s: float = 3.0
    seed: int = 0
    grain_stats: bool = True
    cache_dir: str = TrainConfig.cache_dir
    # how the sweep runs: each configuration `repeats` times, round-robin over the configurations in
    # an order shuffled (seeded by order_seed) anew for each round
    repeats: int = 1
    order_seed: int = 0
    config_timeout_s: float = 600.0
    isolate: bool = True

    def __post_init__(self):
        for k in GRID_KEYS:
            check(len(getattr(self, k)) > 0, k, getattr(self, k), "the grid needs at least one value")
        check(self.sample_size >= 0, "sample_size", self.sample_size, "must be >= 0")
        for k in SAMPLE_KEYS:
            check(len(getattr(self, f"sample_{k}")) > 0 or not self.sample_size, f"sample_{k}",
                  getattr(self, f"sample_{k}"), "the designed sample needs at least one level")
        check(self.repeats >= 1, "repeats", self.repeats, "must be >= 1")
        check(self.config_timeout_s > 0, "config_timeout_s", self.config_timeout_s, "must be positive")
        self.train_configs()  # every combination must be a valid TrainConfig, before any work

    def base(self) -> TrainConfig:
        return TrainConfig(width=self.width, depth=self.depth, num_samples=self.num_samples,
                           min_steps=self.min_steps, min_measure_s=self.min_measure_s,
                           resident_min_measure_s=self.resident_min_measure_s,
                           warmup_steps=self.warmup_steps, warmup_time_s=self.warmup_time_s,
                           max_warmup_s=self.max_warmup_s, seed=self.seed, grain_stats=self.grain_stats,
                           cache_dir=self.cache_dir)

    def _make(self, kw: dict, what: str) -> TrainConfig:
        if kw.get("model") == "cnn":
            kw = {**kw, "width": self.cnn_width, "depth": self.cnn_depth}
        try:
            return configs.apply_overrides(self.base(), kw)
        except ConfigError as e:
            raise ConfigError(f"{what} {kw} is impossible: {e}") from None

    def grid_configs(self) -> list[TrainConfig]:
        return [self._make(dict(zip(GRID_KEYS, combo)), "grid combination")
                for combo in itertools.product(*(getattr(self, k) for k in GRID_KEYS))]

    def sample_configs(self) -> list[TrainConfig]:
        levels = {k: getattr(self, f"sample_{k}") for k in SAMPLE_KEYS}
        return [self._make(p, "sampled configuration") for p in design_sample(levels, self.sample_size,
                                                                              self.sample_seed)]

    def designed_configs(self) -> list[tuple[str, TrainConfig]]:
        """("grid" | "sample", config): the grid, then the designed sample (points already in the
        grid are not repeated)."""
        out, seen = [], set()
        for design, tcs in (("grid", self.grid_configs()), ("sample", self.sample_configs())):
            for tc in tcs:
                cid = results.config_id(configs.to_flat_dict(tc))
                if cid not in seen:
                    seen.add(cid)
                    out.append((design, tc))
        return out

    def train_configs(self) -> list[TrainConfig]:
        return [tc for _, tc in self.designed_configs()]


def design_sample(levels: dict[str, tuple], n: int, seed: int, candidates: int = 200) -> list[dict]:
    """``n`` points over the knobs in ``levels``: a balanced random (Latin-hypercube-like) design.

    In each candidate design every knob's levels are repeated to length ``n`` (so each level appears
    ⌊n/L⌋ or ⌈n/L⌉ times) and shuffled independently of the other knobs; of ``candidates`` seeded
    candidates the one with the largest smallest Hamming distance between two points is kept
    (maximin, as for Latin hypercubes: no two points nearly the same), ties broken by fewer pairs at
    that distance.

    >>> pts = design_sample({"a": (0, 1), "b": ("x", "y", "z")}, 6, seed=0)
    >>> sorted(p["a"] for p in pts), sorted(p["b"] for p in pts)
    ([0, 0, 0, 1, 1, 1], ['x', 'x', 'y', 'y', 'z', 'z'])
    >>> pts == design_sample({"a": (0, 1), "b": ("x", "y", "z")}, 6, seed=0)
    True
    """
    import numpy as np
    if n <= 0:
        return []
    keys = list(levels)
    rng = np.random.default_rng(seed)
    best, best_score = None, None
    for _ in range(candidates):
        cols = [rng.permutation(np.resize(np.arange(len(levels[k])), n)) for k in keys]
        idx = np.stack(cols, axis=1)
        d = (idx[:, None, :] != idx[None, :, :]).sum(-1)[np.triu_indices(n, 1)] if n > 1 else np.array([len(keys)])
        score = (int(d.min()), -int((d == d.min()).sum()))
        if best_score is None or score > best_score:
            best, best_score = idx, score
    return [{k: levels[k][int(i)] for k, i in zip(keys, row)} for row in best]


def smoke() -> SweepConfig:
    """A few seconds per configuration: used by the tests."""
    return SweepConfig(source=("ram",), augment_cost=(0,), num_workers=(0,), prefetch_buffer_size=(1,),
                       feed=("none", "double_buffer"), batch_size=(16,), width=32, depth=1, num_samples=64,
                       min_steps=2, min_measure_s=0.0, warmup_steps=1, max_warmup_s=0.2, image_size=(16,))


#: the quick preset's limit on one run: its runs take 4-9 s on the 2-core CPU, compile included.
#: One of about 3 000 quick runs there hung (2026-11-28, ``holdout/pair60``: two workers, ArrayRecord,
#: feed none) and held the demo for the default's 600 s.
QUICK_TIMEOUT_S = 120.0


def quick() -> SweepConfig:
    """The demo's sweep: the workers × prefetch × feed grid (2 × 2 × 2 = 8; one worker, grain_device_put
    and the other knobs come from the designed sample of 9, in which every three-level knob takes
    each level three times), each configuration twice, interleaved, 1 s windows, at least 5 steps
    each. With gradient accumulation unrolled on the CPU (``experiments.train.accum_unroll``) the
    slowest step is the CNN's in bf16, about 90 ms at batch 128 and 48×48 images, so every window
    holds its 5 steps within the 1 s. The study's 14 configurations (a sample of 6) took 116 s for
    28 runs on the 2-core CPU; a sample of 9 gives the calibration three more configurations, for
    about 25 s.

    The device-resident bound measures half a second (``resident_min_measure_s``), the fed loop 1 s.
    Why: the demo ran over its 8 minutes on the 2-core AMD EPYC (family 25, model 17), and the bound's
    second half changes nothing the cost model fits. Over the 81 pairs ``results/cpu-2core/holdout/
    pair52``–``pair132``, with each run's bound recomputed from the first 0.5 s of its steps in
    ``steps.csv`` (study and second sweep alike; a run's bound moved a median 0.9%, at most 3.1%, in
    ``pair100``) and refitted (``costmodel holdout``), cross-validation met the goal in 17 pairs either
    way, with the probes kept in 22 against 23, the second sweep's comparison in 13 either way, both
    checks in 6 against 5; the pairs' median and max errors moved a median 0.02 points or less (at
    most 2.3 and 4.1 in one pair). The fed loop's window is what every check compares with, and
    stays."""
    return SweepConfig(num_workers=(0, 2), feed=("none", "double_buffer"), sample_size=9, repeats=2, min_steps=5,
                       min_measure_s=1.0, resident_min_measure_s=0.5, max_warmup_s=1.0, grain_stats=False,
                       config_timeout_s=QUICK_TIMEOUT_S)


def full() -> SweepConfig:
    """A broad sweep over every knob: 768 configurations, 3 repeats, 2 s windows; about 10 hours on a
    2-core CPU (not measured end to end: 768 × 3 runs of about 15 s)."""
    return SweepConfig(source=("arrayrecord", "memmap", "ram"), batch_size=(32, 128), precision=("fp32", "bf16"),
                       grad_accum_steps=(1, 2), augment_cost=(0, 4), num_workers=(0, 1, 2, 4),
                       prefetch_buffer_size=(1, 4), device_buffer_size=(1, 2), feed=("none", "double_buffer"),
                       repeats=3, min_steps=40, min_measure_s=2.0)


PRESETS = {"smoke": smoke, "quick": quick, "full": full}


# --------------------------------------------------------------------------------------- running

def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


# Modules every child imports; the fork server imports them once (2.3 s of imports per run saved,
# measured on the 2-core CPU: `python -c "import jax, flax.nnx, optax, grain, pandas"`).
PRELOAD = ["numpy", "pandas", "jax", "jax.numpy", "flax.nnx", "optax", "grain", "psutil",
           "experiments.train", "experiments.feed", "experiments.loader", "experiments.runone"]


#: a sweep's temporary folder (its runs' files and the shared compilation cache) is
#: ``<tempdir>/memsim-sweep-<pid>-<random>``, <pid> the sweep's own process
TMP_PREFIX = "memsim-sweep-"


def remove_stale_dirs(tmp_root: str | None = None) -> list[str]:
    """Removes the temporary folders of sweeps whose process is gone: a sweep killed by SIGKILL (or
    the OOM killer) cannot remove its own, and each left one its runs' files and compiled steps
    (about 0.2-2 MB). A folder whose process still runs is kept, as is one whose name has no pid.
    Returns the removed paths."""
    import psutil
    removed = []
    for d in Path(tmp_root or tempfile.gettempdir()).glob(f"{TMP_PREFIX}*"):
        pid = d.name[len(TMP_PREFIX):].split("-", 1)[0]
        if not (pid.isdigit() and d.is_dir()) or psutil.pid_exists(int(pid)):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(str(d))
    return removed


class Runner:
    """Runs each configuration in a child process of its own, forked from a fork server that has
    already imported JAX, Flax, optax and Grain (``multiprocessing``'s forkserver; no JAX backend is
    started before the fork, so every child starts its own). A crash, a kill or a timeout of one
    configuration becomes a failed row; whatever a run leaves behind (Grain's shared memory,
    semaphores, worker processes) goes with its process. The children share a JAX persistent
    compilation cache for the sweep's lifetime, so repeats of a configuration load their step
    instead of compiling it again (compile time is recorded apart either way).
    """

    def __init__(self):
        import multiprocessing as mp
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(PRELOAD)
        remove_stale_dirs()
        self._tmp = tempfile.TemporaryDirectory(prefix=f"{TMP_PREFIX}{os.getpid()}-")
        self.compile_cache = str(Path(self._tmp.name) / "xla-cache")
        self._n = 0

    def close(self):
        """Removes the sweep's temporary files and stops the fork server, so a finished sweep leaves
        no process behind (the server would otherwise live until this process exits; the next sweep
        starts a new one)."""
        self._tmp.cleanup()
        from multiprocessing import forkserver
        stop = getattr(forkserver._forkserver, "_stop", None)  # CPython 3.8+; only the server, not its children
        if stop is not None:
            stop()

    def run(self, cfg: TrainConfig, timeout_s: float, cores: tuple[int, ...] | None = None,
            stacks_to: Path | None = None) -> dict:
        """Runs ``cfg`` in a child (on the CPUs ``cores`` only, if given); {'row', ...} or {'error'}.

        A child that outlives ``timeout_s`` is asked for its threads' stacks before it is killed: the
        error says where its main thread was (:func:`stacks_summary`), and the file ``stacks_to``, if
        given, receives every thread's stack."""
        from experiments import runone
        self._n += 1
        d = Path(self._tmp.name) / f"job{self._n}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps(dataclasses.asdict(cfg)))
        p = self._ctx.Process(target=runone.job, args=(str(d), self.compile_cache, cores), name="memsim-run")
        try:
            p.start()
            p.join(timeout_s)
            if p.exitcode is None:
                stacks = ask_stacks(p, d / "stderr.txt")
                p.kill()
                p.join()
                shutil.rmtree(d, ignore_errors=True)  # with what a multi-process run's launcher left in it
                error = f"timed out after {timeout_s:.0f} s (config_timeout_s)"
                if stacks:
                    error += f"; {stacks_summary(stacks)}"
                    if stacks_to is not None:
                        stacks_to.parent.mkdir(parents=True, exist_ok=True)
                        stacks_to.write_text(stacks + "\n")
                        error += f"; every thread's stack: {stacks_to}"
                return {"error": error}
        except BaseException:
            if p.exitcode is None and p.pid is not None:
                p.kill()
                p.join()
            raise
        try:
            return collect(d, p.exitcode)
        finally:
            shutil.rmtree(d, ignore_errors=True)


#: how long a run that timed out gets to write its stacks before it is killed (faulthandler writes
#: them from its signal handler, in C, whatever its threads are doing: a few ms on a quiet machine)
STACKS_WAIT_S = 10.0
#: a dump counts as finished once stderr has not grown for this long and ends in a whole frame line.
#: One 50 ms poll without growth was not enough: on a loaded 2-core machine the writing thread was
#: preempted mid-dump and the sweep kept a dump cut after "  File" (CI, stop 48).
STACKS_QUIET_S = 0.5
_FRAME_LINE = re.compile(r'  (File ".*", line (\d+|\?\?\?) in .+|<no Python frame>|\.\.\.)')


def _dump_ends_whole(text: str) -> bool:
    """Whether a faulthandler dump ends after a whole frame line (not mid-line, not after a header)."""
    lines = text.split("\n")
    return text.endswith("\n") and len(lines) > 1 and _FRAME_LINE.fullmatch(lines[-2]) is not None


def ask_stacks(p, stderr: Path, wait_s: float = STACKS_WAIT_S, quiet_s: float = STACKS_QUIET_S) -> str:
    """Sends a live run ``p`` the signal that makes it write every thread's stack to ``stderr``
    (``experiments.runone.STACKS_SIGNAL``) and returns what it wrote ('' if nothing came).

    Waits until the dump has stopped growing for ``quiet_s`` and ends in a whole frame line, or
    ``wait_s`` at most (then returns what there is)."""
    from experiments.runone import STACKS_SIGNAL
    start = stderr.stat().st_size if stderr.exists() else 0
    try:
        os.kill(p.pid, STACKS_SIGNAL)
    except ProcessLookupError:  # it ended in the meantime
        return ""

    def read() -> str:
        if not stderr.exists():
            return ""
        with open(stderr, "rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")

    deadline, size, since = time.monotonic() + wait_s, -1, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = stderr.stat().st_size if stderr.exists() else 0
        if now != size:
            size, since = now, time.monotonic()
        elif now > start and time.monotonic() - since >= quiet_s and _dump_ends_whole(read()):
            break
    text = read()
    first = min((i for i in (text.find("Thread 0x"), text.find("Current thread 0x")) if i >= 0), default=0)
    return text[first:].strip()


def stacks_summary(stacks: str) -> str:
    r"""One line from a ``faulthandler`` dump: the innermost frame of a run's main thread (the one
    that entered ``experiments/runone.py``, else the first in the project's code), and that thread's
    innermost frame of the project's own.

    >>> dump = ('Thread 0x01 (most recent call first):\n  File "/x/threading.py", line 320 in wait\n\n'
    ...         'Current thread 0x02 (most recent call first):\n  File "/x/grain/iterator.py", line 88 in __next__\n'
    ...         '  File "/repo/experiments/train.py", line 412 in fed_loop\n'
    ...         '  File "/repo/experiments/runone.py", line 80 in main\n')
    >>> stacks_summary(dump)
    'its main thread was in __next__ (grain/iterator.py:88), called from fed_loop (experiments/train.py:412)'
    >>> stacks_summary('Thread 0x01 (most recent call first):\n  File "/x/threading.py", line 320 in wait\n')
    "no thread was in the project's code"
    """

    def name(f):
        return f"{f[2]} ({'/'.join(f[0].split('/')[-2:])}:{f[1]})"
    blocks = [re.findall(r'File "([^"]+)", line (\d+) in (\S+)', b) for b in re.split(r"\n\s*\n", stacks)]
    # the main thread is the one that entered the run (runone), else the first in the project's code
    blocks = sorted([b for b in blocks if any("/experiments/" in f[0] for f in b)],
                    key=lambda b: not any(f[0].endswith("experiments/runone.py") for f in b))
    if not blocks:
        return "no thread was in the project's code"
    frames = blocks[0]
    own = next(f for f in frames if "/experiments/" in f[0])
    return f"its main thread was in {name(frames[0])}" + (f", called from {name(own)}" if own != frames[0] else "")


def collect(d: Path, rc: int) -> dict:
    """What a finished child left in ``d``: {'row', 'steps', 'grain_stats'} or {'error'}."""
    if rc == 0 and (d / "row.json").exists():
        out = {"row": json.loads((d / "row.json").read_text())}
        for name in ("steps", "grain_stats", "processes"):
            p = d / f"{name}.csv"
            out[name] = pd.read_csv(p, dtype={"config_id": str}) if p.exists() and p.stat().st_size > 1 else pd.DataFrame()
        return out
    if (d / "error.json").exists():
        return {"error": json.loads((d / "error.json").read_text())["error"]}
    log = d / "stderr.txt"
    tail = [ln for ln in (log.read_text(errors="replace").strip().splitlines() if log.exists() else []) if ln][-3:]
    if rc is not None and rc < 0:
        why = f"killed by {_signal_name(rc)}"
        if rc == -signal.SIGKILL:
            why += " (out of memory?)"
        return {"error": why + (": " + " | ".join(tail) if tail else "")}
    return {"error": f"exit code {rc}" + (": " + " | ".join(tail) if tail else "")}


def run_one_inline(cfg: TrainConfig) -> dict:
    from experiments import distributed, train
    try:
        if cfg.num_processes > 1:
            res = distributed.launch(cfg, cfg.num_processes)
        else:
            res = train.run_detailed(cfg)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:  # noqa: BLE001 — recorded as a failed row
        return {"error": f"{type(e).__name__}: {e}"}
    return {"row": res.row.iloc[0].to_dict(), "steps": res.steps, "grain_stats": res.grain_stats,
            "processes": getattr(res, "processes", None)}


def schedule(n_configs: int, repeats: int, order_seed: int) -> list[tuple[int, int]]:
    """(configuration index, repeat) in run order: round r runs every configuration once, in a
    permutation seeded by (order_seed, r), so a drifting machine spreads over all configurations.

    >>> schedule(3, 2, order_seed=0)
    [(2, 0), (0, 0), (1, 0), (2, 1), (0, 1), (1, 1)]
    """
    import numpy as np
    out = []
    for r in range(repeats):
        out += [(int(i), r) for i in np.random.default_rng([order_seed, r]).permutation(n_configs)]
    return out


def run(cfg: SweepConfig, out_dir: Path, experiment: str = "sweep", progress: bool = True,
        on_config_done=None, retry_failed: bool = False) -> pd.DataFrame:
    """Runs every (configuration, repeat) not yet in ``out_dir/rows.csv``; returns all rows.

    One row per (configuration, repeat), with ``config_id``, ``repeat`` and ``attempt``, each
    written as it finishes (``runloop.run_jobs``: resumable, safe to interrupt). With
    ``retry_failed`` the pairs whose rows all failed are run again (a new row, ``attempt`` + 1; the
    failed one stays: rows are append-only, ``results.current`` hides it).
    ``on_config_done(row)``, if given, is called after each row is written.
    """
    designed = cfg.designed_configs()
    todo = [tc for _, tc in designed]
    environment = env_lib.environment()
    header = {"experiment": experiment, "sweep": configs.to_flat_dict(cfg), "grid_keys": list(GRID_KEYS),
              "sample_keys": list(SAMPLE_KEYS), "num_configs": len(todo), "repeats": cfg.repeats,
              "environment": environment}
    existing = results.read_csv_rows(out_dir / "rows.csv") if (out_dir / "rows.csv").exists() else pd.DataFrame()
    flats = [configs.to_flat_dict(c) for c in todo]
    cids = [results.config_id(f) for f in flats]
    vary = [k for k in GRID_KEYS if len({f[k] for f in flats}) > 1]
    jobs = [runloop.Job(cids[i], rep, f"r{rep} " + " ".join(f"{k}={flats[i][k]}" for k in vary), i)
            for i, rep in schedule(len(todo), cfg.repeats, cfg.order_seed)]

    def head(job: runloop.Job) -> dict:
        attempt = 1
        if len(existing) and "config_id" in existing:
            same = existing["config_id"].astype(str) == job.config_id
            if "repeat" in existing:
                same &= existing["repeat"].fillna(0).astype(int) == job.repeat
            attempt = int(same.sum()) + 1
        return {"config_id": job.config_id, "repeat": job.repeat, "attempt": attempt,
                "design": designed[job.payload][0]}

    def failed_row(job: runloop.Job, error: str, wall_s: float) -> dict:
        return {**head(job), **flats[job.payload], **environment, "status": "failed", "error": error,
                "wall_s": wall_s}

    def work(job: runloop.Job) -> runloop.Outcome:
        t0 = time.perf_counter()
        tc = todo[job.payload]
        h = head(job)
        stacks_to = out_dir / "failed" / f"{job.config_id}-r{job.repeat}-a{h['attempt']}.stacks.txt"
        out = runner.run(tc, cfg.config_timeout_s, stacks_to=stacks_to) if runner is not None else run_one_inline(tc)
        if "row" not in out:
            return runloop.Outcome(failed_row(job, out["error"], time.perf_counter() - t0))
        return runloop.Outcome({**h, **out["row"]},
                               {"steps": out.get("steps"), "grain_stats": out.get("grain_stats"),
                                "processes": out.get("processes")})

    runner = Runner() if cfg.isolate else None
    try:
        return runloop.run_jobs(out_dir, jobs, work, failed_row, header=header, desc=experiment, unit="run",
                                progress=progress, retry_failed=retry_failed, on_row=on_config_done)
    finally:
        if runner is not None:
            runner.close()


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached the sweep; ``signum`` says which."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class interruptible:
    """Turns SIGINT and SIGTERM into ``Interrupted`` in the main thread, and remembers that one came.

    ``caught`` stays set even if some library swallowed the exception, so the run still exits with
    128 + the signal's number instead of 0.
    """

    def __init__(self):
        self.caught: int | None = None

    def _handler(self, signum, frame):
        self.caught = self.caught or signum
        raise Interrupted(signum)

    def __enter__(self):
        self._old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)
        return False

    @property
    def exit_code(self) -> int:
        return 128 + (self.caught or signal.SIGINT)


def run_interruptible(fn, out: Path):
    """``(fn(), None)``, or ``(None, 128 + signal)`` when SIGINT or SIGTERM stopped it; then the
    message says the finished work is kept in ``out`` and how to resume it."""
    with interruptible() as sig:
        try:
            res = fn()
        except KeyboardInterrupt:
            sig.caught = sig.caught or signal.SIGINT
    if sig.caught:
        print(f"\ninterrupted ({signal.Signals(sig.caught).name}): the finished work is kept in {out}; "
              f"rerun with --run_id={out.name} to finish the rest", file=sys.stderr)
        return None, sig.exit_code
    return res, None


def failure_summary(rows: pd.DataFrame, limit: int = 5) -> str:
    """A few lines naming what failed (configuration knobs, repeat, error)."""
    cur = results.current(rows)
    bad = cur[cur.status != "ok"] if len(cur) else cur
    lines = []
    for _, r in bad.head(limit).iterrows():
        knobs = " ".join(f"{k}={r[k]}" for k in GRID_KEYS if k in r)
        lines.append(f"  repeat {r.get('repeat', 0)}: {knobs}: {r.error}")
    if len(bad) > limit:
        lines.append(f"  … and {len(bad) - limit} more (see the error column of rows.csv)")
    return "\n".join(lines)


def main(cfg: SweepConfig, preset: str, run_id: str | None = None, results_root: str | None = None,
         experiment: str = "sweep", retry_failed: bool = False) -> int:
    from experiments import train
    train.check_runtime(cfg.base())
    out = results.run_dir(experiment, run_id, results_root, resume=run_id is not None)
    n = len(cfg.train_configs())
    print(f"{experiment}: {n} configurations × {cfg.repeats} repeats → {out}", flush=True)
    with interruptible() as sig:
        try:
            rows = run(cfg, out, experiment, retry_failed=retry_failed)
        except KeyboardInterrupt:
            sig.caught = sig.caught or signal.SIGINT
    if sig.caught:
        kept = len(results.done_pairs(out))
        print(f"\ninterrupted ({signal.Signals(sig.caught).name}): {kept} finished run(s) kept in "
              f"{out / 'rows.csv'}; rerun with --run_id={out.name} to finish the rest", file=sys.stderr)
        return sig.exit_code
    return report_rows(rows, out)


def report_rows(rows: pd.DataFrame, out: Path) -> int:
    """Prints what the sweep measured (and its noise); 1 if any run failed, else 0."""
    cur = results.current(rows)
    ok = cur[cur.status == "ok"] if len(cur) else cur
    failed = len(cur) - len(ok)
    print(f"{len(cur)} runs ({len(ok)} ok, {failed} failed) in {out / 'rows.csv'}")
    if len(ok):
        summ = results.summarize(cur)
        cv = results.repeatability(summ)
        if cv == cv:
            print(f"repeatability: median CV of samples/s over configurations {cv:.1%}")
        flagged = int(summ.get("bound_exceeded", pd.Series(dtype=bool)).fillna(False).sum())
        if flagged:
            print(f"warning: {flagged} configuration(s) beat their device-resident bound beyond its interval "
                  "(bound_exceeded): the bound was measured while something competed", file=sys.stderr)
    if failed:
        print(f"error: {failed} of {len(cur)} runs failed:\n{failure_summary(cur)}\n"
              f"rerun with --run_id={out.name} --retry_failed to run them again", file=sys.stderr)
        return 1
    return 0
