"""Ctrl-C that is not lost, for ``python -m analysis``.

Python drops an exception raised inside a garbage collector callback ("Exception ignored in ..."),
and JAX, which the analysis modules import, registers one (``jax._src.lib._xla_gc_callback``). A
Ctrl-C whose KeyboardInterrupt is raised while that callback runs is lost, and the command goes on
to the end and exits 0. Seen on the 2-core AMD EPYC on 2026-11-27: ``costmodel holdout`` over two
pairs, interrupted 0.5-9 s into a run about twenty times, ran to its end twice (2.8 and 3.0 s in,
during start-up), and once more (1.5 s in) after the launcher's handler was installed, when JAX
was still imported by the package before it.

:func:`install` (``python -m analysis`` only, before any subcommand module is imported; the package
itself imports nothing heavy) replaces the SIGINT handler with one that also sets a flag;
:func:`check` turns the flag into KeyboardInterrupt at a safe point, which the launcher checks
before and after the command and long loops check as they go. (``experiments.sweep.interruptible``
does the same for sweeps, with a context manager around the sweep; the launcher's handler has to be
in place before JAX is imported, which that module imports.)
"""

from __future__ import annotations

import signal
import threading

_requested = threading.Event()


def _handler(signum, frame):
    _requested.set()
    raise KeyboardInterrupt


def install() -> None:
    """The flagging handler for SIGINT (main thread only; elsewhere nothing changes)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _handler)


def requested() -> bool:
    """Whether a Ctrl-C came since :func:`install`."""
    return _requested.is_set()


def check() -> None:
    """KeyboardInterrupt if a Ctrl-C came since :func:`install` (whether or not its own
    KeyboardInterrupt got through); a no-op without :func:`install`."""
    if _requested.is_set():
        raise KeyboardInterrupt
