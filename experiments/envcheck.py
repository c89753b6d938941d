"""``python -m experiments env``: is this environment fit to run the toolkit, and on what?

Prints the platform, device kind and count, the memory kinds the device addresses, the versions of
Python and of every required package beside the range pyproject.toml tests, and what is missing.
Exit code 1 when a required package is missing or JAX cannot start (or, with
``--require_accelerator=true``, when JAX sees only the CPU); 0 otherwise. A version outside the
tested range is reported ("untested version") but does not fail the check.

Nothing here imports jax at module level, so the check runs (and says so) where jax is missing.
"""

from __future__ import annotations

import dataclasses
import os
import platform as pyplatform
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Callable

import pandas as pd

from experiments import compat

REPO = Path(__file__).resolve().parent.parent
DISTRIBUTION = "memsim"
PYTHON_RANGE = ">=3.11,<3.14"
# shown in this order; jaxlib is required through jax (its own dependency), so it is checked too
SHOWN = ("jax", "jaxlib", "flax", "optax", "grain", "array-record", "numpy", "pandas")
_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9_.\-]*)\s*(?:\[[^\]]*\])?\s*([^;]*?)\s*(?:;(.*))?$")
_OPS = {">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "==": lambda a, b: a == b,
        "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, "!=": lambda a, b: a != b}


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    require_accelerator: bool = False   # fail (exit 1) when JAX's default backend is the CPU


PRESETS: dict[str, Callable[[], EnvConfig]] = {"default": EnvConfig}


def parse_requirement(req: str) -> tuple[str, tuple[tuple[str, str], ...], str]:
    """``'jax>=0.10.2,<0.13'`` → ``('jax', (('>=', '0.10.2'), ('<', '0.13')), '')`` (name, clauses,
    environment marker). Only the operators ``>= < == <= > !=`` are understood.

    >>> parse_requirement('pytest>=9.2.0,<10; extra == "dev"')
    ('pytest', (('>=', '9.2.0'), ('<', '10')), 'extra == "dev"')
    """
    m = _REQ.match(req)
    if not m:
        raise ValueError(f"requirement {req!r} is not 'name>=oldest,<next'")
    clauses = []
    for part in filter(None, (p.strip() for p in m.group(2).split(","))):
        op = next((o for o in (">=", "<=", "==", "!=", "<", ">") if part.startswith(o)), None)
        if op is None or not part[len(op):].strip():
            raise ValueError(f"requirement {req!r}: clause {part!r} is not one of {', '.join(_OPS)} "
                             "followed by a version")
        clauses.append((op, part[len(op):].strip()))
    return m.group(1), tuple(clauses), (m.group(3) or "").strip()


def _release(version: str) -> tuple[int, ...]:
    m = re.match(r"\d+(?:\.\d+)*", version)
    if not m:
        raise ValueError(f"version {version!r} does not start with a release number like 1.2.3")
    return tuple(int(x) for x in m.group(0).split("."))


def in_range(version: str, clauses) -> bool:
    """Whether ``version`` meets every clause, comparing release numbers (``0.12.0.1`` < ``0.13``).

    >>> in_range('0.12.0.1', (('>=', '0.10.2'), ('<', '0.13'))), in_range('0.13.0', (('<', '0.13'),))
    (True, False)
    """
    v = _release(version)
    for op, bound in clauses:
        b = _release(bound)
        n = max(len(v), len(b))
        if not _OPS[op](v + (0,) * (n - len(v)), b + (0,) * (n - len(b))):
            return False
    return True


def requirements() -> list[str]:
    """The toolkit's runtime requirements: from the installed distribution's metadata, else (a
    source tree that was never installed) from pyproject.toml."""
    try:
        reqs = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        reqs = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return [r for r in reqs if "extra" not in parse_requirement(r)[2]]


def _row(item: str, value, required: str, status: str, note: str = "") -> dict:
    return {"item": item, "value": "" if value is None else str(value), "required": required,
            "status": status, "note": note}


def _device_rows(cfg: EnvConfig) -> list[dict]:
    try:
        import jax
        devs = jax.devices()
    except Exception as e:  # noqa: BLE001 — an import or backend failure is what the check reports
        return [_row("platform", None, "", "error", f"JAX could not start: {type(e).__name__}: {e}")]
    d = devs[0]
    accel = d.platform != "cpu"
    status = "ok" if accel or not cfg.require_accelerator else "no accelerator"
    note = "" if accel else ("JAX sees only the CPU: is a CUDA/TPU build of jax installed "
                             "(e.g. jax[cuda13]) and the driver visible?")
    stats = compat.memory_stats(d)
    from experiments.env import SIMD_FLAGS, cpu_identity
    cpu = cpu_identity()
    return [
        _row("cpu_model", cpu["cpu_model"] or None, "", "ok",
             f"{os.cpu_count()} cores; SIMD {cpu['cpu_simd'] or 'none of ' + ', '.join(SIMD_FLAGS)}"),
        _row("platform", d.platform, "accelerator" if cfg.require_accelerator else "", status, note),
        _row("device_kind", d.device_kind, "", "ok"),
        _row("device_count", len(devs), "", "ok"),
        _row("memory_kinds", ",".join(compat.memory_kinds(d)) or "none", "", "ok",
             "" if "pinned_host" in compat.memory_kinds(d) else "no pinned_host: the pinned probe is not measured"),
        _row("device_memory_bytes", (stats or {}).get("bytes_limit"), "", "ok",
             "" if stats else "memory_stats() not available on this platform"),
    ]


def run(cfg: EnvConfig) -> pd.DataFrame:
    """One row per item (python, each package, platform, devices): item, value, required, status
    (ok | missing | untested version | error | no accelerator), note."""
    if not isinstance(cfg, EnvConfig):
        raise TypeError(f"cfg is a {type(cfg).__name__}; pass an EnvConfig")
    py = pyplatform.python_version()
    rows = [_row("python", py, PYTHON_RANGE,
                 "ok" if in_range(py, parse_requirement("python" + PYTHON_RANGE)[1]) else "untested version",
                 pyplatform.machine())]
    reqs = {parse_requirement(r)[0].lower().replace("_", "-"): parse_requirement(r)[1] for r in requirements()}
    names = [n for n in SHOWN if n in reqs or n == "jaxlib"] + [n for n in reqs if n not in SHOWN]
    for name in names:
        clauses = reqs.get(name, ())
        # lower bound first (installed metadata may list the clauses in any order)
        rng = ",".join(op + v for op, v in sorted(clauses, key=lambda c: c[0] not in (">=", ">"))) or "(required by jax)"
        version = compat.version_of(name)
        if version is None:
            rows.append(_row(name, None, rng, "missing"))
        elif clauses and not in_range(version, clauses):
            rows.append(_row(name, version, rng, "untested version", "outside the tested range"))
        else:
            rows.append(_row(name, version, rng, "ok"))
    plugins = sorted(d.metadata["Name"] for d in metadata.distributions()
                     if re.match(r"jax[-_](cuda|rocm|tpu)", d.metadata["Name"] or "", re.I) or
                     (d.metadata["Name"] or "").lower() == "libtpu")
    for p in plugins:
        rows.append(_row(p, compat.version_of(p), "", "ok", "JAX accelerator plugin"))
    if compat.version_of("jax") is not None:
        rows += _device_rows(cfg)
    return pd.DataFrame(rows, columns=["item", "value", "required", "status", "note"])


FAILING = ("missing", "error", "no accelerator")


def format_report(df: pd.DataFrame) -> str:
    lines = [f"{'item':<22} {'value':<34} {'tested':<20} status"]
    for _, r in df.iterrows():
        note = f"  ({r['note']})" if r["note"] else ""
        lines.append(f"{r['item']:<22} {r['value'] or '-':<34} {r['required']:<20} {r['status']}{note}")
    missing = df[df.status == "missing"]
    if len(missing):
        pins = " ".join(f"'{n}{rq}'" for n, rq in zip(missing["item"], missing["required"]) if rq[:1] in "<>=!")
        lines += ["", f"missing: {', '.join(missing['item'])}"]
        if pins:
            lines.append(f"  install them without touching JAX: pip install {pins}")
    bad = df[df.status.isin(FAILING)]
    lines += ["", "environment check: " + ("FAILED (" + ", ".join(f"{i}: {s}" for i, s in zip(bad["item"], bad["status"]))
                                           + ")" if len(bad) else "ok")]
    return "\n".join(lines)


def main(cfg: EnvConfig, preset: str = "default") -> int:
    df = run(cfg)
    print(format_report(df))
    return 1 if df.status.isin(FAILING).any() else 0
