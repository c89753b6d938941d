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

from analysis.measured import knob_effects, within_noise_of_best
from analysis.report import StudyResults, build_report
from analysis.rules import RulesData, verdicts as rule_verdicts
from analysis.scaling import ComputeOptimal, FitInputError, ScalingFit, compute_optimal, fit_chinchilla, fit_power_law
from analysis.tables import md_table

__all__ = [
    "StudyResults",
    "build_report",
    "fit_chinchilla",
    "fit_power_law",
    "compute_optimal",
    "ScalingFit",
    "ComputeOptimal",
    "FitInputError",
    "knob_effects",
    "within_noise_of_best",
    "md_table",
    "RulesData",
    "rule_verdicts",
]
