"""Scaling laws: fits, the compute-optimal allocation, their figures and the report's section.

Modules: ``fit`` (Kaplan power law and Chinchilla L(N, D) fits, bootstrap, compute-optimal
allocation), ``search`` (the shared objective and its multi-start L-BFGS search, with
``multistart`` and ``batched_lbfgs``), ``fit_input`` (input checks), ``plots`` (figures),
``report`` (the "## Scaling" section of a study report) and ``cli`` (``python -m analysis
scaling ROWS.csv``). The names a notebook needs are re-exported here.

>>> from analysis.scaling import fit_chinchilla, compute_optimal
>>> callable(fit_chinchilla) and callable(compute_optimal)
True
"""

from analysis.scaling.fit import (
    ComputeOptimal,
    ScalingFit,
    bootstrap,
    chinchilla_from_values,
    compute_optimal,
    fit_chinchilla,
    fit_power_law,
    resample_counts,
)
from analysis.scaling.fit_input import FitInputError
from analysis.scaling.report import rows_table, scaling_section, section

__all__ = [
    "ScalingFit",
    "ComputeOptimal",
    "fit_power_law",
    "fit_chinchilla",
    "bootstrap",
    "compute_optimal",
    "chinchilla_from_values",
    "resample_counts",
    "FitInputError",
    "scaling_section",
    "rows_table",
    "section",
]
