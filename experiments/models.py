"""Flax NNX model families sized by width and depth: MLP and CNN (images), decoder-only Transformer (text).

``precision='bf16'`` computes in bfloat16 with float32 parameters (the usual mixed precision:
``dtype=bfloat16, param_dtype=float32``); logits are cast to float32 for the loss.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from experiments.configs import check
from memsim.knobs import MODELS, Model, Precision

FAMILIES = MODELS


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    family: Model = "mlp"
    width: int = 256
    depth: int = 2
    num_heads: int = 4
    precision: Precision = "fp32"
    # image families
    image_size: int = 32
    channels: int = 3
    num_classes: int = 10
    # transformer
    vocab_size: int = 256
    seq_len: int = 128

    def __post_init__(self):
        check(self.family in FAMILIES, "model", self.family, f"expected one of {', '.join(FAMILIES)}")
        check(self.width > 0, "width", self.width, "must be positive")
        check(self.depth > 0, "depth", self.depth, "must be positive")
        check(self.precision in ("fp32", "bf16"), "precision", self.precision, "expected 'fp32' or 'bf16'")
        if self.family == "transformer":
            check(self.num_heads > 0 and self.width % self.num_heads == 0, "num_heads", self.num_heads,
                  f"must divide width ({self.width})")
            check(self.seq_len > 0, "seq_len", self.seq_len, "must be positive")

    @property
    def dtype(self):
        return jnp.bfloat16 if self.precision == "bf16" else jnp.float32


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        d_in = cfg.image_size * cfg.image_size * cfg.channels
        dims = [d_in] + [cfg.width] * cfg.depth
        kw = dict(dtype=cfg.dtype, param_dtype=jnp.float32, rngs=rngs)
        self.layers = nnx.List([nnx.Linear(a, b, **kw) for a, b in zip(dims[:-1], dims[1:])])
        self.head = nnx.Linear(dims[-1], cfg.num_classes, **kw)
        self.dtype = cfg.dtype

    def __call__(self, x):
        x = x.reshape(x.shape[0], -1).astype(self.dtype)
        for layer in self.layers:
            x = jax.nn.relu(layer(x))
        return self.head(x)


class CNN(nnx.Module):
    """``depth`` blocks of 3×3 conv + ReLU (+ 2×2 average pool while the map is larger than 4×4),
    channels ``width·2^i`` capped at 4·width, then global average pooling and a linear head."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        kw = dict(dtype=cfg.dtype, param_dtype=jnp.float32, rngs=rngs)
        chans = [cfg.channels] + [min(cfg.width * 2 ** i, 4 * cfg.width) for i in range(cfg.depth)]
        self.convs = nnx.List([nnx.Conv(a, b, (3, 3), **kw) for a, b in zip(chans[:-1], chans[1:])])
        self.head = nnx.Linear(chans[-1], cfg.num_classes, **kw)
        self.dtype = cfg.dtype

    def __call__(self, x):
        x = x.astype(self.dtype)
        for conv in self.convs:
            x = jax.nn.relu(conv(x))
            if x.shape[1] > 4:
                x = nnx.avg_pool(x, (2, 2), strides=(2, 2))
        return self.head(x.mean(axis=(1, 2)))


class Block(nnx.Module):
    """Pre-LayerNorm decoder block: causal multi-head attention, then a 4× GELU MLP."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        kw = dict(dtype=cfg.dtype, param_dtype=jnp.float32, rngs=rngs)
        d = cfg.width
        self.ln1 = nnx.LayerNorm(d, **kw)
        self.attn = nnx.MultiHeadAttention(num_heads=cfg.num_heads, in_features=d, decode=False, **kw)
        self.ln2 = nnx.LayerNorm(d, **kw)
        self.fc1 = nnx.Linear(d, 4 * d, **kw)
        self.fc2 = nnx.Linear(4 * d, d, **kw)

    def __call__(self, x, mask):
        x = x + self.attn(self.ln1(x), mask=mask)
        return x + self.fc2(jax.nn.gelu(self.fc1(self.ln2(x))))


class Transformer(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        kw = dict(dtype=cfg.dtype, param_dtype=jnp.float32, rngs=rngs)
        self.embed = nnx.Embed(cfg.vocab_size, cfg.width, **kw)
        self.pos = nnx.Embed(cfg.seq_len, cfg.width, **kw)
        self.blocks = nnx.List([Block(cfg, rngs=rngs) for _ in range(cfg.depth)])
        self.ln_f = nnx.LayerNorm(cfg.width, **kw)
        self.head = nnx.Linear(cfg.width, cfg.vocab_size, **kw)

    def __call__(self, tokens):
        t = tokens.shape[1]
        x = self.embed(tokens) + self.pos(jnp.arange(t))[None]
        mask = nnx.make_causal_mask(tokens)
        for blk in self.blocks:
            x = blk(x, mask)
        return self.head(self.ln_f(x))


def make_model(cfg: ModelConfig, seed: int = 0) -> nnx.Module:
    rngs = nnx.Rngs(seed)
    return {"mlp": MLP, "cnn": CNN, "transformer": Transformer}[cfg.family](cfg, rngs=rngs)


def param_counts(model: nnx.Module) -> dict[str, int]:
    """Total parameters and non-embedding parameters (token and position embeddings excluded)."""
    params = nnx.state(model, nnx.Param)
    total = sum(int(x.size) for x in jax.tree.leaves(params))
    emb = 0
    for name in ("embed", "pos"):
        sub = getattr(model, name, None)
        if sub is not None:
            emb += sum(int(x.size) for x in jax.tree.leaves(nnx.state(sub, nnx.Param)))
    return {"params": total, "non_embedding_params": total - emb}
