"""The recommendation measured beside Grain's choice (experiments.recommend)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from experiments import configs, recommend, sweep
from experiments.configs import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "results" / "cpu-2core" / "study-components" / "costmodel.json"  # the default model_file


def _base_csv(tmp_path) -> str:
    """A small pipeline (the smoke sweep's) as a configurations CSV."""
    tc = dataclasses.replace(sweep.smoke().train_configs()[0], cache_dir=str(tmp_path / "cache"))
    path = tmp_path / "base.csv"
    pd.DataFrame([configs.to_flat_dict(tc)]).to_csv(path, index=False)
    return str(path)


def test_the_three_choices_are_made_before_any_measurement(tmp_path):
    cfg = recommend.RecommendConfig(model_file=str(MODEL), base=_base_csv(tmp_path), ram_budget_mb=64)
    base, table, picks = recommend.choices(cfg)
    assert list(picks) == ["recommended", "best predicted", "grain"]
    assert table.recommended.sum() == 1
    rec = table[table.recommended].iloc[0]
    assert (picks["recommended"].num_workers, picks["recommended"].feed) == (rec.num_workers, rec.feed)
    # Grain's pick: its worker count and read buffers for this dataset and budget, the rest as the base
    g = recommend.grain_choice(base, 64)
    assert picks["grain"].num_workers == g["num_workers"] >= 1 and picks["grain"].read_buffer_size == g["read_buffer_size"]
    assert picks["grain"].model == base.model and picks["grain"].batch_size == base.batch_size


def test_a_run_measures_each_choice_and_compares_with_its_prediction(tmp_path):
    cfg = recommend.RecommendConfig(model_file=str(MODEL), base=_base_csv(tmp_path), ram_budget_mb=64, repeats=1,
                                    min_steps=2, min_measure_s=0.0, max_warmup_s=0.2)
    rows = recommend.run(cfg, tmp_path / "out", progress=False)
    s = recommend.summary(rows)
    assert (rows.status == "ok").all(), rows.get("error")
    # one row per distinct configuration; two choices that coincide share one, named by both
    assert len(rows) == len(s) and sorted(" = ".join(s.choice).split(" = ")) == ["best predicted", "grain",
                                                                                "recommended"]
    assert (s.samples_per_s > 0).all() and s.predicted.notna().all()
    meta = json.loads((tmp_path / "out" / "recommend.json").read_text())
    assert set(meta["choices"]) == {"recommended", "best predicted", "grain"} and len(meta["candidates"]) > 3


def test_bad_input_is_refused_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match="model_file"):
        recommend.RecommendConfig(model_file=str(tmp_path / "nope.json"))
    with pytest.raises(ConfigError, match="ram_budget_mb=0"):
        recommend.RecommendConfig(model_file=str(MODEL), ram_budget_mb=0)
