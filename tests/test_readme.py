"""The README's notebook example runs as written, from the repository root, with the public names."""

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- notebook-example -->"


def notebook_example() -> str:
    text = (ROOT / "README.md").read_text()
    assert MARK in text, f"README.md has no {MARK} marker before the notebook example"
    block = re.search(r"```python\n(.*?)```", text[text.index(MARK):], re.S)
    assert block, f"no python block after {MARK} in README.md"
    return block.group(1)


def test_example_uses_only_the_packages_public_names():
    import analysis
    import experiments
    import memsim
    code = notebook_example()
    used = {(pkg, name) for pkg, name in re.findall(r"\b(experiments|memsim|analysis)\.(\w+)", code)}
    assert {p for p, _ in used} == {"experiments", "memsim", "analysis"}, used
    for pkg, name in used:
        assert name in {"experiments": experiments, "memsim": memsim, "analysis": analysis}[pkg].__all__, (pkg, name)


def test_notebook_example_runs(tmp_path, monkeypatch):
    from analysis.scaling import report as scaling_report
    monkeypatch.chdir(ROOT)  # the example reads committed results by relative path
    monkeypatch.setattr(scaling_report, "BOOTSTRAP", 0)  # the report's scaling intervals: minutes, not tested here
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    scope: dict = {}
    exec(compile(notebook_example(), "README.md:notebook-example", "exec"), scope)  # noqa: S102
    row, summary, sim, fit = scope["row"], scope["summary"], scope["sim"], scope["fit"]
    assert len(row) == 1 and float(row.samples_per_s.iloc[0]) > 0
    assert len(summary) == summary.config_id.nunique() and "samples_per_s_lo" in summary
    assert len(sim) == 8 and (sim.samples_per_s > 0).all()
    assert 0 < fit.values["alpha"] < 2
    report = Path(scope["report_md"])
    assert report.is_relative_to(tmp_path) and "## Scaling" in report.read_text()
    assert os.path.exists(ROOT / "results/cpu-2core/study/report.md")  # the committed one untouched
