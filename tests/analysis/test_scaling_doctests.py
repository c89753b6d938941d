"""The examples in the scaling modules' docstrings run and give what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "analysis.scaling.batched_lbfgs",
    "analysis.scaling.multistart",
    "analysis.scaling.search",
    "analysis.scaling.fit_input",
    "analysis.scaling.fit",
    "analysis.scaling.report",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
