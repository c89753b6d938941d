"""The package's public names: what ``import memsim`` offers, and what it does not start."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

import memsim


def test_importing_the_knobs_or_the_package_does_not_start_jax():
    # benchmarks/feed.py imports memsim.knobs before it pins XLA's threads: JAX must not load yet
    code = ("import memsim.knobs, sys; assert 'jax' not in sys.modules, 'knobs'; "
            "import memsim; assert 'jax' not in sys.modules, 'package'; "
            "memsim.FEEDS, memsim.ConfigError; assert 'jax' not in sys.modules, 'knob names'; "
            "memsim.PipelineConfig; assert 'jax' in sys.modules, 'lazy names load their module'")
    subprocess.run([sys.executable, "-c", code], check=True)


HOMES = ("knobs", "pipeline", "multihost", "maxplus", "distributions", "hierarchy", "machines", "units", "placement",
         "footprint", "cache")


@pytest.mark.parametrize("name", memsim.__all__)
def test_every_public_name_is_the_object_its_submodule_defines(name):
    assert not name.startswith("_")
    value = getattr(memsim, name)
    homes = [m for m in HOMES if getattr(importlib.import_module(f"memsim.{m}"), name, None) is value]
    assert homes, f"memsim.{name} is not the object of any submodule"
    if isinstance(value, type) or callable(value):  # defined there, not merely imported there
        assert value.__module__ in {f"memsim.{m}" for m in homes}, (value.__module__, homes)
    assert name in dir(memsim)


def test_a_notebook_can_simulate_and_plan_from_the_package_alone():
    assert {"PipelineConfig", "sweep", "simulate_frame", "summarize", "SimOptions", "Dist", "Hierarchy",
            "workstation_2020", "h100_sxm", "h200", "FootprintConfig", "CacheConfig", "simulate_cache",
            "FEEDS", "KNOBS", "ConfigError"} <= set(memsim.__all__)
    rows = memsim.sweep({"num_workers": [1, 2]}, memsim.PipelineConfig(transform_dist=memsim.Dist("exponential")),
                        n_items=100)
    assert list(rows["num_workers"]) == [1, 2] and (rows["samples_per_s"] > 0).all()
    assert memsim.KNOBS is importlib.import_module("memsim.knobs").KNOBS  # not memsim.pipeline.KNOBS


def test_submodules_stay_submodules_and_unknown_names_fail():
    from memsim import footprint  # a module name and a function name: the module wins

    assert isinstance(footprint, types.ModuleType) and callable(footprint.footprint)
    assert isinstance(memsim.cache, types.ModuleType)
    with pytest.raises(AttributeError, match="no attribute 'grid_frames'"):
        memsim.grid_frames  # noqa: B018
