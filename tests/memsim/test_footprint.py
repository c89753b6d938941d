import math

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from memsim import footprint as fp

pytestmark = pytest.mark.latest  # also run on the newest versions (make test-latest)

BASE = dict(param_bytes=4000, host_sample_bytes=100, device_sample_bytes=84, batch_size=8)


def test_frame_is_tidy_and_complete():
    df = fp.footprint(fp.FootprintConfig(**BASE), activations=123)
    assert list(df.columns) == list(fp.COLUMNS)
    assert df["bytes"].dtype == np.int64 and (df["bytes"] >= 0).all()
    assert set(df.place) == set(fp.PLACES) and set(df.source) <= set(fp.SOURCES)
    assert list(df[df.place == "device"].component) == [c for c in fp.DEVICE_COMPONENTS if c != "model_state"]
    assert list(df[df.place == "host"].component) == list(fp.HOST_COMPONENTS)
    assert not df.duplicated(["component", "place"]).any()
    assert df.set_index("component").loc["activations", "source"] == "analytic"


def test_adam_holds_sixteen_bytes_per_fp32_parameter():
    # ZeRO (Rajbhandari et al. 2020) counts 16 bytes/parameter for mixed-precision Adam; with fp32
    # weights and gradients that is 4 (weights) + 4 (gradients) + 8 (m, v), plus the int32 count.
    n = 1_000_000
    df = fp.footprint(fp.FootprintConfig(**{**BASE, "param_bytes": 4 * n}, optimizer="adam"), activations=0)
    d = df.set_index("component")["bytes"]
    assert d["parameters"] + d["gradients"] + d["optimizer_state"] == 16 * n + 4


def test_gradient_accumulation_adds_one_accumulator_and_keeps_the_batch():
    one = fp.footprint(fp.FootprintConfig(**{**BASE, "batch_size": 16}), activations=1000).set_index("component")
    acc = fp.footprint(fp.FootprintConfig(**{**BASE, "batch_size": 16}, grad_accum_steps=4),
                       activations=1000).set_index("component")
    assert one.loc["grad_accumulator", "bytes"] == 0
    assert acc.loc["grad_accumulator", "bytes"] == BASE["param_bytes"]
    diff = (acc["bytes"] - one["bytes"])
    assert diff.drop("grad_accumulator").eq(0).all(), "only the accumulator changes for the same activations"


def test_xla_activations_are_temp_minus_gradient_buffers():
    xla = fp.XlaMemory(argument_bytes=20_000, output_bytes=12_000, temp_bytes=9_500, alias_bytes=11_996)
    cfg = fp.FootprintConfig(**BASE, grad_accum_steps=2)
    row = fp.footprint(cfg, xla).set_index("component").loc["activations"]
    assert row["source"] == "xla" and row["bytes"] == 9_500 - 2 * BASE["param_bytes"]
    # XLA may fuse part of the gradient into the update (temp < gradients): floored at 0, not negative
    small = fp.XlaMemory(argument_bytes=20_000, output_bytes=12_000, temp_bytes=3_000, alias_bytes=11_996)
    assert fp.xla_activation_bytes(small, BASE["param_bytes"]) == 0


@pytest.mark.parametrize("s,h,a,b", [(2048, 12288, 96, 1), (512, 1024, 16, 8), (100, 60, 3, 5)])
def test_transformer_estimate_reproduces_korthikanti_eq1(s, h, a, b):
    # 16-bit activations, 4x MLP, dropout: per layer s·b·h·(34 + 5·a·s/h) = 34sbh + 5as²b bytes
    shape = fp.TransformerShape(seq_len=s, width=h, num_heads=a, depth=3, vocab_size=7)
    terms = fp.transformer_activation_terms(shape, b, "bf16", dropout=True)
    assert terms["layers"] == 3 * (34 * s * b * h + 5 * a * s * s * b)
    assert math.isclose(terms["layers"] / 3, s * b * h * (34 + 5 * a * s / h))


def test_transformer_estimate_without_dropout_and_in_fp32():
    shape = fp.TransformerShape(seq_len=32, width=64, num_heads=4, depth=2, vocab_size=50, mlp_ratio=2)
    s, h, a, L, v, r = 32, 64, 4, 2, 50, 2
    b = 3
    t32 = fp.transformer_activation_terms(shape, b, "fp32")
    t16 = fp.transformer_activation_terms(shape, b, "bf16")
    assert t32["layers"] == L * 4 * ((8 + 2 * r) * s * b * h + a * s * s * b)
    assert t16["layers"] * 2 == t32["layers"], "bf16 halves the activations of the layers"
    assert t32["fp32_log_softmax"] == t16["fp32_log_softmax"] == 4 * s * b * v, "the loss is float32 in both"
    assert "bf16_weight_copies" not in t32
    assert t16["bf16_weight_copies"] == 2 * (L * (4 + 2 * r) * h * h + h * v)
    # linear in the batch
    assert fp.transformer_activation_bytes(shape, 2 * b) == 2 * fp.transformer_activation_bytes(shape, b)


def test_host_buffers_grow_one_batch_per_knob_step():
    def host(**kw):
        return fp.totals(fp.footprint(fp.FootprintConfig(**{**BASE, **kw}), activations=0))["host"]
    hb = BASE["batch_size"] * BASE["host_sample_bytes"]
    assert host(prefetch_buffer_size=3) - host(prefetch_buffer_size=2) == hb
    assert host(prefetch_buffer_size=1) - host(prefetch_buffer_size=0) == 2 * hb  # the queue and its producer
    assert host(read_buffer_size=3) - host(read_buffer_size=2) == hb
    assert host(read_buffer_size=1) - host(read_buffer_size=0) == hb  # R = 0: only the batch being made
    # each worker: its read-ahead and assembly, W + 1 in its queue and W + 1 received in the main process
    w1, w2 = host(num_workers=1, per_worker_buffer_size=2), host(num_workers=2, per_worker_buffer_size=2)
    assert w2 - w1 == (2 + 1 + 3 + 3) * hb
    assert host(num_workers=2, per_worker_buffer_size=3) - w2 == 2 * 2 * hb
    assert host(feed="grain_device_put", cpu_buffer_size=4) - host(feed="none") == 5 * hb


def test_device_batches_by_feed():
    def dev(**kw):
        d = fp.footprint(fp.FootprintConfig(**{**BASE, **kw}), activations=0).set_index("component")["bytes"]
        return (d["batch_in_use"] + d["device_batches_in_flight"]) // (BASE["batch_size"] * BASE["device_sample_bytes"])
    assert dev(feed="none", device_buffer_size=0) == 1
    assert [dev(feed="double_buffer", device_buffer_size=k) for k in (1, 2, 5)] == [2, 3, 6]  # D ahead + 1 in use
    assert [dev(feed="grain_device_put", device_buffer_size=k) for k in (1, 2)] == [3, 4]


def test_tree_bytes_counts_shape_structs_and_arrays():
    tree = {"a": jax.ShapeDtypeStruct((2, 3), jnp.bfloat16), "b": np.zeros((5,), np.float64),
            "c": jnp.zeros((4,), jnp.int32)}
    assert fp.tree_bytes(tree) == 12 + 40 + 16
    with pytest.raises(fp.FootprintError, match="no shape and dtype"):
        fp.tree_bytes({"x": 3.0})


@pytest.mark.parametrize("kw,match", [
    ({"param_bytes": 0}, "param_bytes=0 must be >= 1"),
    ({"param_bytes": -5}, "param_bytes=-5"),
    ({"host_sample_bytes": 0}, "host_sample_bytes=0"),
    ({"device_sample_bytes": -1}, "device_sample_bytes=-1"),
    ({"batch_size": 0}, "batch_size=0"),
    ({"batch_size": 2.5}, "batch_size=2.5 must be a whole number"),
    ({"batch_size": True}, "batch_size=True must be a whole number"),
    ({"param_bytes": float("nan")}, "param_bytes=nan must be a whole number"),
    ({"grad_accum_steps": 3}, "grad_accum_steps=3 must divide batch_size=8"),
    ({"num_workers": -1}, "num_workers=-1"),
    ({"per_worker_buffer_size": 0}, "per_worker_buffer_size=0"),
    ({"prefetch_buffer_size": -2}, "prefetch_buffer_size=-2"),
    ({"optimizer": "lion"}, "optimizer='lion' is not known; expected one of sgd, momentum, adam, adamw"),
    ({"feed": "pinned"}, "feed='pinned' is not known"),
    ({"feed": "double_buffer", "device_buffer_size": 0}, "device_buffer_size=0 must be >= 1"),
    ({"feed": "grain_device_put", "cpu_buffer_size": 0}, "cpu_buffer_size=0 must be >= 1"),
])
def test_bad_config_is_named(kw, match):
    with pytest.raises(fp.FootprintError, match=match.replace("(", r"\(").replace("?", r"\?")):
        fp.FootprintConfig(**{**BASE, **kw})


def test_other_bad_input_is_named():
    cfg = fp.FootprintConfig(**BASE)
    with pytest.raises(fp.FootprintError, match="activations=-1"):
        fp.footprint(cfg, activations=-1)
    with pytest.raises(fp.FootprintError, match="activation_source='xla' is not known"):
        fp.footprint(cfg, activations=10, activation_source="xla")
    with pytest.raises(fp.FootprintError, match="pass a FootprintConfig"):
        fp.footprint({"param_bytes": 1}, activations=0)
    with pytest.raises(fp.FootprintError, match="optimizer='rmsprop'"):
        fp.optimizer_state_bytes(100, "rmsprop")
    with pytest.raises(fp.FootprintError, match="param_bytes=0"):
        fp.optimizer_state_bytes(0, "adam")
    with pytest.raises(fp.FootprintError, match="temp_bytes=-3"):
        fp.XlaMemory(argument_bytes=1, output_bytes=1, temp_bytes=-3, alias_bytes=0)
    with pytest.raises(fp.FootprintError, match="alias_bytes=9 exceeds"):
        fp.XlaMemory(argument_bytes=4, output_bytes=4, temp_bytes=0, alias_bytes=9)
    with pytest.raises(fp.FootprintError, match="returned None"):
        fp.XlaMemory.from_analysis(None)
    with pytest.raises(fp.FootprintError, match="no 'temp_size_in_bytes'"):
        fp.XlaMemory.from_analysis(type("M", (), {"argument_size_in_bytes": 1, "output_size_in_bytes": 1,
                                                  "alias_size_in_bytes": 0})())
    with pytest.raises(fp.FootprintError, match=r"lacks \['xla_temp_bytes'\]"):
        fp.XlaMemory.from_row({"xla_argument_bytes": 1, "xla_output_bytes": 1, "xla_alias_bytes": 0})
    with pytest.raises(fp.FootprintError, match="num_heads=5 must divide width=64"):
        fp.TransformerShape(seq_len=8, width=64, num_heads=5, depth=1, vocab_size=10)
    with pytest.raises(fp.FootprintError, match="seq_len=0"):
        fp.TransformerShape(seq_len=0, width=64, num_heads=4, depth=1, vocab_size=10)
    shape = fp.TransformerShape(seq_len=8, width=64, num_heads=4, depth=1, vocab_size=10)
    with pytest.raises(fp.FootprintError, match="precision='fp16' is not known"):
        fp.transformer_activation_bytes(shape, 2, "fp16")
    with pytest.raises(fp.FootprintError, match="batch_size=0"):
        fp.transformer_activation_bytes(shape, 0)
    with pytest.raises(fp.FootprintError, match=r"lacks column\(s\) \['bytes'\]"):
        fp.totals(pd.DataFrame({"component": [], "place": [], "source": []}))


def test_peak_comparison_arithmetic_with_stubbed_stats():
    stats = {"bytes_in_use": 10, "peak_bytes_in_use": 9_700, "bytes_limit": 80_000, "num_allocs": 3}
    r = fp.peak_comparison(10_000, stats)
    assert r["status"] == "ok" and r["note"] == ""
    assert (r["predicted_bytes"], r["measured_peak_bytes"], r["bytes_limit"]) == (10_000, 9_700, 80_000)
    assert r["ratio"] == pytest.approx(0.97)
    assert r["rel_error"] == pytest.approx(300 / 9_700)
    assert set(r) == set(fp.PEAK_COLUMNS)
    assert math.isnan(fp.peak_comparison(10_000, {"peak_bytes_in_use": 5})["bytes_limit"])


def test_peak_comparison_without_statistics_says_so():
    # no statistics: the row is not a measurement (a reader keeping status "ok" rows drops it), no
    # number is made up, and the note says which statistic was missing
    ok = fp.peak_comparison(123, {"peak_bytes_in_use": 100})
    for stats, why in ((None, "returned None"), ({"bytes_in_use": 7}, "no 'peak_bytes_in_use' (keys: ['bytes_in_use'])")):
        r = fp.peak_comparison(123, stats)
        assert ok["status"] == "ok" and r["status"] != "ok" and "not available" in r["status"]
        for k in ("measured_peak_bytes", "bytes_limit", "ratio", "rel_error"):
            assert math.isnan(r[k]), k
        assert r["predicted_bytes"] == 123 and why in r["note"]


@pytest.mark.parametrize("predicted, stats, needle", [
    (0, None, "predicted_bytes=0"),
    (1.5, None, "predicted_bytes=1.5"),
    (100, [("peak_bytes_in_use", 5)], "memory_stats=[('peak_bytes_in_use', 5)]"),
    (100, {"peak_bytes_in_use": -3}, "peak_bytes_in_use=-3"),
    (100, {"peak_bytes_in_use": float("nan")}, "peak_bytes_in_use=nan"),
])
def test_peak_comparison_rejects_bad_input_naming_it(predicted, stats, needle):
    with pytest.raises(fp.FootprintError) as e:
        fp.peak_comparison(predicted, stats)
    assert needle in str(e.value)
