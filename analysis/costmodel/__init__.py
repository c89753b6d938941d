"""The calibrated cost model: memsim's pipeline fitted to measured rows, predicting what was not measured.

- :func:`fit` (rows [+ probes, steps, step probe]) → :class:`CostModel` (``save`` / :func:`load`);
- :func:`predict` (model, configurations) → samples/s through the vmapped simulator, stall
  fraction, input-bound grade, bottleneck, extrapolation flags;
- :func:`compare`, :func:`summary`, :func:`cross_validate`, :func:`whatif`;
- :func:`recommend`: the cheapest loader configuration within 5% of the best predicted one.

Command line: ``python -m analysis costmodel fit|predict|compare|cv|recommend`` and ``python -m analysis whatif``.
"""

from analysis.costmodel.evaluate import compare, cross_validate, summary, whatif, worst
from analysis.costmodel.features import CostModelError
from analysis.costmodel.model import (CostModel, components, fit, input_bound_grade, load, measured_configs, predict,
                                      transfer_from_probes)
from analysis.costmodel.recommend import recommend

__all__ = ["CostModel", "CostModelError", "fit", "load", "predict", "components", "input_bound_grade",
           "measured_configs", "transfer_from_probes",
           "compare", "summary", "cross_validate", "whatif", "worst", "recommend"]
