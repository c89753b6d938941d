"""analysis: fits, comparisons, figures and reports, from the rows experiments wrote.

The names a notebook needs, re-exported (each is documented in its module)::

    from analysis import StudyResults, build_report, fit_chinchilla, compute_optimal
    study = StudyResults.load("results/cpu-2core/study")   # rows, runs, probes, scaling, memory
    knob_effects(study.rows[study.rows.status == "ok"])    # which knob moved samples/s most
    build_report("results/cpu-2core/study")                # report.md + figures, no measuring

Modules: ``report`` (StudyResults, build_report), one per report topic (``measured``,
``hierarchy``, ``memory``, ``simulation``, ``rules``, the ``scaling`` subpackage), ``tables`` (the Markdown
table writer) and ``figures`` (saving the matplotlib Figures the figure functions return).
"""

from __future__ import annotations

import importlib

#: the re-exported names and the module each comes from (name there, when it differs). They are
#: imported on first use (PEP 562), not with the package: ``python -m analysis`` installs its Ctrl-C
#: handler before anything imports JAX (``analysis.interrupt`` says why), and ``import analysis``
#: stays cheap for a script that needs one module.
_EXPORTS = {
    "StudyResults": "analysis.report",
    "build_report": "analysis.report",
    "fit_chinchilla": "analysis.scaling",
    "fit_power_law": "analysis.scaling",
    "compute_optimal": "analysis.scaling",
    "ScalingFit": "analysis.scaling",
    "ComputeOptimal": "analysis.scaling",
    "FitInputError": "analysis.scaling",
    "knob_effects": "analysis.measured",
    "within_noise_of_best": "analysis.measured",
    "md_table": "analysis.tables",
    "RulesData": "analysis.rules",
    "rule_verdicts": ("analysis.rules", "verdicts"),
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'analysis' has no attribute {name!r}")
    module, attr = where if isinstance(where, tuple) else (where, name)
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
