import doctest

import analysis.report


def test_report_docstring_examples_run():
    result = doctest.testmod(analysis.report)
    assert result.attempted > 0 and result.failed == 0
