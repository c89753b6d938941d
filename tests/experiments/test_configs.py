import dataclasses

import pytest

from experiments.__main__ import main
from experiments.configs import ConfigError, apply_overrides, parse_overrides
from experiments.train import TrainConfig, smoke

pytestmark = pytest.mark.latest  # also run on the newest versions (make test-latest)


def test_overrides_are_typed():
    cfg = apply_overrides(smoke(), parse_overrides(["--batch_size=16", "--feed=none", "--learning_rate=2e-3"]))
    assert (cfg.batch_size, cfg.feed, cfg.learning_rate) == (16, "none", 2e-3)
    assert isinstance(cfg.batch_size, int)


@pytest.mark.parametrize("overrides, needle", [
    ({"batch_sise": "8"}, "batch_sise"),
    ({"batch_size": "eight"}, "batch_size='eight'"),
    ({"batch_size": "1.5"}, "batch_size='1.5'"),
    ({"feed": "async"}, "feed='async'"),
    ({"batch_size": "0"}, "batch_size=0"),
    ({"num_workers": "-1"}, "num_workers=-1"),
    ({"feed": "double_buffer", "device_buffer_size": "0"}, "device_buffer_size=0"),
    ({"feed": "grain_device_put", "device_buffer_size": "0"}, "device_buffer_size=0"),
    ({"grad_accum_steps": "3"}, "grad_accum_steps=3"),
    ({"learning_rate": "inf"}, "learning_rate=inf"),
    ({"source": "s3"}, "source='s3'"),
])
def test_bad_overrides_name_key_and_value(overrides, needle):
    with pytest.raises(ConfigError) as e:
        apply_overrides(smoke(), overrides)
    assert needle in str(e.value)


def test_transformer_needs_text_in_ram():
    with pytest.raises(ConfigError, match="source='memmap'"):
        dataclasses.replace(TrainConfig(), model="transformer", source="memmap")


def test_cli_rejects_before_any_work(capsys, tmp_path):
    rc = main(["train", "--preset", "smoke", "--batch_size=0", f"--results_root={tmp_path}"])
    err = capsys.readouterr().err
    assert rc == 2 and "batch_size=0" in err
    assert not any(tmp_path.iterdir()), "a rejected config must not create a results folder"
    assert main(["train", "--preset=nope"]) == 2
    assert "preset='nope'" in capsys.readouterr().err


def test_cli_help_lists_every_knob(capsys):
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    for f in dataclasses.fields(TrainConfig):
        assert f"--{f.name}=" in out
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "train" in out and "sweep" in out and "study" in out
