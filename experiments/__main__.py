"""``python -m experiments NAME [--preset P] [--key=value ...]``: parse, run, write. Nothing else."""

from __future__ import annotations

import os
import sys

# Each measured run is a JAX process of its own beside the sweep's (a forkserver child per
# configuration; N processes in a multi-process run), and each starts its own backend. On a GPU,
# XLA's default allocator takes 75% of the device's memory when a backend starts, so the second
# process on one device fails to allocate: allocate on demand instead. Peak memory is still read
# from memory_stats(). A value the user set is kept.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from experiments.configs import ConfigError, apply_overrides, coerce, describe_fields, parse_overrides
from experiments.registry import EXPERIMENTS
from experiments.results import ResultsError


def usage() -> str:
    lines = ["usage: python -m experiments NAME [--preset P] [--key=value ...]", "", "experiments:"]
    for name, exp in EXPERIMENTS.items():
        lines.append(f"  {name:10s} {exp.help}  (presets: {', '.join(exp.presets)}; default {exp.default_preset})")
    lines.append("")
    lines.append("'python -m experiments NAME --help' lists every knob of NAME with its default.")
    return "\n".join(lines)


def usage_for(name: str) -> str:
    exp = EXPERIMENTS[name]
    cfg = exp.presets[exp.default_preset]()
    lines = [f"usage: python -m experiments {name} [--preset {'|'.join(exp.presets)}] [--key=value ...]",
             "", exp.help, "", f"knobs (defaults of preset {exp.default_preset!r}):"]
    for key, tp, default in describe_fields(cfg):
        lines.append(f"  {'--' + key + '=' + str(default):<40} {tp}")
    lines += exp.extra_help
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in EXPERIMENTS:
        print(f"error: unknown experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}", file=sys.stderr)
        return 2
    exp = EXPERIMENTS[name]
    if any(a in ("-h", "--help") for a in rest):
        print(usage_for(name))
        return 0
    preset = exp.default_preset
    if rest and rest[0] == "--preset" and len(rest) > 1:
        preset, rest = rest[1], rest[2:]
    # flags of the run itself may be given bare: --retry_failed is --retry_failed=true
    rest = [f"{a}=true" if a.startswith("--") and "=" not in a and a[2:].replace("-", "_") in exp.run_options
            else a for a in rest]
    try:
        overrides = parse_overrides(rest)
        preset = overrides.pop("preset", preset)
        if preset not in exp.presets:
            raise ConfigError(f"preset={preset!r}: {name} has presets {', '.join(exp.presets)}")
        run_opts = {k: overrides.pop(k) for k in list(overrides) if k in exp.run_options}
        if "retry_failed" in run_opts:
            run_opts["retry_failed"] = coerce("retry_failed", run_opts["retry_failed"], bool)
        cfg = apply_overrides(exp.presets[preset](), overrides)
        return exp.main(cfg, preset=preset, **run_opts) or 0
    except (ConfigError, ResultsError) as e:  # bad input, found before any work (parsing, or the machine's own checks)
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
