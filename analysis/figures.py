"""Saving report figures: every figure function of analysis returns a matplotlib ``Figure``; this writes it.

The figure functions (``analysis.measured.throughput_figure``, ``analysis.memory.footprint_figure``,
``analysis.simulation.*_figure``) build the figure and return it, so a notebook can show or restyle
it and a test can read its axes, lines and labels; the report sections pass it to :func:`save`.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

__all__ = ["save"]


def save(fig: Figure, path: Path, dpi: int = 110, **savefig_kw) -> Path:
    """Write ``fig`` to ``path`` (PNG by its suffix), close it and return the path.

    >>> import tempfile
    >>> fig, ax = plt.subplots()
    >>> _ = ax.plot([0, 1], [1, 2])
    >>> p = save(fig, Path(tempfile.mkdtemp()) / "line.png")
    >>> p.name, p.read_bytes()[:4] == b"\\x89PNG", plt.fignum_exists(fig.number)
    ('line.png', True, False)
    """
    path = Path(path)
    fig.savefig(path, dpi=dpi, **savefig_kw)
    plt.close(fig)
    return path
