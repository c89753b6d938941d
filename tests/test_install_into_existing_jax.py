"""The README's command for installing into an environment that already has JAX leaves that JAX in
place. Slow (creates a Python 3.12 venv and installs jax 0.11.2 and the toolkit from the package
index, a few minutes): runs only with MEMSIM_INSTALL_TESTS=1, e.g.

    MEMSIM_INSTALL_TESTS=1 .venv/bin/python -m pytest -q -m install
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARK = "<!-- install-into-existing-jax -->"
USER_JAX = "0.11.2"  # the newest 0.11 on the index: a typical GPU image's JAX, older than our newest

pytestmark = [pytest.mark.install,
              pytest.mark.skipif(os.environ.get("MEMSIM_INSTALL_TESTS") != "1",
                                 reason="installs from the package index into a throwaway venv (minutes); "
                                        "set MEMSIM_INSTALL_TESTS=1 to run it")]


def readme_command() -> str:
    text = (ROOT / "README.md").read_text()
    if MARK not in text:
        raise AssertionError(f"README.md has no {MARK} marker before the install command")
    block = re.search(r"```bash\n(.*?)```", text[text.index(MARK):], re.S)
    return block.group(1)


def python312() -> str:
    found = [p for p in (shutil.which("python3.12"), *sorted(Path("/root/.pyenv/versions").glob("3.12*/bin/python3.12")))
             if p and subprocess.run([str(p), "-c", ""], capture_output=True).returncode == 0]
    if not found:
        pytest.skip("no Python 3.12 interpreter on this machine")
    return str(found[0])


def freeze(py: Path) -> dict[str, str]:
    out = subprocess.run([str(py), "-m", "pip", "freeze"], check=True, capture_output=True, text=True).stdout
    return {k.lower().replace("_", "-"): v for k, v in (ln.split("==", 1) for ln in out.splitlines() if "==" in ln)}


def test_readme_command_installs_into_an_existing_jax_and_keeps_it(tmp_path):
    venv = tmp_path / "user-env"
    subprocess.run([python312(), "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    # the user's image: their JAX and the common scientific stack, but no grain or array-record
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", f"jax=={USER_JAX}", "flax", "optax", "pandas",
                    "scipy", "matplotlib", "psutil", "tqdm"], check=True)
    before = freeze(py)
    assert before["jax"] == before["jaxlib"] == USER_JAX and "grain" not in before
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(["bash", "-c", readme_command()], cwd=ROOT, env=env, capture_output=True, text=True)
    print(proc.stdout[-4000:], proc.stderr[-4000:], file=sys.stderr)
    assert proc.returncode == 0, proc.stderr[-2000:]
    after = freeze(py)
    assert (after["jax"], after["jaxlib"]) == (USER_JAX, USER_JAX), "the user's JAX was replaced"
    assert "grain" in after and "array-record" in after
    assert "environment check: ok" in proc.stdout
