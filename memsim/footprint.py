"""Training memory footprint: bytes on the host and on the device, by component.

Pure functions of sizes and knobs (plain numbers, a frozen :class:`FootprintConfig`, pytrees of
``jax.ShapeDtypeStruct`` or arrays); nothing here builds a model or reads a clock. The knob names
are the measured rows' (``num_workers``, ``per_worker_buffer_size``, ``read_buffer_size``,
``prefetch_buffer_size``, ``feed``, ``cpu_buffer_size``, ``device_buffer_size``, ``batch_size``,
``grad_accum_steps``), so footprints join with measurements.

Device, the training step (what XLA's memory analysis of the jitted step covers):

- ``parameters``: P = Σᵢ |θᵢ| · bytes(dtypeᵢ). In the bf16 mode of the measured path the weights
  stay float32 (``param_dtype=float32``) and are cast to bfloat16 inside each layer: the float32
  parameters are the master weights of mixed-precision training (Micikevicius et al. 2018,
  "Mixed Precision Training", ICLR), so P is the same in fp32 and bf16 mode.
- ``gradients``: P again. Reverse-mode autodiff returns cotangents in the primal's dtype (JAX's
  rule for ``convert_element_type`` casts the bf16 cotangent back to float32), so the gradients of
  float32 master weights are float32 whatever the compute precision.
- ``grad_accumulator``: P when ``grad_accum_steps > 1`` (the float32 carry of the ``lax.scan``
  over micro-batches that sums their gradients), else 0. Only one micro-batch's activations are
  alive at a time, so pass the activations of ``batch_size / grad_accum_steps`` samples.
- ``optimizer_state``: k · P + 4 · c bytes, with k moment buffers in the parameters' dtype and c
  int32 step counters (optax's defaults: ``mu_dtype=None`` keeps moments in the parameters'
  dtype). SGD: k = 0, c = 0 (stateless); SGD with momentum (Polyak 1964, optax ``trace``): k = 1,
  c = 0; Adam (Kingma & Ba 2015, Alg. 1: m and v) and AdamW (Loshchilov & Hutter 2019: decoupled
  decay adds no state): k = 2, c = 1 (optax ``ScaleByAdamState.count``). With Adam the step holds
  P + P + 2P = 16 bytes per float32 parameter, the 16Ψ of ZeRO's mixed-precision accounting
  (Rajbhandari et al. 2020, Sec. 3.1) where the 2Ψ + 2Ψ of fp16 weights and gradients are replaced
  by our float32 ones and the 12Ψ of fp32 master weights + moments is unchanged.
- ``activations``: what the step keeps beyond the above, given two ways: from XLA
  (:func:`xla_activation_bytes`: XLA's temporary buffer size minus the gradient buffers, so it
  includes saved activations, their gradients in flight, bf16 copies of weights and fusion
  scratch) or an analytic estimate (:func:`transformer_activation_bytes`).
- ``batch_in_use``: ``batch_size`` · ``device_sample_bytes``, the step's batch argument.

Scalar outputs (the loss, 4 bytes) are left out. The step's total is compared with XLA's
``argument + output + temp − alias`` (the parameters and optimizer state are donated, so the
updated ones alias the old; see :class:`XlaMemory`).

Device, the feed (outside the step): ``device_batches_in_flight`` beyond the batch in use.
``double_buffer`` (experiments.feed): a semaphore of ``device_buffer_size`` slots, each released
when the step takes its batch, so D are placed ahead of the batch in use.
``grain_device_put`` (``grain.experimental.device_put``: a ``ThreadPrefetchIterDataset`` of
``device_buffer_size`` device batches, whose producer thread holds one more while the queue is
full): D + 1 ahead. ``none``: 0.

Host (batches of ``batch_size`` · ``host_sample_bytes``: the loader's arrays plus its per-sample
stage-time stamps), counted from the Grain 0.2.18 code paths the measured loader uses:

- ``loader_read_ahead``: R = ``read_buffer_size`` finished batches per loading process
  (``MapDataset.to_iter_dataset(ReadOptions(prefetch_buffer_size=R))``: a deque of R futures),
  in the main process when ``num_workers = 0``, else in each of the ``num_workers`` workers.
- ``loader_assembly``: min(``read_threads``, R) batches per loading process: the per-sample
  arrays of a batch being stacked, alive together with the stacked result (glibc's allocator
  usually keeps that memory after it is freed, so it shows in RSS); with R = 0 (no read-ahead
  thread) the consuming thread assembles one batch at a time: 1.
- ``worker_output_queues``: ``num_workers`` · (W + 1), W = ``per_worker_buffer_size``: each
  worker's output queue (``ProcessPrefetchIterDataset(buffer_size=W)``) plus the batch it holds
  while blocked on a full queue.
- ``worker_receive_buffers``: ``num_workers`` · (W + 1) in the main process: ``mp_prefetch``
  interleaves the workers with ``iter_buffer_size=W``, a thread prefetch of W per worker whose
  producer holds one more.
- ``prefetch_buffer``: ``prefetch_buffer_size`` + 1 when > 0 (``ThreadPrefetchIterDataset``: a
  queue of that size plus the batch its producer thread holds while the queue is full), else 0.
- ``feed_host_copies``: host batches the device feed keeps alive after ``device_put``:
  ``double_buffer`` 1 (its producer thread holds the last host batch while it waits for a slot),
  ``grain_device_put`` ``cpu_buffer_size`` + 1 (its CPU-side thread prefetch), ``none`` 0.

Each count is the most the buffers hold when the consumer is slower than the loader (full
buffers), which is what memory must be provisioned for. On a CPU-only machine the "device" is host
RAM too: add both places for the process's batch and state memory there.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Mapping

import numpy as np
import pandas as pd

OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")
from memsim.knobs import FEEDS, PRECISIONS
PLACES = ("host", "device")
SOURCES = ("analytic", "xla", "measured")
COLUMNS = ("component", "place", "bytes", "source")

# optimizer → (moment buffers shaped like the parameters, int32 step counters); see the module doc
OPTIMIZER_STATE = {"sgd": (0, 0), "momentum": (1, 0), "adam": (2, 1), "adamw": (2, 1)}
COUNTER_BYTES = 4  # optax keeps step counts as int32 scalars

# the device components XLA's memory analysis of the step covers (everything on the device but the
# batches the feed has placed ahead)
STEP_COMPONENTS = ("parameters", "model_state", "gradients", "grad_accumulator", "optimizer_state",
                   "activations", "batch_in_use")
HOST_COMPONENTS = ("loader_read_ahead", "loader_assembly", "worker_output_queues", "worker_receive_buffers",
                   "prefetch_buffer", "feed_host_copies")
DEVICE_COMPONENTS = STEP_COMPONENTS + ("device_batches_in_flight",)


class FootprintError(ValueError):
    """A size, knob or name the footprint cannot use; the message names the value and the fix."""


def _count(owner: str, key: str, value: Any, minimum: int, hint: str) -> int:
    """An integer >= ``minimum`` (bools, fractions and NaN rejected), or FootprintError naming it."""
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not ok and isinstance(value, numbers.Real) and not isinstance(value, bool):
        ok = math.isfinite(float(value)) and float(value).is_integer()
    if not ok:
        raise FootprintError(f"{owner}: {key}={value!r} must be a whole number; {hint}")
    v = int(value)
    if v < minimum:
        raise FootprintError(f"{owner}: {key}={value!r} must be >= {minimum}; {hint}")
    return v


def _choice(owner: str, key: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise FootprintError(f"{owner}: {key}={value!r} is not known; expected one of {', '.join(choices)}")
    return value


def tree_bytes(tree: Any) -> int:
    """Bytes of every leaf of a pytree of arrays or ``jax.ShapeDtypeStruct`` (shape · itemsize).

    Args:
        tree: any pytree whose leaves have ``shape`` and ``dtype`` (numpy or jax arrays, shape
            structs, optax states, flax ``nnx.State``).

    Returns:
        Σ over leaves of prod(shape) · dtype itemsize, as an int.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> tree_bytes({"w": jax.ShapeDtypeStruct((3, 4), jnp.float32),
        ...             "n": jax.ShapeDtypeStruct((), jnp.int32)})
        52
    """
    import jax
    total = 0
    for leaf in jax.tree.leaves(tree):
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            raise FootprintError(f"tree_bytes: leaf {leaf!r} has no shape and dtype; pass arrays or "
                                 "jax.ShapeDtypeStruct leaves")
        total += math.prod(leaf.shape) * np.dtype(leaf.dtype).itemsize
    return int(total)


def optimizer_state_bytes(param_bytes: int, optimizer: str) -> int:
    """Bytes of the optimizer state for parameters of ``param_bytes`` bytes: k · P + 4 · c.

    k moment buffers shaped (and typed) like the parameters and c int32 step counters, per
    ``OPTIMIZER_STATE`` (optax 0.2 ``sgd``, ``sgd(momentum=…)``, ``adam``, ``adamw``; equations and
    sources in the module docstring).

    Args:
        param_bytes: P, bytes of the trainable parameters (> 0).
        optimizer: ``sgd``, ``momentum``, ``adam`` or ``adamw``.

    Returns:
        Bytes of the optimizer state.

    Example:
        >>> [optimizer_state_bytes(4000, o) for o in OPTIMIZERS]
        [0, 4000, 8004, 8004]
        >>> optimizer_state_bytes(4000, "lion")
        Traceback (most recent call last):
        ...
        memsim.footprint.FootprintError: optimizer_state_bytes: optimizer='lion' is not known; expected one of sgd, momentum, adam, adamw
    """
    _choice("optimizer_state_bytes", "optimizer", optimizer, OPTIMIZERS)
    p = _count("optimizer_state_bytes", "param_bytes", param_bytes, 1, "pass the parameters' size in bytes")
    moments, counters = OPTIMIZER_STATE[optimizer]
    return moments * p + COUNTER_BYTES * counters


@dataclasses.dataclass(frozen=True)
class XlaMemory:
    """XLA's memory analysis of a compiled step (``Compiled.memory_analysis()``), in bytes.

    ``step_bytes`` = argument + output + temp − alias: the inputs, the outputs not written in place
    of a donated input, and the scratch XLA allocates for the step.

    Example:
        >>> m = XlaMemory(argument_bytes=100, output_bytes=90, temp_bytes=40, alias_bytes=88)
        >>> m.step_bytes
        142
        >>> XlaMemory(argument_bytes=-1, output_bytes=0, temp_bytes=0, alias_bytes=0)
        Traceback (most recent call last):
        ...
        memsim.footprint.FootprintError: XlaMemory: argument_bytes=-1 must be >= 0; read it from Compiled.memory_analysis()
    """

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = _count("XlaMemory", f.name, getattr(self, f.name), 0, "read it from Compiled.memory_analysis()")
            object.__setattr__(self, f.name, v)
        if self.alias_bytes > self.argument_bytes + self.output_bytes:
            raise FootprintError(f"XlaMemory: alias_bytes={self.alias_bytes} exceeds argument + output "
                                 f"({self.argument_bytes + self.output_bytes}); the fields are mixed up")

    @property
    def step_bytes(self) -> int:
        return self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes

    @classmethod
    def from_analysis(cls, analysis: Any) -> "XlaMemory":
        """From the object ``Compiled.memory_analysis()`` returns (its fields vary by version:
        read with ``getattr``; a missing field is an error, never a guess)."""
        if analysis is None:
            raise FootprintError("XlaMemory.from_analysis: memory_analysis() returned None on this platform; "
                                 "pass activation bytes from the analytic estimate instead")
        names = {"argument_bytes": "argument_size_in_bytes", "output_bytes": "output_size_in_bytes",
                 "temp_bytes": "temp_size_in_bytes", "alias_bytes": "alias_size_in_bytes"}
        vals = {}
        for key, attr in names.items():
            v = getattr(analysis, attr, None)
            if v is None:
                raise FootprintError(f"XlaMemory.from_analysis: {type(analysis).__name__} has no {attr!r}; "
                                     "this jax version's memory analysis lacks it")
            vals[key] = v
        return cls(**vals)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "XlaMemory":
        """From a measured row's ``xla_argument_bytes``, ``xla_output_bytes``, ``xla_temp_bytes``,
        ``xla_alias_bytes`` (experiments.train writes them)."""
        keys = ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes")
        missing = [f"xla_{k}" for k in keys if f"xla_{k}" not in row]
        if missing:
            raise FootprintError(f"XlaMemory.from_row: the row lacks {missing}")
        return cls(**{k: row[f"xla_{k}"] for k in keys})


def xla_activation_bytes(xla: XlaMemory, gradient_bytes: int, accumulator_bytes: int = 0) -> int:
    """Activations as XLA allocates them: temp − gradients − gradient accumulator, floored at 0.

    XLA's temporary buffer holds the gradients (and the accumulator under gradient accumulation)
    and everything the backward pass needs or makes on the way: saved activations, their
    gradients, bf16 weight copies, fusion scratch. When XLA fuses part of the gradient into the
    optimizer update, temp can be a little smaller than the gradients; then this is 0.

    Args:
        xla: the step's memory analysis.
        gradient_bytes: bytes of the gradients (the parameters' bytes).
        accumulator_bytes: bytes of the gradient accumulator (0 without accumulation).

    Returns:
        Bytes, >= 0.

    Example:
        >>> xla_activation_bytes(XlaMemory(100, 90, 40, 88), gradient_bytes=30)
        10
    """
    g = _count("xla_activation_bytes", "gradient_bytes", gradient_bytes, 0, "pass the parameters' bytes")
    a = _count("xla_activation_bytes", "accumulator_bytes", accumulator_bytes, 0, "0 without accumulation")
    return max(xla.temp_bytes - g - a, 0)


@dataclasses.dataclass(frozen=True)
class TransformerShape:
    """A decoder-only Transformer: s = ``seq_len``, h = ``width``, a = ``num_heads``, L = ``depth``,
    v = ``vocab_size``, r = ``mlp_ratio`` (hidden width of the MLP over h).

    Example:
        >>> TransformerShape(seq_len=64, width=64, num_heads=3, depth=2, vocab_size=256)
        Traceback (most recent call last):
        ...
        memsim.footprint.FootprintError: TransformerShape: num_heads=3 must divide width=64
    """

    seq_len: int
    width: int
    num_heads: int
    depth: int
    vocab_size: int
    mlp_ratio: int = 4

    def __post_init__(self):
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _count("TransformerShape", f.name, getattr(self, f.name), 1,
                                                    "sizes of a model are positive"))
        if self.width % self.num_heads:
            raise FootprintError(f"TransformerShape: num_heads={self.num_heads} must divide width={self.width}")


def transformer_activation_terms(shape: TransformerShape, batch_size: int, precision: str = "fp32",
                                 dropout: bool = False) -> dict[str, int]:
    """Bytes the backward pass needs kept, by term, for one (micro-)batch of b sequences.

    Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
    arXiv:2205.05198, Sec. 4.1, Eq. 1) count, per layer and with 16-bit activations,
    s·b·h·(34 + 5·a·s/h) bytes: attention 11sbh + 5as²b (QKV input 2sbh, Q and K 4sbh, softmax
    output 2as²b, its dropout mask as²b, dropout output 2as²b, V 2sbh, output-projection input
    2sbh, dropout mask sbh), MLP 19sbh (input 2sbh, GELU input 8sbh, GELU output 8sbh, dropout mask
    sbh) and two LayerNorm inputs 4sbh. With e bytes per activation element and MLP ratio r, per
    layer, in elements × e:

    - attention: sbh (LN1 input) + sbh (QKV input) + 2sbh (Q, K) + as²b (softmax output) + sbh (V)
      + sbh (output-projection input);
    - MLP: sbh (LN2 input) + sbh (fc1 input) + r·sbh (GELU input) + r·sbh (GELU output);

    that is e·((8 + 2r)·sbh + as²b); with e = 2, r = 4 and dropout's 2sbh + 3as²b bytes added
    back this is the paper's sbh(34 + 5as/h). What our model (experiments.models.Transformer)
    does differently, and how it is counted:

    - no dropout: the masks and the dropout output are not stored (``dropout=True`` restores
      them, for checking against the paper);
    - e = 4 for fp32 and e = 2 for bf16 (activations, the attention softmax included, are computed
      in the compute dtype; LayerNorm statistics, 2 floats per token, are negligible and left out);
    - the causal mask is a function of positions that XLA recomputes in fusions: not counted;
    - bf16 mode keeps float32 master weights and casts them per use: the backward pass needs the
      bf16 copies of the matmul weights, 2 bytes × ((4 + 2r)·h² per layer + h·v for the head);
    - outside the layers (after Korthikanti et al. Sec. 4.3, which counts the final LayerNorm, the
      output layer's input and fp32 logits for the cross entropy): final LayerNorm input sbh·e,
      head input sbh·e, and the float32 log-softmax of the logits, 4·s·b·v (our loss casts the
      logits to float32).

    Args:
        shape: the model.
        batch_size: b, sequences in the (micro-)batch whose backward pass is pending.
        precision: ``fp32`` or ``bf16`` (compute dtype; parameters are float32 either way).
        dropout: count dropout's masks and outputs as Korthikanti et al. do.

    Returns:
        Dict of term name → bytes (``layers`` is all L layers together).

    Example:
        >>> t = TransformerShape(seq_len=2048, width=12288, num_heads=96, depth=1, vocab_size=1)
        >>> per_layer = transformer_activation_terms(t, 1, "bf16", dropout=True)["layers"]
        >>> per_layer == 2048 * 1 * 12288 * (34 + 5 * 96 * 2048 // 12288)   # the paper's Eq. 1
        True
    """
    b = _count("transformer_activation_terms", "batch_size", batch_size, 1, "a batch holds >= 1 sequence")
    _choice("transformer_activation_terms", "precision", precision, PRECISIONS)
    e = 4 if precision == "fp32" else 2
    s, h, a, L, v, r = shape.seq_len, shape.width, shape.num_heads, shape.depth, shape.vocab_size, shape.mlp_ratio
    sbh, as2b = s * b * h, a * s * s * b
    per_layer = e * ((8 + 2 * r) * sbh + as2b)
    if dropout:
        per_layer += 2 * sbh + as2b * (1 + e)  # two 1-byte sbh masks; as²b mask + dropout output
    terms = {"layers": L * per_layer,
             "final_layernorm_and_head_inputs": 2 * sbh * e,
             "fp32_log_softmax": 4 * s * b * v}
    if precision == "bf16":
        terms["bf16_weight_copies"] = 2 * (L * (4 + 2 * r) * h * h + h * v)
    return terms


def transformer_activation_bytes(shape: TransformerShape, batch_size: int, precision: str = "fp32",
                                 dropout: bool = False) -> int:
    """Σ of :func:`transformer_activation_terms`: the analytic activation estimate, in bytes.

    Example:
        >>> t = TransformerShape(seq_len=64, width=64, num_heads=4, depth=2, vocab_size=256)
        >>> transformer_activation_bytes(t, 8)   # 4·(16·sbh + as²b)·L + 2·sbh·4 + 4·sbv
        6029312
    """
    return int(sum(transformer_activation_terms(shape, batch_size, precision, dropout).values()))


@dataclasses.dataclass(frozen=True)
class FootprintConfig:
    """Sizes and knobs of one training setup, as the footprint needs them.

    Args:
        param_bytes: P, bytes of the trainable parameters (:func:`tree_bytes` of the parameters).
        host_sample_bytes: one sample as the loader yields it (arrays and stage-time stamps).
        device_sample_bytes: one sample of the step's batch argument on the device.
        optimizer: ``sgd``, ``momentum``, ``adam`` or ``adamw``.
        model_state_bytes: non-trainable model state carried by the step (e.g. batch-norm
            statistics), 0 for none.
        batch_size, grad_accum_steps, num_workers, per_worker_buffer_size, read_threads,
            read_buffer_size, prefetch_buffer_size, feed, cpu_buffer_size, device_buffer_size: the
            knobs of the measured path, same names and meanings.

    Example:
        >>> FootprintConfig(param_bytes=4000, host_sample_bytes=100, device_sample_bytes=84,
        ...                 batch_size=0)
        Traceback (most recent call last):
        ...
        memsim.footprint.FootprintError: FootprintConfig: batch_size=0 must be >= 1; a batch holds at least one sample
    """

    param_bytes: int
    host_sample_bytes: int
    device_sample_bytes: int
    optimizer: str = "adamw"
    model_state_bytes: int = 0
    batch_size: int = 64
    grad_accum_steps: int = 1
    num_workers: int = 0
    per_worker_buffer_size: int = 2
    read_threads: int = 1
    read_buffer_size: int = 2
    prefetch_buffer_size: int = 2
    feed: str = "double_buffer"
    cpu_buffer_size: int = 4
    device_buffer_size: int = 2

    _RULES = {  # key: (minimum, what to do)
        "param_bytes": (1, "pass the parameters' size in bytes (tree_bytes of the parameters)"),
        "host_sample_bytes": (1, "pass the bytes of one sample as the loader yields it"),
        "device_sample_bytes": (1, "pass the bytes of one sample of the step's batch"),
        "model_state_bytes": (0, "use 0 when the model has no non-trainable state"),
        "batch_size": (1, "a batch holds at least one sample"),
        "grad_accum_steps": (1, "use 1 for no gradient accumulation"),
        "num_workers": (0, "use 0 (loader in the main process) or a positive worker count"),
        "per_worker_buffer_size": (1, "each worker's output queue holds at least one batch"),
        "read_threads": (1, "the loader reads with at least one thread"),
        "read_buffer_size": (0, "use 0 for no read-ahead (batches made on demand)"),
        "prefetch_buffer_size": (0, "use 0 for no host prefetch buffer"),
        "cpu_buffer_size": (0, "use 0 for no extra host buffer"),
        "device_buffer_size": (0, "use 0 for no device buffer"),
    }

    def __post_init__(self):
        for key, (lo, hint) in self._RULES.items():
            object.__setattr__(self, key, _count("FootprintConfig", key, getattr(self, key), lo, hint))
        _choice("FootprintConfig", "optimizer", self.optimizer, OPTIMIZERS)
        _choice("FootprintConfig", "feed", self.feed, FEEDS)
        if self.batch_size % self.grad_accum_steps:
            raise FootprintError(f"FootprintConfig: grad_accum_steps={self.grad_accum_steps} must divide "
                                 f"batch_size={self.batch_size} (the step splits its batch into micro-batches)")
        if self.feed != "none" and self.device_buffer_size < 1:
            raise FootprintError(f"FootprintConfig: device_buffer_size={self.device_buffer_size} must be >= 1 "
                                 f"with feed={self.feed!r}")
        if self.feed == "grain_device_put" and self.cpu_buffer_size < 1:
            raise FootprintError(f"FootprintConfig: cpu_buffer_size={self.cpu_buffer_size} must be >= 1 "
                                 "with feed='grain_device_put'")

    @property
    def micro_batch_size(self) -> int:
        return self.batch_size // self.grad_accum_steps

    @property
    def host_batch_bytes(self) -> int:
        return self.batch_size * self.host_sample_bytes

    @property
    def device_batch_bytes(self) -> int:
        return self.batch_size * self.device_sample_bytes


def host_batch_counts(cfg: FootprintConfig) -> dict[str, int]:
    """Host batches each component holds when every buffer is full (equations in the module doc).

    Example:
        >>> c = FootprintConfig(param_bytes=1, host_sample_bytes=1, device_sample_bytes=1,
        ...                     num_workers=2, per_worker_buffer_size=3, read_buffer_size=2,
        ...                     prefetch_buffer_size=4, feed="grain_device_put", cpu_buffer_size=4)
        >>> host_batch_counts(c)
        {'loader_read_ahead': 4, 'loader_assembly': 2, 'worker_output_queues': 8, 'worker_receive_buffers': 8, 'prefetch_buffer': 5, 'feed_host_copies': 5}
    """
    procs = max(cfg.num_workers, 1)
    feed_copies = {"none": 0, "double_buffer": 1, "grain_device_put": cfg.cpu_buffer_size + 1}[cfg.feed]
    return {
        "loader_read_ahead": procs * cfg.read_buffer_size,
        "loader_assembly": procs * (min(cfg.read_threads, cfg.read_buffer_size) if cfg.read_buffer_size else 1),
        "worker_output_queues": cfg.num_workers * (cfg.per_worker_buffer_size + 1),
        "worker_receive_buffers": cfg.num_workers * (cfg.per_worker_buffer_size + 1),
        "prefetch_buffer": cfg.prefetch_buffer_size + 1 if cfg.prefetch_buffer_size > 0 else 0,
        "feed_host_copies": feed_copies,
    }


def device_batch_counts(cfg: FootprintConfig) -> dict[str, int]:
    """Device batches: the one the step uses and those the feed has placed ahead of it.

    Example:
        >>> base = dict(param_bytes=1, host_sample_bytes=1, device_sample_bytes=1, device_buffer_size=2)
        >>> [device_batch_counts(FootprintConfig(**base, feed=f))["device_batches_in_flight"] for f in FEEDS]
        [0, 2, 3]
    """
    ahead = {"none": 0, "double_buffer": cfg.device_buffer_size,
             "grain_device_put": cfg.device_buffer_size + 1}[cfg.feed]
    return {"batch_in_use": 1, "device_batches_in_flight": ahead}


def footprint(cfg: FootprintConfig, activations: int | XlaMemory, activation_source: str = "analytic") -> pd.DataFrame:
    """The footprint of one setup: one row per component and place.

    Args:
        cfg: sizes and knobs.
        activations: an :class:`XlaMemory` of the compiled step (activations from XLA, see
            :func:`xla_activation_bytes`), or activation bytes of one micro-batch (e.g.
            :func:`transformer_activation_bytes` for ``batch_size / grad_accum_steps`` sequences).
        activation_source: the ``source`` of a number passed as ``activations`` (``analytic``
            or ``measured``); ignored for an XlaMemory.

    Returns:
        A tidy DataFrame with columns component, place (host | device), bytes (int64), source
        (analytic | xla | measured); device components in ``DEVICE_COMPONENTS`` order, then host
        components in ``HOST_COMPONENTS`` order. ``model_state`` appears only when non-zero.

    Example:
        >>> cfg = FootprintConfig(param_bytes=4000, host_sample_bytes=100, device_sample_bytes=84,
        ...                       batch_size=8, num_workers=0, prefetch_buffer_size=2)
        >>> df = footprint(cfg, activations=1000)
        >>> df.groupby("place", sort=False)["bytes"].sum().to_dict()
        {'device': 19020, 'host': 5600}
        >>> df[df.place == "device"].set_index("component")["bytes"].to_dict()
        {'parameters': 4000, 'gradients': 4000, 'grad_accumulator': 0, 'optimizer_state': 8004, 'activations': 1000, 'batch_in_use': 672, 'device_batches_in_flight': 1344}
    """
    if not isinstance(cfg, FootprintConfig):
        raise FootprintError(f"footprint: cfg is a {type(cfg).__name__}; pass a FootprintConfig")
    P = cfg.param_bytes
    acc = P if cfg.grad_accum_steps > 1 else 0
    if isinstance(activations, XlaMemory):
        act, act_source = xla_activation_bytes(activations, P, acc), "xla"
    else:
        _choice("footprint", "activation_source", activation_source, ("analytic", "measured"))
        act = _count("footprint", "activations", activations, 0,
                     "pass activation bytes of one micro-batch or an XlaMemory")
        act_source = activation_source
    dev = device_batch_counts(cfg)
    rows = [("parameters", "device", P, "analytic")]
    if cfg.model_state_bytes:
        rows.append(("model_state", "device", cfg.model_state_bytes, "analytic"))
    rows += [
        ("gradients", "device", P, "analytic"),
        ("grad_accumulator", "device", acc, "analytic"),
        ("optimizer_state", "device", optimizer_state_bytes(P, cfg.optimizer), "analytic"),
        ("activations", "device", act, act_source),
        ("batch_in_use", "device", dev["batch_in_use"] * cfg.device_batch_bytes, "analytic"),
        ("device_batches_in_flight", "device", dev["device_batches_in_flight"] * cfg.device_batch_bytes, "analytic"),
    ]
    rows += [(k, "host", n * cfg.host_batch_bytes, "analytic") for k, n in host_batch_counts(cfg).items()]
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df["bytes"] = df["bytes"].astype("int64")
    return df


def totals(df: pd.DataFrame) -> dict[str, int]:
    """Total bytes by place, plus ``step``: the device components XLA's analysis of the step covers.

    Example:
        >>> cfg = FootprintConfig(param_bytes=4000, host_sample_bytes=100, device_sample_bytes=84, batch_size=8)
        >>> totals(footprint(cfg, activations=1000))
        {'host': 5600, 'device': 19020, 'step': 17676}
    """
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise FootprintError(f"totals: the frame lacks column(s) {missing}; pass what footprint() returned")
    dev = df[df.place == "device"]
    return {"host": int(df.loc[df.place == "host", "bytes"].sum()), "device": int(dev["bytes"].sum()),
            "step": int(dev.loc[dev.component.isin(STEP_COMPONENTS), "bytes"].sum())}


PEAK_COLUMNS = ("predicted_bytes", "measured_peak_bytes", "bytes_limit", "ratio", "rel_error", "status", "note")
NOT_AVAILABLE = "not available on this platform"


def peak_comparison(predicted_bytes: int, memory_stats: Mapping[str, Any] | None) -> dict[str, Any]:
    """The footprint's device prediction beside the device's measured peak.

    ``memory_stats`` is what ``Device.memory_stats()`` returned in the process that ran the
    training (its ``peak_bytes_in_use`` is the most the allocator held since the process started);
    None where the platform keeps no statistics (CPU). ``ratio`` = measured / predicted;
    ``rel_error`` = (predicted − measured) / measured, negative when the model under-predicts.

    Args:
        predicted_bytes: the footprint's device total (``totals(df)["device"]``), >= 1.
        memory_stats: the device's statistics, or None.

    Returns:
        A dict with ``PEAK_COLUMNS``; measured fields NaN and ``status`` "not available on this
        platform" (with the reason in ``note``) where there is no measured peak, else "ok".

    Example:
        >>> r = peak_comparison(1000, {"peak_bytes_in_use": 1030, "bytes_limit": 8000})
        >>> r["ratio"], round(r["rel_error"], 4), r["status"]
        (1.03, -0.0291, 'ok')
        >>> peak_comparison(1000, None)["status"]
        'not available on this platform'
    """
    predicted = _count("peak_comparison", "predicted_bytes", predicted_bytes, 1,
                       "pass the footprint's device total, totals(df)['device']")
    nan = float("nan")
    out = {"predicted_bytes": predicted, "measured_peak_bytes": nan, "bytes_limit": nan, "ratio": nan,
           "rel_error": nan, "status": NOT_AVAILABLE, "note": ""}
    if memory_stats is None:
        out["note"] = "Device.memory_stats() returned None (the CPU backend keeps no allocator statistics)"
        return out
    if not isinstance(memory_stats, Mapping):
        raise FootprintError(f"peak_comparison: memory_stats={memory_stats!r} is a {type(memory_stats).__name__}; "
                             "pass the dict Device.memory_stats() returned, or None")
    if "peak_bytes_in_use" not in memory_stats:
        out["note"] = f"memory_stats() has no 'peak_bytes_in_use' (keys: {sorted(memory_stats)})"
        return out
    peak = _count("peak_comparison", "peak_bytes_in_use", memory_stats["peak_bytes_in_use"], 1,
                  "it comes from Device.memory_stats() after the training ran")
    limit = memory_stats.get("bytes_limit")
    out.update(measured_peak_bytes=peak, ratio=peak / predicted, rel_error=(predicted - peak) / peak, status="ok",
               bytes_limit=_count("peak_comparison", "bytes_limit", limit, 1, "from Device.memory_stats()")
               if limit is not None else nan)
    return out
