"""``python -m benchmarks [--json]``: runs every benchmark in turn (make bench)."""

import importlib.util
import os
import subprocess
import sys

BENCHMARKS = ("feed", "repeatability", "pipeline", "scaling_fit", "costmodel_fit")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    failed = []
    for name in BENCHMARKS:
        if importlib.util.find_spec(f"benchmarks.{name}") is None:
            print(f"== benchmarks.{name}: not present, skipped")
            continue
        print(f"== benchmarks.{name}", flush=True)
        # Each benchmark in its own process: JAX's device setup (e.g. host device count) is per process.
        env = dict(os.environ)
        env.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={os.cpu_count() or 1}")
        if name in ("feed", "repeatability"):
            env.pop("XLA_FLAGS")  # these measure the default single-device setup
        rc = subprocess.call([sys.executable, "-m", f"benchmarks.{name}", *argv], env=env)
        if rc:
            print(f"benchmarks.{name} failed with exit code {rc}")
            failed.append(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
