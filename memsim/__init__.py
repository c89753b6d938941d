"""memsim: pure JAX models of a training input pipeline and the memory it moves through.

What a notebook needs, importable from ``memsim`` directly (the submodules hold the rest):

- simulate the pipeline: :class:`PipelineConfig`, :func:`sweep` (a grid → one row per
  configuration), :class:`SimOptions`, :func:`grid_frame` + :func:`simulate_frame` +
  :func:`summarize` (the same in steps), :func:`simulate_trace`, :func:`analytic_bounds`,
  :func:`many_hosts`, :func:`straggler_hosts` (hosts that differ); :func:`config_mesh` (the devices
  a sweep is spread over, as a ``jax.sharding.Mesh``); service-time shapes :class:`Dist` (:mod:`memsim.pipeline`,
  :mod:`memsim.distributions`, :mod:`memsim.multihost`);
- the memory hierarchy: :class:`Hierarchy`, :class:`Tier`, :class:`Link`, :func:`hockney_time`
  (:mod:`memsim.hierarchy`); machine presets :func:`workstation_2020`, :func:`h100_sxm`,
  :func:`h200`, :data:`PRESETS` (:mod:`memsim.machines`); :func:`format_bytes`,
  :func:`format_rate` (:mod:`memsim.units`); where a dataset should live: :func:`plan_placement`,
  :func:`compare_placements` (:mod:`memsim.placement`);
- memory footprints: :class:`FootprintConfig`, :func:`totals`, :func:`tree_bytes`,
  :func:`peak_comparison`, and the table itself as ``memsim.footprint.footprint`` (the package
  name ``memsim.footprint`` stays the submodule, so ``from memsim import footprint`` keeps
  giving the module) (:mod:`memsim.footprint`);
- a dataset cache: :class:`CacheConfig`, :func:`simulate_cache`, :func:`cache_sweep`,
  :func:`steady_hit_rate`, :func:`closed_form_hit_rate`, :func:`lru_shuffle_hit_rate`
  (:mod:`memsim.cache`, :mod:`memsim.placement`);
- the knobs shared with measurement and analysis: :data:`FEEDS`, :data:`PRECISIONS`,
  :data:`KNOBS`, :class:`ConfigError` (:mod:`memsim.knobs`).

Importing ``memsim`` (or ``memsim.knobs``) does not start JAX: the names above that need it, and
the submodules (``memsim.footprint``, ``memsim.cache``, ...), are loaded on first use (a module
``__getattr__``, PEP 562), so ``import memsim.knobs`` stays plain Python for callers that must
configure XLA first.

>>> import memsim
>>> memsim.FEEDS[0], memsim.PipelineConfig is memsim.pipeline.PipelineConfig
('none', True)
>>> memsim.format_bytes(memsim.h100_sxm().tier("hbm").capacity_bytes)
'80 GB'
>>> rows = memsim.sweep({"num_workers": [1, 8], "transform_s": 1e-3, "compute_s": 0.01}, n_items=200)
>>> rows["bottleneck"].tolist(), round(float(rows["samples_per_s"][0]), -1)
(['transform', 'compute'], 1000.0)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from memsim.knobs import FEEDS, KNOBS, MODELS, PRECISIONS, SOURCES, ConfigError

# public name -> submodule that defines it; loaded on first access
_LAZY = {
    "pipeline": ("PipelineConfig", "SimOptions", "sweep", "grid_frame", "simulate_frame", "summarize",
                 "simulate_trace", "simulate_traces", "analytic_bounds"),
    "multihost": ("many_hosts", "straggler_hosts"),
    "maxplus": ("config_mesh",),
    "distributions": ("Dist",),
    "hierarchy": ("Hierarchy", "Tier", "Link", "HierarchyError", "hockney_time"),
    "machines": ("PRESETS", "workstation_2020", "h100_sxm", "h200", "pcie_bandwidth_Bps"),
    "units": ("format_bytes", "format_rate"),
    "placement": ("plan_placement", "compare_placements", "lru_shuffle_hit_rate", "PlacementError"),
    "footprint": ("FootprintConfig", "totals", "tree_bytes", "peak_comparison", "FootprintError"),
    "cache": ("CacheConfig", "simulate_cache", "cache_sweep", "steady_hit_rate", "closed_form_hit_rate"),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}
_SUBMODULES = ("cache", "distributions", "footprint", "hierarchy", "knobs", "machines", "maxplus", "multihost",
               "pipeline", "pipeline_reference", "placement", "units")

__all__ = ["FEEDS", "KNOBS", "MODELS", "PRECISIONS", "SOURCES", "ConfigError",
           *(name for names in _LAZY.values() for name in names)]


def __getattr__(name: str):
    if name in _SUBMODULES:  # importing sets the package attribute
        return importlib.import_module(f"memsim.{name}")
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'memsim' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"memsim.{module}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))


if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily
    from memsim.cache import CacheConfig, cache_sweep, closed_form_hit_rate, simulate_cache, steady_hit_rate
    from memsim.distributions import Dist
    from memsim.footprint import FootprintConfig, FootprintError, peak_comparison, totals, tree_bytes
    from memsim.hierarchy import Hierarchy, HierarchyError, Link, Tier, hockney_time
    from memsim.maxplus import config_mesh
    from memsim.machines import PRESETS, h100_sxm, h200, pcie_bandwidth_Bps, workstation_2020
    from memsim.multihost import many_hosts, straggler_hosts
    from memsim.pipeline import (PipelineConfig, SimOptions, analytic_bounds, grid_frame, simulate_frame,
                                 simulate_trace, simulate_traces, summarize, sweep)
    from memsim.placement import PlacementError, compare_placements, lru_shuffle_hit_rate, plan_placement
    from memsim.units import format_bytes, format_rate
