"""analysis.interrupt and the launcher: a Ctrl-C that some library swallowed still stops the command."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import interrupt
from analysis.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def flag():
    interrupt._requested.clear()
    yield interrupt._requested
    interrupt._requested.clear()


def test_the_handler_raises_and_remembers(flag):
    interrupt.check()  # nothing came: no-op
    with pytest.raises(KeyboardInterrupt):
        interrupt._handler(signal.SIGINT, None)
    assert interrupt.requested()
    with pytest.raises(KeyboardInterrupt):
        interrupt.check()


def test_a_swallowed_ctrl_c_still_ends_the_command_with_130(flag, capsys):
    try:  # as Python does with an exception raised inside a garbage-collector callback
        interrupt._handler(signal.SIGINT, None)
    except KeyboardInterrupt:
        pass
    # a command that never checks the flag itself (it would exit 0): the launcher does
    model = ROOT / "results" / "cpu-2core" / "holdout" / "pair13" / "model.json"
    assert main(["costmodel", "predict", str(model), "--grid", "num_workers=0,1"]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "costmodel: interrupted"


def test_importing_the_package_does_not_import_jax():
    # the launcher installs its handler after the package is imported: JAX (and its garbage-collector
    # callback) must not come with it
    code = "import sys, analysis; print('jax' in sys.modules); from analysis import build_report; print(callable(build_report))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "True"]
