"""What the cost model reads from a configuration: knob columns, analytic FLOPs and parameters.

Analysis does not build models (experiments does), so a configuration that was never measured gets
its step's arithmetic from the model families' definitions in ``experiments.models``, counted here:

- **MLP** (``width`` × ``depth`` dense layers + a 10-way head on the flattened image): a forward
  pass costs 2·Σ dᵢ·dᵢ₊₁ FLOPs per sample; training adds the backward pass (2× forward) minus the
  first layer's input gradient, which nothing needs: 6·Σ dᵢ·dᵢ₊₁ − 2·d₀·d₁.
- **CNN** (``depth`` 3×3 convolutions, channels ``width·2^i`` capped at 4·width, 2×2 pooling while
  the map is larger than 4×4, global average pooling, linear head): 2·9·cᵢ·cᵢ₊₁·H² per layer and
  sample forward, 3× that in training, 2× for the first layer.

Pinned to XLA's own count (``xla_flops_per_step`` in the measured rows; XLA counts a
``grad_accum_steps`` loop body once, so only ``grad_accum_steps=1`` rows compare): the MLP count is
within 6% of XLA's for fp32 (XLA adds the optimizer's ~15 FLOPs per parameter) and the CNN count
10–20% above it (XLA does not count pooling and folds some of the backward pass); the step model
fits one FLOP rate per family and precision, so a constant ratio per family cancels.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: knob columns a configuration must give (defaults where a rows file lacks one)
KNOB_DEFAULTS = {
    "model": "mlp", "width": 512, "depth": 2, "channels": 3, "num_classes": 10,
    "batch_size": 64, "image_size": 32, "augment_cost": 0, "source": "ram", "precision": "fp32",
    "grad_accum_steps": 1, "num_workers": 0, "per_worker_buffer_size": 1, "prefetch_buffer_size": 1,
    "feed": "none", "cpu_buffer_size": 2, "device_buffer_size": 2,
}
#: the knobs the model is calibrated over (their measured range is recorded; outside it, a
#: prediction is flagged as extrapolation)
NUMERIC_KNOBS = ("batch_size", "image_size", "augment_cost", "grad_accum_steps", "num_workers",
                 "prefetch_buffer_size", "width", "depth")
CATEGORICAL_KNOBS = ("model", "source", "precision", "feed")
FAMILIES = ("mlp", "cnn")


class CostModelError(ValueError):
    """Bad input to the cost model: the message names the value and what to do."""


def _mlp(d_in: int, width: int, depth: int, classes: int) -> tuple[float, float]:
    dims = [d_in] + [width] * depth + [classes]
    mm = [a * b for a, b in zip(dims[:-1], dims[1:])]
    return 6.0 * sum(mm) - 2.0 * mm[0], float(sum(mm) + sum(dims[1:]))


def _cnn(side: int, ch: int, width: int, depth: int, classes: int) -> tuple[float, float]:
    chans = [ch] + [min(width * 2 ** i, 4 * width) for i in range(depth)]
    h, flops, params = side, 0.0, 0.0
    for i, (a, b) in enumerate(zip(chans[:-1], chans[1:])):
        fwd = 2.0 * 9 * a * b * h * h
        flops += (2.0 if i == 0 else 3.0) * fwd
        params += 9 * a * b + b
        if h > 4:
            h //= 2
    return flops + 6.0 * chans[-1] * classes, params + chans[-1] * classes + classes


def step_arithmetic(model: str, image_size: int, channels: int, width: int, depth: int,
                    classes: int = 10) -> tuple[float, float]:
    """(training FLOPs per sample, parameter count) of one model family, counted analytically.

    >>> f, p = step_arithmetic("mlp", 32, 3, 512, 2)
    >>> int(p), round(f / 1e6, 2)
    (1841162, 7.9)
    >>> step_arithmetic("transformer", 32, 3, 64, 2)
    Traceback (most recent call last):
    ...
    analysis.costmodel.features.CostModelError: model='transformer': the cost model covers the image families mlp, cnn; measure transformer runs directly
    """
    if model == "mlp":
        return _mlp(image_size * image_size * channels, width, depth, classes)
    if model == "cnn":
        return _cnn(image_size, channels, width, depth, classes)
    raise CostModelError(f"model={model!r}: the cost model covers the image families "
                         f"{', '.join(FAMILIES)}; measure {model} runs directly")


def knob_frame(configs: pd.DataFrame) -> pd.DataFrame:
    """The knob columns of ``configs`` (a measured ``rows.csv`` or a grid), defaults filled,
    plus derived ``flops_per_sample``, ``params`` and ``pixels`` (image bytes per sample).

    Other columns are ignored. A missing or NaN knob value that has no default raises.
    """
    if not isinstance(configs, pd.DataFrame) or not len(configs):
        raise CostModelError("configs: expected a DataFrame with at least one configuration (one per row)")
    out = pd.DataFrame(index=configs.index)
    for k, default in KNOB_DEFAULTS.items():
        col = configs[k] if k in configs else pd.Series(default, index=configs.index)
        if col.isna().any():
            i = int(np.argmax(col.isna().to_numpy()))
            raise CostModelError(f"{k}=nan in configuration row {i}: give a value (default {default!r})")
        out[k] = col.astype(type(default)) if not isinstance(default, str) else col.astype(str)
    bad = out.batch_size % out.grad_accum_steps != 0
    if bad.any():
        i = int(np.argmax(bad.to_numpy()))
        raise CostModelError(f"grad_accum_steps={out.grad_accum_steps.iloc[i]} (row {i}): must divide "
                             f"batch_size ({out.batch_size.iloc[i]})")
    for k in ("batch_size", "image_size", "grad_accum_steps", "width", "depth"):
        if (out[k] <= 0).any():
            i = int(np.argmax((out[k] <= 0).to_numpy()))
            raise CostModelError(f"{k}={out[k].iloc[i]} (row {i}): must be positive")
    for k in ("num_workers", "augment_cost", "prefetch_buffer_size"):
        if (out[k] < 0).any():
            i = int(np.argmax((out[k] < 0).to_numpy()))
            raise CostModelError(f"{k}={out[k].iloc[i]} (row {i}): must be >= 0")
    arith = [step_arithmetic(m, s, c, w, d, n) for m, s, c, w, d, n in
             zip(out.model, out.image_size, out.channels, out.width, out.depth, out.num_classes)]
    out["flops_per_sample"] = [a for a, _ in arith]
    out["params"] = [p for _, p in arith]
    out["pixels"] = (out.image_size ** 2 * out.channels).astype(float)
    return out
