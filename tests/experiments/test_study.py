import json
import subprocess
import sys

from experiments.results import load, summarize

from tests.experiments.test_sweep import REPO


def test_study_writes_report_with_table_and_figures(tmp_path, data_cache):
    p = subprocess.run([sys.executable, "-m", "experiments", "study", "--preset", "smoke", f"--results_root={tmp_path}",
                        f"--cache_dir={data_cache}", "--run_id=s"], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    d = tmp_path / "study" / "s"
    report = (d / "report.md").read_text()
    for heading in ("## Machine and environment", "## Measured sweep", "### Best configuration",
                    "### Which knob moved throughput most", "## Hierarchy", "## Memory", "## Simulation", "## Predicted vs measured",
                    "## What if", "## Scaling", "## Rules of thumb"):
        assert heading in report
    assert "This section failed" not in report
    rows = load(d / "rows.csv")
    assert len(rows) == 4 and sorted(rows.repeat.unique()) == [0, 1]  # 2 configurations × 2 repeats
    summ = summarize(rows)
    best = summ.loc[summ.samples_per_s.idxmax()]
    assert (f"**{best.samples_per_s:.0f} [{best.samples_per_s_lo:.0f}, {best.samples_per_s_hi:.0f}] samples/s**"
            in report)
    assert f"median CV over configurations of samples/s **{summ.samples_per_s_cv.median():.1%}**" in report
    assert "### Device-resident bound check" in report
    for png in ("samples_vs_num_workers.png", "samples_vs_prefetch.png", "hierarchy_pyramid.png", "memory_footprint.png"):
        assert (d / png).stat().st_size > 5000 and f"]({png})" in report
    assert (d / "config.json").exists() and (d / "probe" / "rows.csv").exists() and (d / "memory.csv").exists()
    meta = json.loads((d / "study.json").read_text())  # what the report needs beyond the rows
    assert meta["preset"] == "smoke" and meta["errors"] == {} and meta["environment"]["platform"]
    assert list(meta["stage_s"]) == ["sweep", "probes", "components", "worker_probe", "scaling", "rules", "memory"]
    # the worker probe: one worker at the smoke sweep's one batch and image size, once
    wp = load(d / "worker_probe")
    assert len(wp) == 1 and (wp.status == "ok").all() and (wp.num_workers == 1).all() and (wp.width == 16).all()
    stamps = wp.read_cpu_s_per_sample + wp.decode_cpu_s_per_sample + wp.augment_cpu_s_per_sample
    assert (wp.worker_cpu_s_per_sample > stamps).all() and (stamps > 0).all()
    # the smoke sweep has no run with workers: the fit has no worker part, and the report does not claim the probe
    assert "## Predicted vs measured" in report and "The worker probe (`worker_probe/`" not in report
    assert meta["stage_s"]["sweep"] > 0
    probe = load(d / "step_probe")  # the step probe of the smoke sweep's one step shape, in three rounds
    assert len(probe) == 3 and (probe.status == "ok").all() and not (d / "loader_probe").exists()
    assert probe.config_id.nunique() == 1 and probe.compile_reused.astype(bool).tolist() == [False, True, True]
    stage = load(d / "stage_probe")  # the stage probe in two rounds, each combination once a round
    assert (stage.status == "ok").all() and stage.groupby("config_id").repeat.agg(lambda r: sorted(r) == [0, 1]).all()
    assert "Preset `smoke`; 2 configurations × 2 repeats; measured sweep wall time" in report
    # the report is rebuilt from the folder alone, as the study wrote it
    (d / "report.md").unlink()
    p = subprocess.run([sys.executable, "-m", "analysis", "report", str(d)], cwd=REPO, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (d / "report.md").read_text() == report
    assert len(load(d / "scaling")) == 4 and "No fit" in report  # smoke: 4 points for 5 parameters
    # resumed, the study measures nothing again and reports the seconds of both runs, not a 0 s sweep
    p = subprocess.run([sys.executable, "-m", "experiments", "study", "--preset", "smoke", f"--results_root={tmp_path}",
                        f"--cache_dir={data_cache}", "--run_id=s"], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    again = json.loads((d / "study.json").read_text())
    assert len(load(d / "rows.csv")) == 4
    assert again["stage_s"]["sweep"] >= meta["stage_s"]["sweep"] and again["stage_s"]["probes"] >= meta["stage_s"]["probes"]
