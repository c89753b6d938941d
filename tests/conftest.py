import os

import pytest

# Silence grain/absl INFO chatter in test logs; errors still show.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(scope="session")
def data_cache(tmp_path_factory):
    """A dataset cache shared by the tests of one session (datasets are written once)."""
    return str(tmp_path_factory.mktemp("memsim-cache"))


def _shm_guard(prefix=""):
    from experiments.loader import shm_segments
    before = shm_segments()
    yield
    import time
    deadline = time.time() + 10
    while time.time() < deadline:
        left = {s for s in shm_segments() - before if s.startswith(prefix)}
        if not left:
            return
        time.sleep(0.25)
    pytest.fail(f"shared-memory segments left behind in /dev/shm: {sorted(left)}")


@pytest.fixture
def shm_guard():
    """Fails the test if it leaves anything new in /dev/shm (segments or semaphores)."""
    yield from _shm_guard()

