"""The public API of ``experiments``: every name in ``__all__`` resolves, and importing the package
stays cheap (Grain's spawned loader workers import it)."""

import subprocess
import sys

import pytest

import experiments
from experiments import results, scaling, sweep, train
from memsim.knobs import ConfigError

from tests.experiments.test_sweep import REPO


@pytest.mark.parametrize("name", experiments.__all__)
def test_every_public_name_resolves(name):
    assert getattr(experiments, name) is not None
    assert name in dir(experiments)


def test_public_names_are_the_objects_of_their_modules():
    assert experiments.TrainConfig is train.TrainConfig and experiments.run_config is train.run
    assert experiments.SweepConfig is sweep.SweepConfig and experiments.run_sweep is sweep.run
    assert experiments.SWEEP_PRESETS is sweep.PRESETS and experiments.TRAIN_PRESETS is train.PRESETS
    assert experiments.ScalingConfig is scaling.ScalingConfig and experiments.run_scaling is scaling.run
    assert experiments.load is results.load and experiments.summarize is results.summarize
    assert experiments.ConfigError is ConfigError


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        experiments.nope  # noqa: B018


def test_import_experiments_imports_no_heavy_library():
    code = ("import sys, experiments; "
            "print(sorted(m for m in ('jax', 'pandas', 'grain', 'flax', 'optax') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
