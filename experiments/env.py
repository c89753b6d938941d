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


#: the virtio balloon's feature bit VIRTIO_BALLOON_F_REPORTING (virtio 1.1, 5.5.3)
BALLOON_REPORTING_BIT = 5


@functools.lru_cache(maxsize=1)
def free_page_reporting(root: str = "/sys/bus/virtio/devices") -> str:
    """Whether this machine is a VM whose kernel hands its free memory back to the hypervisor
    (virtio-balloon free page reporting): "yes", "no" (no balloon, or one without the feature), or
    "" where it cannot be read (not Linux).

    Why a row says it: on such a VM a page that has been free for a few seconds is handed back, and
    its next first touch is served by the hypervisor at about ten times the cost. Measured on a
    2-core Intel Xeon VM (family 6, model 167; a Firecracker guest with the feature), 2026-12-02,
    ``numpy.ones`` of 2 GiB in a fresh process: 4.5-5.0 s after the memory had been free for 10-30 s,
    1.9 s after 3 s, 0.3-0.7 s straight after another process had touched and freed it (8.6 against
    0.6-1.3 µs a page). A step whose temporaries are mapped afresh each call (its ``minor_faults``)
    pays that whenever the pages it gets were handed back, which is part of why such steps' times
    vary from window to window on these VMs (``experiments.heap``)."""
    base = Path(root)
    if not base.is_dir():
        return ""
    try:
        for dev in sorted(base.iterdir()):
            driver = dev / "driver"
            if driver.exists() and driver.resolve().name == "virtio_balloon":
                bits = (dev / "features").read_text().strip()
                return "yes" if len(bits) > BALLOON_REPORTING_BIT and bits[BALLOON_REPORTING_BIT] == "1" else "no"
    except OSError:
        return ""
    return "no"


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
        "free_page_reporting": free_page_reporting(),
    }

