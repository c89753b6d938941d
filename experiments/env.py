"""The environment every result row carries: platform, devices, library versions, CPUs, git commit."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from pathlib import Path

from experiments import compat, heap

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


#: the SIMD extensions that set how fast XLA's CPU kernels run (AVX-512 doubles the vector width,
#: AVX512_BF16 / AMX give bf16 dot products in hardware); a row without them ran without them
SIMD_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16")


@functools.lru_cache(maxsize=1)
def cpu_identity() -> dict:
    """The host CPU's model and SIMD extensions (``/proc/cpuinfo``; '' where it cannot be read).

    Rows measured on "the same" 2-core machine kind differ by the CPU under it: on 2026-11-25 the
    MLP's step (fp32, batch 64, 32×32 images) took 2.5–2.9 ms in two studies and 5.7–7.5 ms in four
    others, and the CNN's 8.7 ms against 23–38 ms; without the CPU in the rows the two could not be
    told apart. ``cpu_model`` joins the vendor's name with family/model/stepping, since a hypervisor
    may report only "AMD EPYC".
    """
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                k, _, v = line.partition(":")
                info[k.strip()] = v.strip()
    except OSError:
        return {"cpu_model": platform.processor() or "", "cpu_simd": ""}
    name = info.get("model name", platform.processor() or "")
    fms = "/".join(info.get(k, "?") for k in ("cpu family", "model", "stepping"))
    flags = set(info.get("flags", "").split())
    return {"cpu_model": f"{name} (family/model/stepping {fms})" if info else name,
            "cpu_simd": " ".join(f for f in SIMD_FLAGS if f in flags)}


def environment() -> dict:
    import jax
    devs = jax.devices()
    return {
        "platform": devs[0].platform,
        "device_kind": devs[0].device_kind,
        "device_count": len(devs),
        "local_device_count": jax.local_device_count(),
        "cpu_count": os.cpu_count(),
        **cpu_identity(),
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
        "malloc": heap.apply(),
    }

