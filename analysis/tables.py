"""The one Markdown table writer of the reports (pandas.DataFrame.to_markdown, through tabulate)."""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["md_table"]


def md_table(df: pd.DataFrame, floatfmt: str = ".3g") -> str:
    """A DataFrame as a GitHub Markdown table; floats written with ``floatfmt``, NaN shown empty.

    Cells that are already strings are written as they are: tabulate's number parsing is off, so a
    value a caller formatted (``"0.1234"``, ``"1,024"``) keeps its digits.

    Args:
        df: the table; its index is not written.
        floatfmt: format spec of float cells.

    Returns:
        The Markdown table, header first.

    >>> print(md_table(pd.DataFrame({"knob": ["a", "b"], "ratio": [1.23456, float("nan")], "n": [2, 3],
    ...                              "label": ["0.1000", "x"]})))
    | knob   | ratio   | n   | label   |
    |:-------|:--------|:----|:--------|
    | a      | 1.23    | 2   | 0.1000  |
    | b      |         | 3   | x       |
    """
    def cell(v):
        if isinstance(v, (float, np.floating)):
            return "" if np.isnan(v) else format(float(v), floatfmt)
        return str(v)

    shown = pd.DataFrame({i: [cell(v) for v in df.iloc[:, i]] for i in range(df.shape[1])})
    shown.columns = [str(c) for c in df.columns]
    return shown.to_markdown(index=False, disable_numparse=True)
