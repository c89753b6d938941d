"""The study's "Memory" section: the footprint of each configuration the study ran."""

from pathlib import Path

import pandas as pd

from analysis.memory_section import memory_section


def section(ctx) -> str:
    fp_long = getattr(ctx, "memory", None)
    if fp_long is None:  # a study folder written before the memory stage, or one rerun from disk
        path = Path(ctx.out_dir) / "memory.csv"
        fp_long = pd.read_csv(path) if path.exists() else None
    return memory_section(fp_long, ctx.rows, ctx.out_dir)
