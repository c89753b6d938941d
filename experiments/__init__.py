"""experiments: measure the training input path (Grain loader, device feed, training step) and
write tidy rows under ``results/``.

The names a notebook needs, without reaching into submodules::

    import experiments as ex
    row = ex.run_config(ex.TRAIN_PRESETS["smoke"]())            # one configuration → a one-row DataFrame
    rows = ex.run_sweep(ex.SWEEP_PRESETS["smoke"](), ex.run_dir("sweep"))
    summary = ex.summarize(ex.load("results/sweep/*"))           # one row per configuration
    table = ex.run_scaling(ex.SCALING_PRESETS["smoke"](), ex.run_dir("scaling"))

The names resolve on first use (module ``__getattr__``): Grain's worker processes are spawned and
import this package to unpickle the loader's pipeline, so ``import experiments`` itself must not
import JAX, pandas or Grain (each worker would pay seconds for it).
"""

from __future__ import annotations

import importlib

from experiments import heap

heap.apply()  # MEMSIM_MALLOC, before this process allocates what it measures (see experiments.heap)

# public name → (submodule, attribute)
_EXPORTS = {
    # one configuration
    "TrainConfig": ("experiments.train", "TrainConfig"),
    "TRAIN_PRESETS": ("experiments.train", "PRESETS"),
    "run_config": ("experiments.train", "run"),
    "run_config_detailed": ("experiments.train", "run_detailed"),
    "RunResult": ("experiments.train", "RunResult"),
    "NonFiniteLoss": ("experiments.train", "NonFiniteLoss"),
    # several data-parallel processes
    "launch": ("experiments.distributed", "launch"),
    "MultiResult": ("experiments.distributed", "MultiResult"),
    "DistributedError": ("experiments.distributed", "DistributedError"),
    # a sweep
    "SweepConfig": ("experiments.sweep", "SweepConfig"),
    "SWEEP_PRESETS": ("experiments.sweep", "PRESETS"),
    "run_sweep": ("experiments.sweep", "run"),
    # a scaling run
    "ScalingConfig": ("experiments.scaling", "ScalingConfig"),
    "SCALING_PRESETS": ("experiments.scaling", "PRESETS"),
    "run_scaling": ("experiments.scaling", "run"),
    # the rules of thumb
    "RulesConfig": ("experiments.rules", "RulesConfig"),
    "RULES_PRESETS": ("experiments.rules", "PRESETS"),
    "run_rules": ("experiments.rules", "run"),
    # results
    "run_dir": ("experiments.results", "run_dir"),
    "load": ("experiments.results", "load"),
    "summarize": ("experiments.results", "summarize"),
    "current": ("experiments.results", "current"),
    "ResultsError": ("experiments.results", "ResultsError"),
    # bad input
    "ConfigError": ("memsim.knobs", "ConfigError"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'experiments' has no attribute {name!r}")
    module, attr = _EXPORTS[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
