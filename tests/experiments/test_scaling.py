import dataclasses
import math
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from experiments import scaling
from experiments.configs import ConfigError
from experiments.results import load

from tests.experiments.test_sweep import REPO


@pytest.fixture(scope="module")
def smoke_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("scaling")
    return out, scaling.run(scaling.smoke(), out, progress=False)


def test_smoke_run_rows(smoke_rows):
    out, rows = smoke_rows
    cfg = scaling.smoke()
    assert len(rows) == len(cfg.widths) * len(cfg.token_budgets)
    assert (rows.status == "ok").all(), rows.error.tolist()
    for r in rows.itertuples():
        assert r.tokens == r.steps * cfg.batch_size * cfg.seq_len <= r.token_budget
        assert 0 < r.non_embedding_params < r.params
        assert r.flops_6nd == pytest.approx(6 * r.params * r.tokens)
        # XLA's count of the compiled step (forward, backward, AdamW) agrees with 6·N·D to within 2x
        assert 0.5 < r.flops_xla / r.flops_6nd < 2.0
        # starts near uniform over 256 bytes and learns: held-out loss below ln 256
        assert abs(r.first_loss - math.log(256)) < 1.0
        assert r.val_loss < math.log(256) - 0.5
        assert r.val_bits_per_byte == pytest.approx(r.val_loss / math.log(2))
    # bigger model → more parameters; one row per (size, budget)
    by_w = rows.groupby("width").params.first()
    assert by_w.is_monotonic_increasing and by_w.nunique() == len(cfg.widths)
    # rows carry the config and the environment, and load back with their dtypes
    back = load(out)
    assert {"learning_rate", "num_workers", "feed", "platform", "jax_version"} <= set(back.columns)
    assert back.params.dtype.kind == "i"


def test_longer_budget_trains_further(smoke_rows):
    _, rows = smoke_rows
    for _, g in rows.groupby("width"):
        g = g.sort_values("tokens")
        assert g.train_loss.iloc[-1] < g.train_loss.iloc[0]


@pytest.mark.parametrize("steps,warmup_frac", [(16, 0.05), (64, 0.05), (100, 0.2), (40, 0.0)])
def test_optimizer_is_optax_adamw_with_its_schedule(steps, warmup_frac):
    """The step counts moved into the optimizer state (one compilation per model size) change
    nothing: the same updates as optax.adamw with optax's warm-up + cosine schedule, step by step,
    past the end of the schedule included."""
    import jax
    import jax.numpy as jnp
    import optax
    cfg = dataclasses.replace(scaling.quick(), warmup_frac=warmup_frac)
    ours = scaling.optimizer(cfg, steps)
    ref = optax.adamw(scaling.schedule(cfg, steps), b2=cfg.b2, weight_decay=cfg.weight_decay)
    keys = jax.random.split(jax.random.key(0), steps + 6)
    params = {"w": jax.random.normal(keys[0], (8, 4)), "b": jnp.ones((4,))}
    p_ours, p_ref, s_ours, s_ref = params, params, ours.init(params), ref.init(params)
    for k in keys[1:]:
        grads = jax.tree.map(lambda x: jax.random.normal(k, x.shape), params)
        u_ours, s_ours = ours.update(grads, s_ours, p_ours)
        u_ref, s_ref = ref.update(grads, s_ref, p_ref)
        p_ours, p_ref = optax.apply_updates(p_ours, u_ours), optax.apply_updates(p_ref, u_ref)
        for a, b in zip(jax.tree.leaves(p_ours), jax.tree.leaves(p_ref)):
            np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7)
    assert int(s_ours[-1].count) == steps + 5


def test_points_of_one_size_share_one_compilation_and_train_as_if_compiled_alone():
    cfg = scaling.smoke()
    w, d = cfg.widths[0], cfg.depths[0]
    shared: dict = {}
    first = scaling.run_point(cfg, w, d, cfg.token_budgets[0], compiled=shared)
    executables = dict(shared)
    assert sorted(executables) == [(w, d), (w, d, "eval")]  # the train step and the evaluation
    second = scaling.run_point(cfg, w, d, cfg.token_budgets[1], compiled=shared)
    assert {k: id(v) for k, v in shared.items()} == {k: id(v) for k, v in executables.items()}  # reused
    alone = scaling.run_point(cfg, w, d, cfg.token_budgets[1])  # its own compilation
    assert second["steps"] == alone["steps"] == 2 * first["steps"]
    for key in ("first_loss", "train_loss_last", "val_loss"):
        assert second[key] == pytest.approx(alone[key], rel=1e-5), key
    assert second["xla_flops_per_step"] == alone["xla_flops_per_step"]


def test_resume_skips_finished_points(smoke_rows):
    out, rows = smoke_rows
    again = scaling.run(scaling.smoke(), out, progress=False)
    assert len(again) == len(rows)
    assert (again.config_id.to_numpy() == rows.config_id.to_numpy()).all()


def test_failed_point_becomes_a_row(tmp_path):
    cfg = dataclasses.replace(scaling.smoke(), widths=(16,), depths=(1,), token_budgets=(10_240,),
                              learning_rate=1e30)
    rows = scaling.run(cfg, tmp_path, progress=False)
    assert rows.status.tolist() == ["failed"]
    assert "NonFiniteLoss" in rows.error.iloc[0] and "step" in rows.error.iloc[0]


def test_presets_span_the_required_range():
    from flax import nnx
    from experiments.models import make_model, param_counts
    for preset in ("quick", "full"):
        cfg = scaling.PRESETS[preset]()
        assert len(cfg.widths) >= 5 and len(cfg.token_budgets) >= 3
        # abstract models (shapes only): the counts without initialising any weights
        n = [param_counts(nnx.eval_shape(lambda: make_model(cfg.train_config(w, d).model_config())))["params"]
             for w, d in zip(cfg.widths, cfg.depths)]
        assert np.log10(max(n) / min(n)) >= 1.5, n


def test_the_study_runs_quick_without_one_middle_size():
    # make demo's scaling run: the same span and budgets as quick, one size fewer (the demo's 8 minutes)
    from experiments import study
    q, s = scaling.quick(), scaling.study()
    assert study.PRESETS["quick"]().scaling_preset == "study" and scaling.PRESETS["study"] is scaling.study
    assert len(s.widths) == len(q.widths) - 1 >= 4 and set(zip(s.widths, s.depths)) < set(zip(q.widths, q.depths))
    assert (s.widths[0], s.widths[-1]) == (q.widths[0], q.widths[-1]) and s.token_budgets == q.token_budgets


@pytest.mark.parametrize("kw, key", [
    (dict(widths=(30,)), "widths"),            # not a multiple of num_heads
    (dict(depths=(1, 2, 3)), "depths"),        # does not pair with widths
    (dict(token_budgets=(1000,)), "token_budgets"),
    (dict(learning_rate=float("nan")), "learning_rate"),
    (dict(feed="bogus"), "feed"),
])
def test_bad_config_names_the_key(kw, key):
    base = dict(widths=(32, 64), depths=(1, 2))
    with pytest.raises(ConfigError, match=key):
        scaling.ScalingConfig(**{**base, **kw})


def test_cli_lists_scaling_and_rejects_bad_key():
    p = subprocess.run([sys.executable, "-m", "experiments", "scaling", "--bogus=1"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "bogus" in p.stderr
    p = subprocess.run([sys.executable, "-m", "experiments", "scaling", "--help"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "--token_budgets=" in p.stdout


def _study(rows, path):
    from analysis.report import StudyResults
    return StudyResults(path=path, rows=pd.DataFrame(), runs=pd.DataFrame(), config={}, meta={}, scaling_rows=rows)


def test_study_section_fits_or_says_why(smoke_rows, tmp_path, monkeypatch):
    from analysis.scaling import report as scaling_report
    _, rows = smoke_rows
    md = scaling_report.section(_study(rows, tmp_path))  # 4 rows for 5 parameters: the table, and why there is no fit
    assert md.startswith("## Scaling") and "No fit" in md and "val_loss" in md
    assert f"{rows.params.max():,}" in md
    # rows of the law itself (as a scaling run would give them): the section fits and draws
    N, D = (a.ravel() for a in np.meshgrid([2e4, 5e4, 1.5e5, 4e5, 9e5], [6e4, 1.3e5, 2.6e5]))
    law = pd.DataFrame({"status": "ok", "error": "", "width": 0, "depth": 0, "params": N.astype(int),
                        "tokens": D.astype(int), "token_budget": D.astype(int),
                        "val_loss": 1.5 + 40 / N ** 0.3 + 60 / D ** 0.35})
    monkeypatch.setattr(scaling_report, "BOOTSTRAP", 0)
    md = scaling_report.section(_study(law, tmp_path))
    assert "No fit" not in md
    assert re.search(r"^\| alpha +\| 0\.3 +\|", md, re.M) and re.search(r"^\| beta +\| 0\.35 +\|", md, re.M)
    assert (tmp_path / "scaling_frontier.png").stat().st_size > 5000
