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

import pandas as pd

from experiments.env import REPO

RESULTS_ROOT = Path(os.environ.get("MEMSIM_RESULTS", REPO / "results"))


class ResultsError(RuntimeError):
    """A results folder or file that cannot be used as asked; the message says what to do."""


def config_id(cfg_dict: dict) -> str:
    """Stable 12-hex id of a configuration (its fields, sorted), used to skip finished ones."""
    blob = json.dumps({k: cfg_dict[k] for k in sorted(cfg_dict)}, sort_keys=True, default=str)
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
    d.mkdir(parents=True, exist_ok=True)
    return d


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


def done_config_ids(out_dir: Path) -> set[str]:
    """The ``config_id`` of every row already in ``out_dir/rows.csv`` (what a resumed run skips)."""
    p = Path(out_dir) / "rows.csv"
    if not p.exists():
        return set()
    df = read_csv_rows(p)
    return set(df["config_id"].astype(str)) if "config_id" in df else set()


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
    df = pd.read_csv(io.BytesIO(text), keep_default_na=True)
    if schema_path.exists():
        schema = json.loads(schema_path.read_text())
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
