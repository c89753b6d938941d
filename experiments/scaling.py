"""The scaling experiment: the Transformer family trained on the standard-library text for several
token budgets, through the same Grain loader and device feed as every measured run.

``python -m experiments scaling --preset quick|full`` writes one row per (model size, token budget)
to ``results/scaling/<run_id>/rows.csv``: params and non-embedding params, tokens seen, FLOPs
(6·N·D and XLA's ``cost_analysis`` × steps), final train and validation loss (nats per byte),
wall and compile time. Rows are appended as each point finishes; ``--run_id`` resumes (the run
loop sweeps share, ``experiments.runloop``).

Each point is its own training run with its own learning-rate schedule (linear warm-up, cosine
decay to ``final_lr_frac`` of the peak at the end of *its* budget), as in Hoffmann et al. 2022:
a budget's loss read off a longer run's schedule would be too high. Budgets share the data order
(same shuffle seed), so a longer budget sees a superset of a shorter one's windows; no budget
repeats a window (the corpus holds about 500k windows of 64 bytes; the run says if one would).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
import pandas as pd

from experiments import configs, env as env_lib, results, runloop
from experiments.configs import check


@dataclasses.dataclass(frozen=True)
class ScalingConfig:
    # the model family: sizes are (widths[i], depths[i]) pairs
    widths: tuple[int, ...] = (24, 32, 48, 64, 96, 128)
    depths: tuple[int, ...] = (1, 1, 2, 2, 3, 4)
    num_heads: int = 4
    seq_len: int = 64
    precision: Literal["fp32", "bf16"] = "fp32"
    # data: tokens per point (bytes of text); each becomes budget // (batch_size · seq_len) steps
    token_budgets: tuple[int, ...] = (262_144, 524_288, 1_048_576, 2_097_152)
    batch_size: int = 32
    # optimisation: AdamW, linear warm-up then cosine decay over each point's own steps
    learning_rate: float = 3e-3
    warmup_frac: float = 0.05
    final_lr_frac: float = 0.1
    b2: float = 0.95
    weight_decay: float = 0.01
    train_loss_frac: float = 0.05  # train_loss = mean loss over this final fraction of the steps
    val_windows: int = 512
    # loader and feed (the measured path's knobs)
    num_workers: int = 0
    prefetch_buffer_size: int = 2
    feed: Literal["none", "double_buffer", "grain_device_put"] = "double_buffer"
    cpu_buffer_size: int = 4
    device_buffer_size: int = 2
    seed: int = 0
    data_timeout_s: float = 120.0

    def __post_init__(self):
        check(len(self.widths) == len(self.depths), "depths", self.depths,
              f"must pair with widths {self.widths}: give one depth per width")
        check(len(self.widths) >= 1, "widths", self.widths, "needs at least one model size")
        check(len(self.token_budgets) >= 1, "token_budgets", self.token_budgets, "needs at least one budget")
        for w in self.widths:
            check(w > 0 and w % self.num_heads == 0, "widths", self.widths,
                  f"every width must be a positive multiple of num_heads ({self.num_heads}); {w} is not")
        for d in self.depths:
            check(d >= 1, "depths", self.depths, "every depth must be >= 1")
        check(self.batch_size > 0, "batch_size", self.batch_size, "must be positive")
        for b in self.token_budgets:
            check(b >= 10 * self.batch_size * self.seq_len, "token_budgets", self.token_budgets,
                  f"{b} tokens is under 10 steps of batch_size·seq_len = {self.batch_size * self.seq_len}")
        check(math.isfinite(self.learning_rate) and self.learning_rate > 0, "learning_rate", self.learning_rate,
              "must be a positive finite number")
        check(0 <= self.warmup_frac < 1, "warmup_frac", self.warmup_frac, "must be in [0, 1)")
        check(0 <= self.final_lr_frac <= 1, "final_lr_frac", self.final_lr_frac, "must be in [0, 1]")
        check(0 < self.train_loss_frac <= 1, "train_loss_frac", self.train_loss_frac, "must be in (0, 1]")
        check(self.val_windows >= 1, "val_windows", self.val_windows, "must be >= 1")
        self.train_config(self.widths[0], self.depths[0])  # validates the loader and feed knobs

    def train_config(self, width: int, depth: int, steps: int = 1):
        from experiments.train import TrainConfig
        kw = dict(model="transformer", width=width, depth=depth, num_heads=self.num_heads, seq_len=self.seq_len,
                  precision=self.precision, source="ram", batch_size=self.batch_size,
                  num_workers=self.num_workers, prefetch_buffer_size=self.prefetch_buffer_size, feed=self.feed,
                  cpu_buffer_size=self.cpu_buffer_size, device_buffer_size=self.device_buffer_size,
                  learning_rate=self.learning_rate, weight_decay=self.weight_decay, min_steps=max(steps, 2),
                  seed=self.seed, data_timeout_s=self.data_timeout_s, grain_stats=False)
        return TrainConfig(**kw)

    def points(self) -> list[dict]:
        """Every (width, depth, token_budget) with its step count, smallest compute first."""
        pts = []
        for w, d in zip(self.widths, self.depths):
            for b in self.token_budgets:
                steps = b // (self.batch_size * self.seq_len)
                pts.append({"width": w, "depth": d, "token_budget": b, "steps": steps})
        return pts


def smoke() -> ScalingConfig:
    """Seconds: used by the tests (two sizes, two budgets)."""
    return ScalingConfig(widths=(16, 32), depths=(1, 1), token_budgets=(10_240, 20_480), batch_size=16,
                         seq_len=64, val_windows=32)


def quick() -> ScalingConfig:
    """Five sizes (≈21k to ≈0.9M params: 1.6 decades) × three budgets (20k to 82k tokens, 10 to 40
    steps): the study runs it inside the demo's 8 minutes. With 33k–131k tokens it took 103 s on a
    2-core CPU on a slow day, 55 s of them training (one compilation per size; 148 s when each point
    compiled its own step), and 65k–262k took 2 min 16 s on a fast day and 3 min 29 s on a slow one."""
    return ScalingConfig(widths=(24, 32, 64, 96, 128), depths=(1, 1, 2, 3, 4),
                         token_budgets=(20_480, 40_960, 81_920), val_windows=256)


def study() -> ScalingConfig:
    """The study's (``make demo``): ``quick`` without its width-96 size, so four sizes (≈21k to ≈0.9M
    params, the same 1.6 decades) × the same three budgets. Why: on the 2-core Xeon on 2026-11-29, a
    day a fixed numpy workload ran 20–25% slower than in its morning, ``make demo`` with ``quick``
    took 432–484 s (the limit is 8 minutes), its scaling run 45–51 s, the width-96 size 12.5 s of
    them (``results/cpu-2core/holdout/pair104``)."""
    q = quick()
    widths, depths = zip(*[(w, d) for w, d in zip(q.widths, q.depths) if w != 96])
    return dataclasses.replace(q, widths=widths, depths=depths)


def full() -> ScalingConfig:
    """Six sizes (≈21k to ≈0.9M params) × four budgets (0.26M to 2.1M tokens); 22 minutes measured on
    a 2-core CPU that other work was sharing (load ≈ 3.5), so expect 15–22 minutes on an idle one; the
    largest model at the largest budget is about 3 minutes of it."""
    return ScalingConfig()


PRESETS = {"smoke": smoke, "quick": quick, "study": study, "full": full}


# ------------------------------------------------------------------------------------------ running

def schedule(cfg: ScalingConfig, steps: int):
    """optax's warm-up + cosine schedule of a point of ``steps`` steps (the reference ``adamw`` checks
    ``optimizer`` against)."""
    import optax
    warmup = _warmup_steps(cfg, steps)
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0 if warmup else cfg.learning_rate, peak_value=cfg.learning_rate, warmup_steps=warmup,
        decay_steps=steps, end_value=cfg.learning_rate * cfg.final_lr_frac)


def _warmup_steps(cfg: ScalingConfig, steps: int) -> int:
    return max(1, round(cfg.warmup_frac * steps)) if cfg.warmup_frac > 0 else 0


class ScheduleState(NamedTuple):
    count: "jax.Array"   # steps taken
    warmup: "jax.Array"  # this point's warm-up steps
    steps: "jax.Array"   # this point's steps (the end of the cosine decay)


def optimizer(cfg: ScalingConfig, steps: int):
    """AdamW with this point's warm-up + cosine learning rate, its step counts held in the optimizer
    state: the same ``optax.adamw(schedule(cfg, steps), ...)`` update, but one compiled step serves
    every budget of a model size.

    Why not optax's schedule: it takes ``warmup_steps`` and ``decay_steps`` as Python numbers, which
    become constants of the compiled step, so each budget compiled its own (3.3 to 4.5 s a point on
    the 2-core CPU: 54 of the quick scaling run's 140 s went to 15 compilations; now 5). The schedule
    below is optax's formula (``linear_schedule`` joined to ``cosine_decay_schedule``) on the state's
    counts; ``tests/experiments/test_scaling.py`` checks it against ``optax.adamw`` step by step."""
    import jax
    import jax.numpy as jnp
    import optax

    peak, alpha = cfg.learning_rate, cfg.final_lr_frac
    init_value = 0.0 if _warmup_steps(cfg, steps) else peak

    def lr(state: ScheduleState):
        count = state.count.astype(jnp.float32)
        warmup, total = state.warmup.astype(jnp.float32), state.steps.astype(jnp.float32)
        rise = init_value + (peak - init_value) * jnp.clip(count / jnp.maximum(warmup, 1.0), 0.0, 1.0)
        t = jnp.minimum(count - warmup, total - warmup)
        decay = peak * ((1 - alpha) * 0.5 * (1 + jnp.cos(jnp.pi * t / (total - warmup))) + alpha)
        return jnp.where(count < warmup, rise, decay)

    def init(params):
        del params
        return ScheduleState(jnp.zeros([], jnp.int32), jnp.asarray(_warmup_steps(cfg, steps), jnp.int32),
                             jnp.asarray(steps, jnp.int32))

    def update(updates, state, params=None):
        del params
        rate = lr(state)
        return (jax.tree.map(lambda u: jnp.asarray(-rate, u.dtype) * u, updates),
                ScheduleState(state.count + 1, state.warmup, state.steps))

    return optax.chain(optax.scale_by_adam(b2=cfg.b2), optax.add_decayed_weights(cfg.weight_decay),
                       optax.GradientTransformation(init, update))


def validation_arrays(cfg: ScalingConfig) -> tuple[np.ndarray, np.ndarray]:
    """``val_windows`` windows spread evenly over the validation split (tokens, targets), int32."""
    from experiments import data as data_lib
    src = data_lib.TextWindows.from_split("val", cfg.seq_len)
    check(cfg.val_windows <= len(src), "val_windows", cfg.val_windows,
          f"the validation split holds only {len(src)} windows of {cfg.seq_len} bytes")
    idx = np.linspace(0, len(src) - 1, cfg.val_windows).round().astype(int)
    items = [src[int(i)] for i in idx]
    return np.stack([it["tokens"] for it in items]), np.stack([it["targets"] for it in items])


def _evaluate(step, val: tuple[np.ndarray, np.ndarray], batch_size: int, sharding, compiled: dict,
              key) -> tuple[float, int]:
    """Mean next-byte cross-entropy (nats) over the validation windows, in equal batches; and the
    number of windows it covered. The compiled loss is kept in ``compiled[key]`` for the next point
    of the same size."""
    import jax
    from experiments.feed import put
    tokens, targets = val
    n = len(tokens)
    bs = min(batch_size, n)
    params, rest, _ = step.state
    total, count = 0.0, 0
    for s in range(0, n - n % bs, bs):  # equal batches: one compilation; the tail is dropped
        b = put({"tokens": tokens[s:s + bs], "targets": targets[s:s + bs]}, sharding)
        if key not in compiled:
            compiled[key] = jax.jit(step.loss_fn).lower(params, rest, b["tokens"], b["targets"]).compile()
        total += float(jax.device_get(compiled[key](params, rest, b["tokens"], b["targets"]))) * bs
        count += bs
    return total / count, count


def run_point(cfg: ScalingConfig, width: int, depth: int, token_budget: int,
              val: tuple[np.ndarray, np.ndarray] | None = None, compiled: dict | None = None) -> dict:
    """Trains one model size for one token budget; returns its row (without the environment).

    ``compiled``: executables by model size, shared by the points of a run. The first point of a size
    compiles its train and evaluation steps and leaves them there; the others run them (their step
    counts are optimizer state, ``optimizer``), and their ``compile_s`` is the time to find them."""
    import jax
    from experiments import train
    from experiments.feed import batch_sharding, make_feed
    from experiments.loader import build_dataset
    from experiments.models import make_model, param_counts

    steps = token_budget // (cfg.batch_size * cfg.seq_len)
    tcfg = cfg.train_config(width, depth, steps)
    val = validation_arrays(cfg) if val is None else val
    compiled = {} if compiled is None else compiled
    key = (width, depth)
    t_start = time.perf_counter()
    devices = jax.local_devices()
    sharding = batch_sharding(devices)
    model = make_model(tcfg.model_config(), seed=cfg.seed)
    counts = param_counts(model)
    step = train.TrainStep(model, tcfg, tx=optimizer(cfg, steps))
    step.replicate(sharding)
    del model
    lcfg = tcfg.loader_config()
    host_ds = build_dataset(lcfg, stage_timing=False)
    feed = make_feed(cfg.feed, host_ds, sharding, cpu_buffer_size=cfg.cpu_buffer_size,
                     device_buffer_size=cfg.device_buffer_size, timeout_s=cfg.data_timeout_s)
    losses, data_wait = [], 0.0
    try:
        batch, _ = next(feed)
        t0 = time.perf_counter()
        if key in compiled:
            step.compiled = compiled[key]
        else:
            compiled[key] = step.compile(batch)
        compile_s = time.perf_counter() - t0
        cost = compiled[key].cost_analysis() or {}
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        t_train = time.perf_counter()
        pending = []
        for i in range(steps):
            if i > 0:
                t0 = time.perf_counter()
                batch, _ = next(feed)
                data_wait += time.perf_counter() - t0
            with jax.transfer_guard("disallow"):
                pending.append(step(batch))
            if len(pending) == 25 or i == steps - 1:  # read losses in groups: one sync per 25 steps
                for v in jax.device_get(pending):
                    train.check_finite(float(v), len(losses))
                    losses.append(float(v))
                pending = []
        train_s = time.perf_counter() - t_train
    finally:
        feed.close()
    val_loss, val_count = _evaluate(step, val, max(cfg.batch_size, 64), sharding, compiled, key + ("eval",))
    train.check_finite(val_loss, steps)
    tail = max(1, round(cfg.train_loss_frac * steps))
    tokens = steps * cfg.batch_size * cfg.seq_len
    xla_flops = float(cost.get("flops", float("nan")))
    return {
        "width": width, "depth": depth, "token_budget": token_budget,
        "params": counts["params"], "non_embedding_params": counts["non_embedding_params"],
        "steps": steps, "tokens": tokens,
        "epochs": tokens / (len(host_windows(cfg)) * cfg.seq_len),
        "flops_6nd": 6.0 * counts["params"] * tokens,
        "flops_xla": xla_flops * steps,
        "xla_flops_per_step": xla_flops,
        "train_loss": float(np.mean(losses[-tail:])),
        "train_loss_last": losses[-1],
        "first_loss": losses[0],
        "val_loss": val_loss,
        "val_bits_per_byte": val_loss / math.log(2),
        "val_tokens": val_count * cfg.seq_len,
        "compile_s": compile_s,
        "train_s": train_s,
        "tokens_per_s": tokens / train_s,
        "data_wait_frac": data_wait / train_s,
        "wall_s": time.perf_counter() - t_start,
    }


def host_windows(cfg: ScalingConfig):
    from experiments import data as data_lib
    return data_lib.TextWindows.from_split("train", cfg.seq_len)


def _point_flat(cfg: ScalingConfig, pt: dict) -> dict:
    flat = {k: v for k, v in configs.to_flat_dict(cfg).items() if k not in ("widths", "depths", "token_budgets")}
    return {**flat, "width": pt["width"], "depth": pt["depth"], "token_budget": pt["token_budget"]}


def run(cfg: ScalingConfig, out_dir: Path, progress: bool = True) -> pd.DataFrame:
    """Trains every point not yet in ``out_dir/rows.csv`` (appending each row as it finishes:
    ``runloop.run_jobs``); returns all rows. A point that fails becomes a row with status 'failed'
    and the error; a rerun skips it as it skips the finished ones."""
    environment = env_lib.environment()
    pts = cfg.points()
    header = {"experiment": "scaling", "config": configs.to_flat_dict(cfg), "num_points": len(pts),
              "environment": environment}
    windows = len(host_windows(cfg))
    most = max(cfg.token_budgets) // (cfg.batch_size * cfg.seq_len) * cfg.batch_size
    if most > windows:
        print(f"note: the largest budget reads {most} windows of a {windows}-window corpus: "
              f"{most / windows:.2f} epochs, so some windows repeat", file=sys.stderr)
    val = validation_arrays(cfg)
    compiled: dict = {}  # executables by model size: one compilation per size (run_point)
    jobs = [runloop.Job(results.config_id(_point_flat(cfg, p)), 0,
                        f"width={p['width']} depth={p['depth']} tokens={p['token_budget']:,}", p) for p in pts]

    def work(job: runloop.Job) -> runloop.Outcome:
        pt = job.payload
        row = {"status": "ok", "error": "", **run_point(cfg, pt["width"], pt["depth"], pt["token_budget"], val,
                                                             compiled)}
        return runloop.Outcome({"config_id": job.config_id, **_point_flat(cfg, pt), **environment, **row})

    def failed_row(job: runloop.Job, error: str, wall_s: float) -> dict:
        pt = job.payload
        return {"config_id": job.config_id, **_point_flat(cfg, pt), **environment, "status": "failed",
                "error": error, **pt, "wall_s": wall_s}

    return runloop.run_jobs(out_dir, jobs, work, failed_row, header=header, desc="scaling", unit="point",
                            progress=progress)


def main(cfg: ScalingConfig, preset: str, run_id: str | None = None, results_root: str | None = None) -> int:
    out = results.run_dir("scaling", run_id, results_root, resume=run_id is not None)
    print(f"scaling: {len(cfg.points())} points ({len(cfg.widths)} sizes × {len(cfg.token_budgets)} budgets) → {out}",
          flush=True)
    try:
        rows = run(cfg, out)
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished points kept in {out / 'rows.csv'}; rerun with --run_id={out.name}",
              file=sys.stderr)
        return 130
    ok = rows[rows.status == "ok"]
    cols = ["width", "depth", "params", "tokens", "flops_6nd", "train_loss", "val_loss", "tokens_per_s", "wall_s"]
    if len(ok):
        print(ok[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"{len(rows)} rows ({len(ok)} ok, {len(rows) - len(ok)} failed) in {out / 'rows.csv'}")
    print(f"fit: python -m analysis scaling {out / 'rows.csv'} --n params --d tokens --loss val_loss")
    return 0 if len(ok) == len(rows) else 1
