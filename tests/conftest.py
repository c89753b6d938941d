import atexit
import os
import shutil
import tempfile

import pytest

# Silence grain/absl INFO chatter in test logs; errors still show.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# One JAX persistent compilation cache for the session, its subprocesses included (they inherit the
# environment): the tests compile the same small steps many times over, in new processes and in new
# closures. Measured on the 2-core CPU: a smoke scaling point takes 8.9 s cold and 2.4 s with the
# step loaded from the cache, whose cost analysis (XLA flops per step) is the same as a fresh one. Set
# JAX_COMPILATION_CACHE_DIR yourself to choose the folder (it is then kept).
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _xla_cache = tempfile.mkdtemp(prefix="memsim-test-xla-cache-")
    atexit.register(shutil.rmtree, _xla_cache, ignore_errors=True)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _xla_cache
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


@pytest.fixture(scope="session")
def data_cache(tmp_path_factory):
    """A dataset cache shared by the tests of one session (datasets are written once)."""
    return str(tmp_path_factory.mktemp("memsim-cache"))


def _shm_guard(prefix=""):
    """Fails if a segment that appeared while the test ran is still there 10 s after it ended.

    Only the segments present when the test ends are candidates: one created later is another
    process's (make test runs test files in parallel, and their loaders make and free segments all
    the time), and a segment that is freed within the 10 s was in flight, not leaked."""
    from experiments.loader import shm_segments
    before = shm_segments()
    yield
    import time
    left = {s for s in shm_segments() - before if s.startswith(prefix)}
    deadline = time.time() + 10
    while left and time.time() < deadline:
        time.sleep(0.25)
        left &= shm_segments()
    if left:
        pytest.fail(f"shared-memory segments left behind in /dev/shm: {sorted(left)}")


@pytest.fixture
def shm_guard():
    """Fails the test if it leaves anything new in /dev/shm (segments or semaphores)."""
    yield from _shm_guard()



# The docstring examples of these modules are part of the `latest` subset (make test-latest), as the
# module's own tests are; --doctest-modules collects them from the package, outside this folder.
LATEST_DOCTEST_MODULES = ("memsim/footprint.py",)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if isinstance(item, pytest.DoctestItem) and item.nodeid.startswith(LATEST_DOCTEST_MODULES):
            item.add_marker(pytest.mark.latest)
        if "shm_guard" in getattr(item, "fixturenames", ()):
            # make test runs these alone, after the rest: /dev/shm is shared by every process, so a
            # segment another test makes (or leaks) while one of these runs would count as its leak
            item.add_marker(pytest.mark.shm_guard)
