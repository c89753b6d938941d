"""Configs are code: frozen dataclasses, preset functions, validated ``--key=value`` overrides."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Iterable, Literal, get_args, get_origin


from memsim.knobs import ConfigError  # noqa: F401 — re-exported: the one error for bad input


def field_names(cfg_or_cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cfg_or_cls)]


def _type_of(cls, name: str):
    hints = typing.get_type_hints(cls)
    return hints[name]


def _describe(tp) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (tuple, list):
        inner = get_args(tp)[0]
        if get_origin(inner) in (tuple, list):  # a sequence of tuples: 32x16,128x48
            return f"comma-separated AxB groups of {_describe(get_args(inner)[0])}s"
        return f"comma-separated {_describe(inner)}s"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(tp))
    return getattr(tp, "__name__", str(tp))


def coerce(key: str, raw: Any, tp) -> Any:
    """Converts ``raw`` (often a command-line string) to type ``tp``; ConfigError names ``key``."""
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if type(None) in args and (raw is None or (isinstance(raw, str) and raw.lower() in ("none", ""))):
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return coerce(key, raw, a)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"{key}={raw!r}: expected {_describe(tp)}")
    if origin is Literal:
        choices = get_args(tp)
        for c in choices:
            if raw == c or (isinstance(raw, str) and str(c) == raw):
                return c
        raise ConfigError(f"{key}={raw!r}: expected one of {', '.join(repr(c) for c in choices)}")
    if origin in (tuple, list):
        (inner,) = get_args(tp)[:1]
        items = raw.split(",") if isinstance(raw, str) else list(raw)
        if isinstance(raw, str) and get_origin(inner) in (tuple, list):
            # a sequence of tuples on the command line: groups split by ',', members by 'x'
            items = [x.strip().split("x") for x in items if x.strip() != ""]
        vals = [coerce(key, x.strip() if isinstance(x, str) else x, inner) for x in items if x != ""]
        return tuple(vals) if origin is tuple else vals
    if tp is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("1", "true", "yes", "on"):
            return True
        if isinstance(raw, str) and raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{key}={raw!r}: expected true or false")
    if tp is int:
        if isinstance(raw, bool):
            raise ConfigError(f"{key}={raw!r}: expected an integer")
        if isinstance(raw, int):
            return raw
        try:
            f = float(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}={raw!r}: expected an integer") from None
        if not f.is_integer():
            raise ConfigError(f"{key}={raw!r}: expected an integer")
        return int(f)
    if tp is float:
        if isinstance(raw, bool):
            raise ConfigError(f"{key}={raw!r}: expected a number")
        try:
            return float(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}={raw!r}: expected a number") from None
    if tp is str:
        if not isinstance(raw, str):
            raise ConfigError(f"{key}={raw!r}: expected a string")
        return raw
    raise ConfigError(f"{key}: unsupported field type {tp!r}")


def apply_overrides(cfg, overrides: dict[str, Any]):
    """Returns ``dataclasses.replace(cfg, **typed_overrides)``; unknown keys or bad types raise.

    Validation of values (ranges, combinations) is the dataclass's ``__post_init__``'s job, so an
    impossible value is rejected here too, before any work starts.
    """
    names = field_names(cfg)
    typed = {}
    for key, raw in overrides.items():
        if key not in names:
            close = [n for n in names if key.lower() in n or n in key.lower()]
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise ConfigError(
                f"unknown config key {key!r} for {type(cfg).__name__}.{hint} "
                f"Known keys: {', '.join(names)}"
            )
        typed[key] = coerce(key, raw, _type_of(type(cfg), key))
    return dataclasses.replace(cfg, **typed)


def parse_overrides(args: Iterable[str]) -> dict[str, str]:
    """Parses ``--key=value`` arguments into a dict; anything else raises ConfigError."""
    out: dict[str, str] = {}
    for a in args:
        if not a.startswith("--") or "=" not in a:
            raise ConfigError(f"argument {a!r}: expected --key=value")
        k, v = a[2:].split("=", 1)
        k = k.replace("-", "_")
        if k in out:
            raise ConfigError(f"config key {k!r} given twice")
        out[k] = v
    return out


def describe_fields(cfg) -> list[tuple[str, str, Any]]:
    """(name, type description, default value) for each field, for --help."""
    return [(f.name, _describe(_type_of(type(cfg), f.name)), getattr(cfg, f.name))
            for f in dataclasses.fields(cfg)]


def check(cond: bool, key: str, value: Any, what: str) -> None:
    """Raises ConfigError('key=value: what') unless ``cond``; for ``__post_init__`` validation."""
    if not cond:
        raise ConfigError(f"{key}={value!r}: {what}")


def to_flat_dict(cfg) -> dict[str, Any]:
    """Config fields as a flat dict of scalars (tuples joined with commas) for result rows."""
    out = {}
    for k, v in dataclasses.asdict(cfg).items():
        if isinstance(v, (tuple, list)):
            v = ",".join(str(x) for x in v)
        out[k] = v
    return out
