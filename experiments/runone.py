"""One configuration in a child process: ``job(DIR, COMPILE_CACHE)`` (what sweeps fork) or
``python -m experiments.runone DIR`` (by hand).

Reads DIR/config.json (a TrainConfig), runs it (``num_processes`` > 1: through
``experiments.distributed.launch``, which adds processes.csv), writes DIR/row.json, steps.csv and
grain_stats.csv, or DIR/error.json with the error text; its stdout and stderr go to DIR/stdout.txt and stderr.txt.
It dies with its parent (PR_SET_PDEATHSIG). On ``STACKS_SIGNAL`` (SIGUSR1) a forked job writes every
thread's stack to stderr.txt and goes on (``faulthandler``); the sweep asks for them before it kills a
run that timed out.
"""

import faulthandler
import json
import os
import signal
import sys
import traceback
from pathlib import Path

#: what asks a run for its threads' stacks (``faulthandler``, into its stderr.txt)
STACKS_SIGNAL = signal.SIGUSR1


def _jsonable(o):
    return o.item() if hasattr(o, "item") else str(o)


def _redirect(d: Path) -> None:
    for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
        f = os.open(d / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)


def _own_resource_tracker() -> None:
    # A child forked from the sweep's fork server inherits the fork server's multiprocessing resource
    # tracker, which lives as long as the sweep: shared-memory segments a run's Grain workers leave
    # registered there (Grain 0.2.18 leaves some) would pile up in /dev/shm until the sweep ends
    # (seen: 40 after 8 smoke runs). Forgetting the inherited tracker makes this process start its
    # own on first use, and it unlinks what the run leaked when the run's processes exit, as it
    # does for a fresh interpreter. (CPython 3.11-3.13 keep the tracker's pipe in ``_fd``/``_pid``.)
    from multiprocessing import resource_tracker
    tracker = getattr(resource_tracker, "_resource_tracker", None)
    if tracker is not None and hasattr(tracker, "_fd") and hasattr(tracker, "_pid"):
        with tracker._lock:
            if tracker._fd is not None:
                try:
                    os.close(tracker._fd)
                except OSError:
                    pass
            tracker._fd, tracker._pid = None, None


def job(directory: str, compile_cache: str | None = None, cores: tuple[int, ...] | None = None) -> None:
    """The child's work; exits 0 with row.json, or 1 with error.json (a KeyboardInterrupt is re-raised).

    ``cores``: run on these CPUs only (set before JAX starts its backend, whose thread pool is sized
    from the affinity, and inherited by the loader's worker processes)."""
    from experiments.loader import die_with_parent
    die_with_parent()
    if cores is not None:
        os.sched_setaffinity(0, cores)
    _own_resource_tracker()
    d = Path(directory)
    _redirect(d)
    # the sweep sends this signal to a run that outlived its timeout, before it kills it: every
    # thread's Python stack goes to stderr.txt, so that a hang says where it hung
    faulthandler.register(STACKS_SIGNAL, all_threads=True)
    if main([directory], compile_cache):
        sys.exit(1)


def main(argv=None, compile_cache: str | None = None) -> int:
    from experiments.loader import die_with_parent
    die_with_parent()
    d = Path((argv or sys.argv[1:])[0])
    from experiments import train
    try:
        if compile_cache:
            import jax
            jax.config.update("jax_compilation_cache_dir", compile_cache)
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        cfg = train.TrainConfig(**json.loads((d / "config.json").read_text()))
        if cfg.num_processes > 1:
            from experiments import distributed
            res = distributed.launch(cfg, cfg.num_processes, work_dir=d)  # in the job's folder: the
            # sweep removes it even when it had to kill this process
            res.processes.to_csv(d / "processes.csv", index=False)
        else:
            res = train.run_detailed(cfg)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 — becomes a failed row in the sweep
        (d / "error.json").write_text(json.dumps({"error": f"{type(e).__name__}: {e}",
                                                  "traceback": traceback.format_exc()}))
        return 1
    (d / "row.json").write_text(json.dumps(res.row.iloc[0].to_dict(), default=_jsonable))
    res.steps.to_csv(d / "steps.csv", index=False)
    res.grain_stats.to_csv(d / "grain_stats.csv", index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
