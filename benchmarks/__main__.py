"""``python -m benchmarks [--json]``: runs every benchmark in turn (make bench)."""

import importlib
import sys

BENCHMARKS = ("feed", "pipeline", "scaling_fit")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    failed = []
    for name in BENCHMARKS:
        try:
            mod = importlib.import_module(f"benchmarks.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"benchmarks.{name}":
                print(f"== benchmarks.{name}: not present, skipped")
                continue
            raise
        print(f"== benchmarks.{name}", flush=True)
        try:
            mod.main(argv)
        except Exception as e:  # noqa: BLE001 — report and go on to the next benchmark
            print(f"benchmarks.{name} failed: {type(e).__name__}: {e}")
            failed.append(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
