"""The environment every result row carries: platform, devices, library versions, CPUs, git commit."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from pathlib import Path

from experiments import compat

REPO = Path(__file__).resolve().parent.parent


def _version(dist: str) -> str:
    return compat.version_of(dist) or "not installed"


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (sha or "unknown") + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment() -> dict:
    import jax
    devs = jax.devices()
    return {
        "platform": devs[0].platform,
        "device_kind": devs[0].device_kind,
        "device_count": len(devs),
        "local_device_count": jax.local_device_count(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "jax_version": _version("jax"),
        "jaxlib_version": _version("jaxlib"),
        "flax_version": _version("flax"),
        "optax_version": _version("optax"),
        "grain_version": _version("grain"),
        "numpy_version": _version("numpy"),
        "pandas_version": _version("pandas"),
        "git_commit": git_commit(),
    }

