"""The one Markdown table writer of the reports (pandas.DataFrame.to_markdown, through tabulate)."""
from __future__ import annotations
import pandas as pd
def md_table(df: pd.DataFrame, floatfmt: str = ".3g") -> str:
    """A DataFrame as a GitHub Markdown table; NaN shown empty."""
    return df.to_markdown(index=False, floatfmt=floatfmt, missingval="")
