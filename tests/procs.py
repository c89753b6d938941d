"""Which of a test's processes still run: the orphan checks of the fault tests share it."""

import psutil


def running(procs) -> list:
    """The processes of ``procs`` still running; a zombie is dead, and so is one that exits between
    the two questions psutil asks (``is_running``, then ``status``), which raises NoSuchProcess. Asked
    once, without the ``try``, that race failed a fresh clone's CI (2026-11-29, test_train's
    ``test_dead_worker_fails_fast_without_orphans[none]``: ``/proc/<pid>/stat`` gone)."""
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out
