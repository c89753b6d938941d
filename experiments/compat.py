"""What differs between the JAX versions in the tested range (pyproject.toml: jax 0.10.2 up to
0.12.x; constraints/py311.txt holds the oldest, constraints/latest-py312.txt the newest), and
between the platforms a user runs on. Every caller goes through these names instead of asking the
runtime directly, so a difference is handled once.

- ``memory_kinds``: ``Device.addressable_memories()`` lists ``device``, ``pinned_host`` and
  ``unpinned_host`` on the CPU backend of jax 0.10.2 and 0.12.0.1 alike, and on CUDA; a PJRT
  plugin that does not implement the memories API raises (``NotImplementedError`` or a runtime
  error), which reads as no memory kinds.
- ``memory_stats``: ``Device.memory_stats()`` is None on the CPU backend (0.10.2 and 0.12.0.1); on
  CUDA a dict with ``bytes_in_use``, ``peak_bytes_in_use``, ``bytes_limit``…; a plugin without it
  raises. None means "not available on this platform".
- ``version_of``: a distribution's version, or None when it is not installed (``jax`` may be
  importable from a source tree without its distribution metadata; ``array-record`` is published
  as ``array_record`` in some wheels' metadata).
"""

from __future__ import annotations

from importlib import metadata
from typing import Any


def memory_kinds(device) -> tuple[str, ...]:
    """The memory kinds ``device`` can address (e.g. ``('device', 'pinned_host', 'unpinned_host')``);
    () where the runtime has no memories API."""
    try:
        return tuple(m.kind for m in device.addressable_memories())
    except (AttributeError, NotImplementedError, RuntimeError):
        return ()


def memory_stats(device) -> dict[str, Any] | None:
    """``device.memory_stats()`` as a dict, or None where the platform keeps none (CPU)."""
    try:
        stats = device.memory_stats()
    except (AttributeError, NotImplementedError, RuntimeError):
        return None
    return dict(stats) if stats else None


def version_of(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (``-`` and ``_`` spellings alike), or None."""
    for name in dict.fromkeys((dist, dist.replace("-", "_"), dist.replace("_", "-"))):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None
