"""Byte units and their human-readable formatting (decimal: 1 GB = 10^9 bytes).

>>> format_bytes(32 * GB), format_rate(3 * GB)
('32 GB', '3 GB/s')
>>> GiB / GB
1.073741824
"""

from __future__ import annotations

KB, MB, GB, TB = 1e3, 1e6, 1e9, 1e12
KiB, MiB, GiB = 2**10, 2**20, 2**30


def format_bytes(n: float) -> str:
    """Human-readable decimal size: ``format_bytes(1.5e9) == '1.5 GB'``.

    Example:
        >>> format_bytes(4096), format_bytes(32e9), format_bytes(3.84e12)
        ('4.1 kB', '32 GB', '3.84 TB')
    """
    n = float(n)
    for unit, scale in (("TB", TB), ("GB", GB), ("MB", MB), ("kB", KB)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.3g} B"


def format_rate(bps: float) -> str:
    """Human-readable bytes/s: ``format_rate(2.5e9) == '2.5 GB/s'``.

    Example:
        >>> format_rate(2.5e9), format_rate(120e6)
        ('2.5 GB/s', '120 MB/s')
    """
    return format_bytes(bps) + "/s"
