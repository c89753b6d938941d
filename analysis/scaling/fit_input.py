"""Checks on the table a fit reads: columns present, values finite, positive, enough rows.

Every fitter in ``analysis`` validates its input here first, so a bad table fails early with a
message that names the column, the offending rows (by index label) and values, and what to do
(DESIGN.md, conventions 8 and 12: NaN input raises; errors a person can act on).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd


class FitInputError(ValueError):
    """The table handed to a fit cannot be fitted as it is (the message says why and where)."""


def _rows(index: pd.Index, limit: int = 8) -> str:
    labels = [repr(v) if isinstance(v, str) else str(v) for v in index[:limit]]
    more = f" and {len(index) - limit} more" if len(index) > limit else ""
    return "[" + ", ".join(labels) + "]" + more


def numeric_columns(
    df: pd.DataFrame,
    columns: dict[str, str],
    *,
    positive: Sequence[str] = (),
    n_params: int,
    what: str,
) -> pd.DataFrame:
    """Return the named columns as float64 after checking them.

    Args:
        df: the table.
        columns: role -> column name, e.g. ``{"n": "params", "loss": "val_loss"}``.
        positive: roles whose values must be > 0.
        n_params: the fit's number of free parameters; at least this many rows are needed.
        what: the fit's name, for messages.

    Returns:
        A DataFrame with one float64 column per role (named by role), same index as ``df``.

    Raises:
        FitInputError: a column is missing or not numeric; a value is NaN, infinite or
            (for ``positive`` roles) not above zero; or there are fewer rows than parameters.

    Example:
        >>> df = pd.DataFrame({"params": [1e6, 2e6, -1.0], "val_loss": [3.0, 2.9, 2.8]})
        >>> numeric_columns(df, {"x": "params", "y": "val_loss"}, positive=["x"], n_params=2,
        ...                 what="fit_power_law")
        Traceback (most recent call last):
        ...
        analysis.scaling.fit_input.FitInputError: fit_power_law: column 'params' must be > 0, but rows [2] hold [-1.0]; drop or correct those rows before fitting.
    """
    if not isinstance(df, pd.DataFrame):
        raise FitInputError(f"{what}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns.values() if c not in df.columns]
    if missing:
        raise FitInputError(
            f"{what}: missing column(s) {missing}; the table has {list(map(str, df.columns))}. "
            "Pass the right names (e.g. n=..., d=..., loss=...)."
        )
    out = {}
    for role, col in columns.items():
        s = df[col]
        if not (pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)):
            converted = pd.to_numeric(s, errors="coerce")
            bad = s.index[converted.isna() & s.notna()]
            if len(bad):
                raise FitInputError(
                    f"{what}: column {col!r} must be numeric, but rows {_rows(bad)} hold "
                    f"{[s[i] for i in bad[:8]]}; convert or drop them."
                )
            s = converted
        v = s.to_numpy(dtype=np.float64, na_value=np.nan)
        nan = np.isnan(v)
        if nan.any():
            raise FitInputError(
                f"{what}: column {col!r} has NaN at rows {_rows(df.index[nan])}; "
                "a fit does not skip rows silently: drop or fill them first."
            )
        inf = np.isinf(v)
        if inf.any():
            raise FitInputError(
                f"{what}: column {col!r} has infinite values at rows {_rows(df.index[inf])} "
                f"({v[inf][:8].tolist()}); drop or correct those rows."
            )
        if role in positive:
            bad = v <= 0
            if bad.any():
                raise FitInputError(
                    f"{what}: column {col!r} must be > 0, but rows {_rows(df.index[bad])} hold "
                    f"{v[bad][:8].tolist()}; drop or correct those rows before fitting."
                )
        out[role] = v
    if len(df) < n_params:
        raise FitInputError(
            f"{what}: {len(df)} rows cannot determine {n_params} parameters; "
            f"at least {n_params} rows are needed (more for meaningful intervals)."
        )
    return pd.DataFrame(out, index=df.index)


def require_distinct(values: np.ndarray, column: str, what: str, at_least: int = 2) -> None:
    """Raise unless ``values`` holds at least ``at_least`` distinct numbers.

    Example:
        >>> require_distinct(np.array([1.0, 1.0]), "tokens", "fit_chinchilla")
        Traceback (most recent call last):
        ...
        analysis.scaling.fit_input.FitInputError: fit_chinchilla: column 'tokens' holds only 1 distinct value(s) ([1.0]); its exponent cannot be fitted: add rows with at least 2 different values.
    """
    distinct = np.unique(values)
    if len(distinct) < at_least:
        raise FitInputError(
            f"{what}: column {column!r} holds only {len(distinct)} distinct value(s) "
            f"({distinct[:8].tolist()}); its exponent cannot be fitted: add rows with at least "
            f"{at_least} different values."
        )
