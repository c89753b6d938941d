"""The component probes: the step alone and the loader alone, per shape (experiments.components)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from experiments import components, results, sweep
from experiments.configs import ConfigError


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("components")
    cfg = dataclasses.replace(components.smoke(), cache_dir=str(out / "cache"))
    return cfg, out, components.run(cfg, out, progress=False)


def test_smoke_run_measures_every_shape(smoke_run):
    cfg, out, res = smoke_run
    step, loader = res["step"], res["loader"]
    assert len(step) == len(cfg.step_configs()) == 4 and len(loader) == len(cfg.loader_configs()) == 4
    assert (step.status == "ok").all() and (loader.status == "ok").all(), (step.error.tolist(), loader.error.tolist())
    assert (step.device_resident_samples_per_s > 0).all() and (loader.loader_s_per_sample > 0).all()
    # the rows are where calibration reads them, with the knobs it reads
    assert (out / "step_probe" / "rows.csv").is_file() and (out / "loader_probe" / "rows.csv").is_file()
    assert set(step.grad_accum_steps) == {1, 2} and set(loader.source) == {"ram", "arrayrecord"}
    assert np.allclose(loader.loader_s_per_sample * loader.batch_size, loader.loader_s_per_batch)


def test_the_stage_probe_stamps_every_stage_of_every_combination(smoke_run):
    """The stages alone, per (source, image size, augmentation cost): CPU per sample of each stamped
    stage, ArrayRecord's decode only where there is one, and augmentation passes that cost."""
    cfg, out, res = smoke_run
    st = res["stage"]
    assert (out / "stage_probe" / "rows.csv").is_file() and (st.status == "ok").all(), st.error.tolist()
    # every combination once per round, each round complete before the next (a slow spell lands on
    # one round of several combinations, not on every round of one)
    assert cfg.stage_repeats == 3 and len(st) == 3 * len(cfg.stage_configs()) == 12
    assert st.repeat.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert all(sorted(zip(g.source, g.augment_cost)) == [("arrayrecord", 0), ("arrayrecord", 1), ("ram", 0), ("ram", 1)]
               for _, g in st.groupby("repeat"))
    assert st.groupby("config_id").repeat.nunique().eq(3).all()
    assert (st.read_cpu_s_per_sample > 0).all() and (st.augment_cpu_s_per_sample > 0).all()
    assert (st[st.source == "ram"].decode_cpu_s_per_sample == 0).all()
    assert (st[st.source == "arrayrecord"].decode_cpu_s_per_sample > 0).all()
    by = st.groupby(["source", "augment_cost"]).augment_cpu_s_per_sample.median()
    assert by["ram", 1] > by["ram", 0] and by["arrayrecord", 1] > by["arrayrecord", 0]
    # the stamps are the stages' own CPU: together no more than the thread's time per sample
    stamped = st.read_cpu_s_per_sample + st.decode_cpu_s_per_sample + st.augment_cpu_s_per_sample
    assert (stamped <= st.stage_s_per_sample * 1.05).all() and (st.samples_measured >= cfg.stage_batch_size).all()


def test_the_step_probe_compiles_the_shape_it_names(smoke_run):
    """XLA's FLOP count of each probed step follows the shape its row names: twice the batch,
    twice the FLOPs (XLA counts an accumulation loop's body once, so accum-1 rows only)."""
    from analysis.costmodel.features import step_arithmetic
    _, _, res = smoke_run
    s = res["step"][res["step"].grad_accum_steps == 1].sort_values("batch_size")
    assert list(s.batch_size) == [8, 16]
    per_sample, _ = step_arithmetic("mlp", 8, 3, 16, 1)
    ratio = s.xla_flops_per_step.to_numpy() / (per_sample * s.batch_size.to_numpy())
    assert np.all(np.abs(ratio - 1) < 0.5), ratio  # the optimizer's per-parameter FLOPs add a fixed part
    assert s.xla_flops_per_step.iloc[1] > 1.5 * s.xla_flops_per_step.iloc[0]
    # XLA's bytes accessed: the weights' part does not grow with the batch, the activations' does
    b = s.xla_bytes_accessed_per_step.to_numpy()
    assert 0 < b[0] < b[1] < 2 * b[0], b.tolist()
    # the host cores each step kept busy: some, and no more than the host has
    import os
    nu = res["step"].resident_cpu_cores
    assert ((nu > 0) & (nu <= 1.05 * os.cpu_count())).all(), nu.tolist()
    # each shape measured from a released heap (on glibc), its page faults per step counted
    import platform
    assert res["step"].heap_released.astype(bool).all() == (platform.libc_ver()[0] == "glibc")
    assert (res["step"].resident_minor_faults_per_step >= 0).all()
    # in the step probe's own process, dispatched synchronously, XLA's temporaries sized
    assert not res["step"].async_dispatch.astype(bool).any()
    assert (res["step"].heap_blocks_held >= 0).all()
    assert (res["step"].xla_temp_bytes > 0).all()


def test_later_rounds_of_the_step_probe_step_the_first_rounds_compile(tmp_path):
    cfg = dataclasses.replace(components.smoke(), repeats=2, step_measure_s=0.01, stage=False, loader=False,
                              cache_dir=str(tmp_path / "cache"))
    step = components.run(cfg, tmp_path, progress=False)["step"]
    assert len(step) == 2 * len(cfg.step_configs()) == 8 and (step.status == "ok").all(), step.error.tolist()
    for _, g in step.groupby("config_id"):
        g = g.sort_values("repeat")
        # compiled in round 0 (its compile time on both rows), stepped again in round 1
        assert g.compile_reused.astype(bool).tolist() == [False, True] and g.compile_s.nunique() == 1
        assert (g.device_resident_samples_per_s > 0).all()
    assert (step.min_measure_s == 0.01).all()


def test_a_resumed_run_skips_what_it_has(smoke_run):
    cfg, out, _ = smoke_run
    before = {k: len(results.read_csv_rows(out / f"{k}_probe" / "rows.csv")) for k in ("step", "stage", "loader")}
    res = components.run(cfg, out, progress=False)
    assert {k: len(res[k]) for k in before} == before


def test_a_failing_shape_is_a_failed_row_and_the_rest_go_on(tmp_path, monkeypatch):
    real = components.measure_loader

    def flaky(tc):
        if tc.source == "arrayrecord":
            raise RuntimeError("disk went away")
        return real(tc)
    monkeypatch.setattr(components, "measure_loader", flaky)
    cfg = dataclasses.replace(components.smoke(), model=(), stage=False, cache_dir=str(tmp_path / "cache"))
    res = components.run(cfg, tmp_path, progress=False)
    lo = res["loader"]
    assert res["failed"] == 2 and len(res["step"]) == 0
    assert set(lo[lo.status == "failed"].source) == {"arrayrecord"}
    assert lo[lo.status == "failed"].error.str.contains("disk went away").all()
    assert (lo[lo.status == "ok"].source == "ram").all() and (lo.status == "ok").sum() == 2


def test_bad_shapes_are_refused_before_any_work():
    with pytest.raises(ConfigError, match=r"step_shapes=\(6, 8\): batch_size 6 is not divisible by grad_accum_steps 4"):
        components.ComponentConfig(grad_accum_steps=(4,), step_shapes=((6, 8),))
    with pytest.raises(ConfigError, match="step_shapes"):
        components.ComponentConfig(step_shapes=((0, 8),))


def test_step_shapes_parse_from_the_command_line():
    from experiments.configs import apply_overrides
    assert apply_overrides(components.quick(), {"step_shapes": "64x32, 128x16"}).step_shapes == ((64, 32), (128, 16))
    # a flat list is not a list of pairs: the error says how to write one
    with pytest.raises(ConfigError, match=r"step_shapes=\(\(64,\), \(32,\)\).*64x32"):
        apply_overrides(components.quick(), {"step_shapes": "64,32"})
    with pytest.raises(ConfigError, match="step_shapes"):
        apply_overrides(components.quick(), {"step_shapes": "64xa"})


def test_the_study_probes_the_levels_its_sweep_samples(tmp_path):
    assert components.for_sweep(sweep.quick(), loader=False).loader_configs() == []
    assert components.for_sweep(sweep.quick(), stage=False).stage_configs() == []
    q = sweep.quick()
    c = components.for_sweep(q)
    assert set(c.model) == set(q.sample_model) and set(c.precision) == set(q.sample_precision)
    assert set(c.source) == set(q.sample_source) and set(c.augment_cost) == set(q.sample_augment_cost)
    # each cell at the four corners of the (batch, image) levels and the middle; the loader at a balanced sample
    assert c.step_shapes == ((32, 16), (32, 48), (64, 32), (128, 16), (128, 48))
    assert len(c.step_configs()) == 2 * 2 * 2 * 5
    # each shape in three rounds of a window a third of the stage probe's
    assert c.repeats == 3 and c.step_measure_s == pytest.approx(c.min_measure_s / 3)
    # the stage probe in two rounds (the standalone command's default: three)
    assert c.stage_repeats == 2 and components.ComponentConfig().stage_repeats == 3
    assert {t.min_measure_s for t in c.step_configs()} == {c.step_measure_s}
    assert {t.min_measure_s for t in c.stage_configs()} == {c.min_measure_s}
    lo = [(t.source, t.image_size, t.augment_cost) for t in c.loader_configs()]
    assert len(lo) == 9 == len(set(lo))
    for i, levels in enumerate((q.sample_source, q.sample_image_size, q.sample_augment_cost)):
        assert sorted(x[i] for x in lo) == sorted(list(levels) * 3)
    assert (c.width, c.cnn_width, c.num_samples) == (q.width, q.cnn_width, q.num_samples)
    # the stages alone at every source × image size × augmentation cost
    st = {(t.source, t.image_size, t.augment_cost) for t in c.stage_configs()}
    assert len(c.stage_configs()) == len(st) == len(q.sample_source) * len(c.image_size) * len(q.sample_augment_cost) == 27


def test_the_command_line_runs_the_preset_and_exits_zero(tmp_path, capsys):
    from experiments.__main__ import main
    rc = main(["components", "--preset", "smoke", f"--results_root={tmp_path}", f"--cache_dir={tmp_path / 'cache'}",
               "--grad_accum_steps=1", "--augment_cost=0"])
    out = capsys.readouterr()
    assert rc == 0, out.err[-2000:]
    assert "step probe: 2 rows, stage probe: 6 rows, loader probe: 2 rows" in out.out
    rc = main(["components", "--preset", "smoke", f"--results_root={tmp_path / 'one'}", f"--cache_dir={tmp_path / 'cache'}",
               "--grad_accum_steps=1", "--augment_cost=0", "--stage_repeats=1", "--model=", "--loader=false"])
    out = capsys.readouterr()
    assert rc == 0 and "stage probe: 2 rows" in out.out, out.err[-2000:]
    assert main(["components", "--preset", "smoke", "--stage_repeats=0"]) == 2
    assert "stage_repeats" in capsys.readouterr().err
    assert main(["components", "--preset", "smoke", "--step_shapes=7"]) == 2
    assert "step_shapes" in capsys.readouterr().err


def test_the_worker_probe_is_one_worker_at_the_sweeps_extreme_shapes():
    from experiments import sweep
    w = components.worker_sweep(sweep.quick())
    tcs = w.train_configs()
    assert sorted((tc.batch_size, tc.image_size) for tc in tcs) == [(32, 16), (32, 48), (128, 16), (128, 48)]
    for tc in tcs:
        assert (tc.num_workers, tc.feed, tc.source, tc.augment_cost, tc.model, tc.width, tc.depth) == \
            (1, "none", "ram", 0, "mlp", 16, 1)
    assert w.repeats == 1 and w.min_measure_s == 0.5 and w.max_warmup_s == 0.5 and not w.grain_stats
    # a sweep of one batch and image size: one shape
    one = components.worker_sweep(sweep.smoke(), repeats=1)
    assert [(tc.batch_size, tc.image_size) for tc in one.train_configs()] == [(16, 16)] and one.repeats == 1
    # half-second windows even for a sweep that has none (the smoke sweep's min_measure_s=0): the
    # workers' CPU is counted in 10 ms ticks
    assert one.min_measure_s == 0.5
