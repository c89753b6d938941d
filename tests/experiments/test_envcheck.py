"""python -m experiments env: versions against the tested ranges, what is missing, the exit code."""

import tomllib
from pathlib import Path

import pytest

from experiments import compat, envcheck
from experiments.__main__ import main

pytestmark = pytest.mark.latest
PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())


def test_this_environment_passes_and_reports_devices_and_versions(capsys):
    import jax
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    dev = jax.devices()[0]
    for needle in ("platform", dev.platform, "device_kind", "device_count", "memory_kinds", "jax", "jaxlib",
                   "flax", "optax", "grain", "array-record", "numpy", "pandas", "environment check: ok"):
        assert needle in out, needle
    df = envcheck.run(envcheck.EnvConfig()).set_index("item")
    assert df.loc["jax", "value"] == jax.__version__
    assert df.loc["device_count", "value"] == str(len(jax.devices()))
    # the CPU, as the rows record it
    from experiments.env import cpu_identity
    assert df.loc["cpu_model", "value"] == cpu_identity()["cpu_model"] != ""
    assert df.loc["memory_kinds", "value"] == ",".join(compat.memory_kinds(dev))
    assert (df["status"] == "ok").all(), df[df.status != "ok"]


def test_requirements_are_pyprojects():
    names = lambda reqs: sorted(envcheck.parse_requirement(r)[0].replace("_", "-") for r in reqs)
    assert names(envcheck.requirements()) == names(PYPROJECT["project"]["dependencies"])
    assert PYPROJECT["project"]["requires-python"] == envcheck.PYTHON_RANGE


def test_a_missing_package_fails_and_says_how_to_install_it(monkeypatch, capsys):
    real = compat.version_of
    monkeypatch.setattr(compat, "version_of", lambda d: None if d in ("grain", "array-record") else real(d))
    assert main(["env"]) == 1
    out = capsys.readouterr().out
    assert "missing: grain, array-record" in out
    assert "pip install 'grain>=0.2.18,<0.3' 'array-record>=0.8.6,<0.9'" in out
    assert "FAILED (grain: missing, array-record: missing)" in out


def test_a_version_outside_the_range_is_reported_but_passes(monkeypatch, capsys):
    real = compat.version_of
    monkeypatch.setattr(compat, "version_of", lambda d: "0.13.1" if d == "jax" else real(d))
    assert main(["env"]) == 0
    df = envcheck.run(envcheck.EnvConfig()).set_index("item")
    assert df.loc["jax", "status"] == "untested version" and df.loc["jax", "value"] == "0.13.1"


def test_require_accelerator_fails_on_a_cpu_only_machine(capsys):
    import jax
    rc = main(["env", "--require_accelerator=true"])
    if jax.default_backend() == "cpu":
        assert rc == 1 and "platform: no accelerator" in capsys.readouterr().out
    else:
        assert rc == 0


@pytest.mark.parametrize("version, clauses, ok", [
    ("0.10.2", ((">=", "0.10.2"), ("<", "0.13")), True),
    ("0.12.0.1", ((">=", "0.10.2"), ("<", "0.13")), True),
    ("0.10.1", ((">=", "0.10.2"),), False),
    ("0.13", (("<", "0.13"),), False),
    ("2.5.5", ((">=", "2.4.6"), ("<", "2.6")), True),
    ("3.12.1", ((">=", "3.11"), ("<", "3.14")), True),
])
def test_in_range_compares_release_numbers(version, clauses, ok):
    assert envcheck.in_range(version, clauses) is ok


@pytest.mark.parametrize("req, needle", [("jax~=0.10", "'jax~=0.10'"), ("jax>=", "'>='"), ("", "''")])
def test_bad_requirements_name_the_value(req, needle):
    with pytest.raises(ValueError) as e:
        envcheck.parse_requirement(req)
    assert needle in str(e.value)


def test_env_help_and_bad_knob(capsys):
    assert main(["env", "--help"]) == 0
    assert "--require_accelerator=False" in capsys.readouterr().out
    assert main(["env", "--require_acelerator=true"]) == 2
    assert "require_acelerator" in capsys.readouterr().err


@pytest.mark.parametrize("given, expected", [(None, "false"), ("true", "true")])
def test_the_command_line_lets_each_run_allocate_device_memory_on_demand(given, expected):
    # every measured run is a JAX process of its own beside the sweep's; with XLA's default
    # preallocation (75% of a GPU at backend start) the second process on one GPU cannot allocate
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"}
    if given is not None:
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = given
    code = "import os, experiments.__main__; print(os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'])"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0 and r.stdout.strip() == expected, r.stderr


def test_free_page_reporting_reads_the_balloons_feature_bit(tmp_path):
    """A fake /sys/bus/virtio/devices: a block device (bit 5 set, not a balloon) and a balloon, whose
    feature string says bit 5 (VIRTIO_BALLOON_F_REPORTING) is on or off."""
    from experiments.env import free_page_reporting

    def tree(name, balloon_bits):
        root = tmp_path / name
        for dev, driver, bits in (("virtio0", "virtio_blk", "0000010000"), ("virtio1", "virtio_balloon", balloon_bits)):
            (tmp_path / name / "drivers" / driver).mkdir(parents=True, exist_ok=True)
            (root / dev).mkdir(parents=True)
            (root / dev / "driver").symlink_to(tmp_path / name / "drivers" / driver)
            (root / dev / "features").write_text(bits + "\n")
        return str(root)
    assert free_page_reporting.__wrapped__(tree("on", "0110010100")) == "yes"
    assert free_page_reporting.__wrapped__(tree("off", "0110000100")) == "no"
    none = tmp_path / "none"
    none.mkdir()
    assert free_page_reporting.__wrapped__(str(none)) == "no"  # virtio, but no balloon
    assert free_page_reporting.__wrapped__(str(tmp_path / "absent")) == ""  # not Linux, or no virtio
