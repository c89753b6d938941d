"""Tidy, append-only results: ``results/<experiment>/<run_id>/rows.csv`` and friends.

Each finished configuration appends one CSV line with a single ``write`` on an ``O_APPEND``
descriptor followed by ``fsync``, so a Ctrl-C or a kill leaves every finished row intact; a line
cut short by a kill mid-write (no trailing newline) is dropped when reading. Column dtypes are kept
in ``columns.json`` beside the rows so ``load`` restores them.
"""

from __future__ import annotations

import csv
import datetime as _dt
import glob as _glob
import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.env import REPO

RESULTS_ROOT = Path(os.environ.get("MEMSIM_RESULTS", REPO / "results"))


class ResultsError(RuntimeError):
    """A results folder or file that cannot be used as asked; the message says what to do."""


# Fields added to a configuration after results were written, with the value every earlier run
# had: left out of the id while they hold that value, so folders written before they existed still
# resume (their finished configurations keep their ids).
ADDED_FIELDS = {"num_processes": 1, "resident_min_measure_s": 0.0}


def config_id(cfg_dict: dict) -> str:
    """Stable 12-hex id of a configuration (its fields, sorted), used to skip finished ones.

    A field of ``ADDED_FIELDS`` at its old value does not change the id:

    >>> config_id({"batch_size": 64}) == config_id({"batch_size": 64, "num_processes": 1})
    True
    >>> config_id({"batch_size": 64}) == config_id({"batch_size": 64, "num_processes": 2})
    False
    """
    keep = {k: v for k, v in cfg_dict.items() if k not in ADDED_FIELDS or v != ADDED_FIELDS[k]}
    blob = json.dumps({k: keep[k] for k in sorted(keep)}, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def new_run_id() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def run_dir(experiment: str, run_id: str | None = None, root: Path | str | None = None,
            resume: bool = False) -> Path:
    """The folder for a run. Without ``run_id`` a fresh id is made (never an existing folder);
    with ``run_id`` an existing folder is reused only when ``resume`` is true."""
    base = Path(root) if root is not None else RESULTS_ROOT
    base = base / experiment
    if run_id is None:
        rid = new_run_id()
        d, k = base / rid, 1
        while d.exists():
            k += 1
            d = base / f"{rid}-{k}"
        d.mkdir(parents=True)
        return d
    if "/" in run_id or run_id in ("", ".", ".."):
        raise ResultsError(f"run_id={run_id!r}: use a plain folder name")
    d = base / run_id
    if d.exists() and not resume:
        raise ResultsError(f"{d} already exists; pass the same --run_id to resume it, or choose another run_id")
    if d.exists():
        check_same_malloc(d)
    d.mkdir(parents=True, exist_ok=True)
    return d


def check_same_malloc(d: Path) -> None:
    """ResultsError when the rows already in ``d`` (``rows.csv`` there and one folder down) were
    measured under another malloc setting than this process has (``experiments.heap``): a resumed
    run would mix the two within one configuration, whose id does not include it."""
    from experiments import heap
    now = heap.apply()
    for p in [d / "rows.csv", *sorted(d.glob("*/rows.csv"))]:
        if not p.is_file():
            continue
        try:
            seen = pd.read_csv(p, usecols=lambda c: c == "malloc", dtype=str)
        except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
            continue  # not this check's business: reading the rows says what is wrong with them
        other = sorted({v for v in seen.get("malloc", pd.Series(dtype=str)).dropna() if v != now})
        if other:
            raise ResultsError(f"{p}: measured with malloc {other[0]!r}, and this process has {now!r} "
                               f"({heap.ENV}={os.environ.get(heap.ENV, '')!r}); resume with {heap.ENV} as it "
                               f"was for those rows, or choose another run_id")


def write_json_atomic(path: Path, obj, sort_keys: bool = True) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=sort_keys, default=str))
    os.replace(tmp, path)


def _dtype_name(v) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int64"
    if isinstance(v, float):
        return "float64"
    return "string"


class RowWriter:
    """Appends rows (dicts) to ``<dir>/<name>.csv`` durably, one line per row."""

    def __init__(self, directory: Path, name: str = "rows"):
        self.path = Path(directory) / f"{name}.csv"
        self.schema_path = Path(directory) / f"{name}.columns.json"
        # column order is the CSV's: the schema file keeps it (unsorted)
        self.columns: dict[str, str] = json.loads(self.schema_path.read_text()) if self.schema_path.exists() else {}
        if self.path.exists() and not self.columns:
            raise ResultsError(f"{self.path} exists without {self.schema_path.name}; it was not written by memsim")
        self._drop_partial_tail()
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, newline="") as f:
                header = next(csv.reader(f), [])
            if set(header) != set(self.columns):
                raise ResultsError(f"{self.path}: header and {self.schema_path.name} disagree; the file was edited")
            self.columns = {k: self.columns[k] for k in header}

    def _drop_partial_tail(self) -> None:
        # A kill during a write can leave a last line without its newline: cut it off.
        if not self.path.exists():
            return
        with open(self.path, "rb+") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)

    def append(self, row: dict) -> None:
        widen = [k for k, v in row.items() if self.columns.get(k) == "int64" and _dtype_name(v) == "float64"]
        for k in widen:
            self.columns[k] = "float64"
        if widen:
            write_json_atomic(self.schema_path, self.columns, sort_keys=False)
        new = [k for k in row if k not in self.columns]
        if new:
            for k in new:
                self.columns[k] = _dtype_name(row[k])
            if self.path.exists() and self.path.stat().st_size:
                old = read_csv_rows(self.path)
                tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
                old.reindex(columns=list(self.columns)).to_csv(tmp, index=False)
                os.replace(tmp, self.path)
            write_json_atomic(self.schema_path, self.columns, sort_keys=False)
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        if not self.path.exists() or self.path.stat().st_size == 0:
            w.writerow(list(self.columns))
        w.writerow([_cell(row.get(k)) for k in self.columns])
        data = buf.getvalue().encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)


def done_pairs(out_dir: Path, retry_failed: bool = False) -> set[tuple[str, int]]:
    """The (config_id, repeat) pairs a resumed sweep skips: every pair with a row, or with
    ``retry_failed`` only the pairs that have an ok row (failed ones are run again)."""
    p = Path(out_dir) / "rows.csv"
    if not p.exists():
        return set()
    df = read_csv_rows(p)
    if not len(df) or "config_id" not in df:
        return set()
    rep = df["repeat"].fillna(0).astype(int) if "repeat" in df else pd.Series(0, index=df.index)
    keep = (df["status"] == "ok").fillna(False) if retry_failed and "status" in df else pd.Series(True, index=df.index)
    return set(zip(df.loc[keep, "config_id"].astype(str), rep[keep]))


def current(rows: pd.DataFrame) -> pd.DataFrame:
    """Drops failed rows whose (config_id, repeat) later finished ok (after ``--retry_failed``).

    Rows are append-only, so a retried failure stays in ``rows.csv``; this is the view in which
    each pair has its ok row, or its failed rows if it never succeeded.
    """
    if not len(rows) or "config_id" not in rows or "status" not in rows:
        return rows
    rep = rows["repeat"].fillna(0).astype(int) if "repeat" in rows else pd.Series(0, index=rows.index)
    key = rows["config_id"].astype(str) + "#" + rep.astype(str)
    ok_keys = set(key[rows["status"] == "ok"])
    drop = (rows["status"] != "ok") & key.isin(ok_keys)
    return rows[~drop.fillna(False)]


# The measured quantities summarize() gives an interval and a CV for.
SUMMARY_METRICS = ("samples_per_s", "step_time_median_s", "device_resident_samples_per_s", "feed_efficiency")


def median_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """Distribution-free interval for the median of ``values``: (low, high, coverage).

    The interval is [x(k), x(n+1-k)] of the sorted values with the largest k whose binomial coverage
    1 - 2·P(Bin(n, 1/2) < k) is at least ``level``; with too few values for that (n < 6 at 95%) it is
    [min, max] and the coverage it actually has is returned (n = 3: 0.75; n = 5: 0.9375).

    >>> median_interval([3.0, 1.0, 2.0])
    (1.0, 3.0, 0.75)
    >>> lo, hi, cov = median_interval(range(1, 11)); (lo, hi, round(cov, 3))
    (2.0, 9.0, 0.979)
    """
    from math import comb
    x = np.sort(np.asarray([v for v in values if v == v], float))
    n = len(x)
    if n == 0:
        return (float("nan"), float("nan"), float("nan"))
    if n == 1:
        return (float(x[0]), float(x[0]), 0.0)

    def coverage(k):  # P(x(k) <= median <= x(n+1-k))
        return 1.0 - 2.0 * sum(comb(n, i) for i in range(k)) / 2.0 ** n

    k = 1
    while k + 1 <= n // 2 and coverage(k + 1) >= level:
        k += 1
    return (float(x[k - 1]), float(x[n - k]), float(coverage(k)))


def summarize(rows: pd.DataFrame, metrics=SUMMARY_METRICS, level: float = 0.95) -> pd.DataFrame:
    """One row per configuration from the tidy rows of its repeats (ok rows only).

    Every column that is constant within a configuration (its knobs, the environment) is kept as
    is; every other numeric column becomes its median over the repeats. For each of ``metrics``
    there are also ``<m>_lo`` and ``<m>_hi`` (``median_interval`` at ``level``; its coverage in
    ``interval_coverage``) and ``<m>_cv`` (standard deviation over mean, ddof=1). ``repeats`` counts
    the ok repeats, ``failed_repeats`` the failed ones. ``bound_exceeded`` is true where the interval
    of ``feed_efficiency`` lies above 1: the fed loop beat its own device-resident bound, so the
    bound was measured low.

    Args:
        rows: tidy rows (one per configuration and repeat) with ``config_id`` and ``status``.
        metrics: columns to give an interval and a CV.
        level: the interval's nominal coverage.

    Returns:
        A DataFrame with one row per ``config_id``, in order of first appearance.

    >>> rows = pd.DataFrame({"config_id": ["a"] * 3 + ["b"] * 3, "repeat": [0, 1, 2] * 2,
    ...                      "status": ["ok"] * 6, "num_workers": [0, 0, 0, 1, 1, 1],
    ...                      "samples_per_s": [100.0, 110.0, 90.0, 200.0, 190.0, 210.0]})
    >>> s = summarize(rows, metrics=("samples_per_s",))
    >>> print(s[["config_id", "num_workers", "repeats", "samples_per_s", "samples_per_s_lo", "samples_per_s_hi"]]
    ...       .to_string(index=False))
    config_id  num_workers  repeats  samples_per_s  samples_per_s_lo  samples_per_s_hi
            a            0        3          100.0              90.0             110.0
            b            1        3          200.0             190.0             210.0
    >>> round(float(s.samples_per_s_cv.iloc[0]), 3)
    0.1
    """
    if not len(rows):
        return pd.DataFrame()
    if "config_id" not in rows:
        raise ResultsError("summarize needs a config_id column (rows written by a sweep)")
    rows = current(rows)
    status = rows["status"] if "status" in rows else pd.Series("ok", index=rows.index)
    ok = rows[status == "ok"]
    failed_n = rows[status != "ok"].groupby("config_id").size()
    order = list(dict.fromkeys(rows["config_id"].astype(str)))
    out = []
    for cid, g in ok.groupby(ok["config_id"].astype(str), sort=False):
        rec = {}
        for col in g.columns:
            v = g[col]
            if col in ("repeat", "run_dir"):
                continue
            if v.nunique(dropna=False) <= 1 or not pd.api.types.is_numeric_dtype(v) or pd.api.types.is_bool_dtype(v):
                rec[col] = v.iloc[0] if v.nunique(dropna=False) <= 1 else (v.mode().iloc[0] if len(v.mode()) else v.iloc[0])
            else:
                rec[col] = float(pd.to_numeric(v, errors="coerce").median())
        rec["repeats"] = len(g)
        cov = float("nan")
        for m in metrics:
            if m not in g:
                continue
            vals = pd.to_numeric(g[m], errors="coerce").to_numpy(float)
            lo, hi, cov = median_interval(vals, level)
            rec[f"{m}_lo"], rec[f"{m}_hi"] = lo, hi
            if not np.isfinite(vals).any():  # a metric this workload does not have (e.g. text rows' decode)
                rec[m] = rec[f"{m}_cv"] = float("nan")
                continue
            rec[m] = float(np.nanmedian(vals))
            mean = float(np.nanmean(vals))
            rec[f"{m}_cv"] = float(np.nanstd(vals, ddof=1) / mean) if np.isfinite(vals).sum() > 1 and mean else float("nan")
        rec["interval_coverage"] = cov
        if "feed_efficiency_lo" in rec:
            rec["bound_exceeded"] = bool(rec["feed_efficiency_lo"] > 1.0)
        out.append(rec)
    for cid in order:  # configurations with no ok repeat keep one (failed) row
        if cid not in set(ok["config_id"].astype(str)):
            g = rows[rows["config_id"].astype(str) == cid]
            rec = g.iloc[-1].to_dict()
            rec.pop("repeat", None)
            rec["repeats"] = 0
            out.append(rec)
    df = pd.DataFrame(out)
    df["failed_repeats"] = df["config_id"].map(failed_n).fillna(0).astype(int)
    df["_order"] = df["config_id"].astype(str).map({c: i for i, c in enumerate(order)})
    return df.sort_values("_order").drop(columns="_order").reset_index(drop=True)


def repeatability(summary: pd.DataFrame, metric: str = "samples_per_s") -> float:
    """Median over configurations of the CV of ``metric`` across repeats (NaN with < 2 repeats)."""
    col = f"{metric}_cv"
    if col not in summary or not summary[col].notna().any():
        return float("nan")
    return float(summary[col].median())


def _cell(v):
    if v is None:
        return ""
    if isinstance(v, float) and v != v:
        return ""
    return v


def read_csv_rows(path: Path) -> pd.DataFrame:
    schema_path = path.with_name(path.stem + ".columns.json")
    text = path.read_bytes()
    if text and not text.endswith(b"\n"):
        text = text[: text.rfind(b"\n") + 1]  # an unfinished last line from a killed writer
    if not text.strip():
        return pd.DataFrame()
    schema = json.loads(schema_path.read_text()) if schema_path.exists() else {}
    # text columns are read as text: left to inference, a config_id such as '20644e397835' became the
    # float inf (and '012345678901' an int), and a resumed sweep ran its finished pair again
    as_text = {c: str for c, dt in schema.items() if dt == "string"} | {"config_id": str}
    df = pd.read_csv(io.BytesIO(text), keep_default_na=True, dtype=as_text)
    if schema:
        for col, dt in schema.items():
            if col not in df:
                continue
            if dt == "bool":
                df[col] = df[col].map({True: True, False: False, "True": True, "False": False}).astype("boolean")
            elif dt == "int64":
                num = pd.to_numeric(df[col], errors="coerce")
                try:
                    df[col] = num.astype("Int64")
                except TypeError:  # a later row held a fraction: the column is really float
                    df[col] = num.astype("float64")
            elif dt == "float64":
                df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
            else:
                df[col] = df[col].astype("string")
    return df


def load(path_or_glob: str | Path) -> pd.DataFrame:
    """Rows of one or many runs as one DataFrame, with dtypes restored.

    ``path_or_glob`` may be a ``rows.csv``, a run folder, or a glob of either
    (``results/sweep/*``). A ``run_dir`` column says where each row came from.
    """
    pattern = str(path_or_glob)
    paths = sorted(_glob.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
    files = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(p.rglob("rows.csv"))
        elif p.exists():
            files.append(p)
    if not files:
        raise ResultsError(f"no rows.csv found at {path_or_glob!r}")
    frames = []
    for f in files:
        df = read_csv_rows(f)
        if len(df):
            df.insert(0, "run_dir", str(f.parent))
            frames.append(df)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)
