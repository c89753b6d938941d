"""Sweeps: a grid of training runs, one row per configuration, resumable, safe to interrupt.

Each configuration runs in its own child process (``python -m experiments.runone``), so a crash or
an out-of-memory kill of one configuration becomes a failed row and the sweep goes on; the
sweeping process stays small (flat RSS), and whatever a run leaves behind (Grain's shared memory,
semaphores, worker processes) goes with its process. Children and their loader workers are tied to
their parent with PR_SET_PDEATHSIG, so killing the sweep leaves no orphans.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

import pandas as pd

from experiments import configs, env as env_lib, results
from experiments.configs import ConfigError, check
from experiments.train import TrainConfig

GRID_KEYS = ("model", "source", "image_size", "batch_size", "grad_accum_steps", "precision", "augment_cost",
             "num_workers", "prefetch_buffer_size", "device_buffer_size", "feed")


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    # the grid (comma-separated on the command line)
    model: tuple[str, ...] = ("mlp",)
    source: tuple[str, ...] = ("arrayrecord",)
    image_size: tuple[int, ...] = (32,)
    batch_size: tuple[int, ...] = (64,)
    grad_accum_steps: tuple[int, ...] = (1,)
    precision: tuple[str, ...] = ("fp32",)
    augment_cost: tuple[int, ...] = (2,)
    num_workers: tuple[int, ...] = (0, 1, 2)
    prefetch_buffer_size: tuple[int, ...] = (1, 4)
    device_buffer_size: tuple[int, ...] = (2,)
    feed: tuple[str, ...] = ("none", "double_buffer", "grain_device_put")
    # fixed for every configuration
    width: int = 512
    depth: int = 2
    num_samples: int = 2048
    steps: int = 30
    warmup_steps: int = 3
    resident_steps: int = 15
    seed: int = 0
    grain_stats: bool = True
    cache_dir: str = TrainConfig.cache_dir
    # how the sweep runs
    config_timeout_s: float = 600.0
    isolate: bool = True

    def __post_init__(self):
        for k in GRID_KEYS:
            check(len(getattr(self, k)) > 0, k, getattr(self, k), "the grid needs at least one value")
        check(self.config_timeout_s > 0, "config_timeout_s", self.config_timeout_s, "must be positive")
        self.train_configs()  # every combination must be a valid TrainConfig, before any work

    def train_configs(self) -> list[TrainConfig]:
        base = TrainConfig(width=self.width, depth=self.depth, num_samples=self.num_samples, steps=self.steps,
                           warmup_steps=self.warmup_steps, resident_steps=self.resident_steps, seed=self.seed,
                           grain_stats=self.grain_stats, cache_dir=self.cache_dir)
        out = []
        for combo in itertools.product(*(getattr(self, k) for k in GRID_KEYS)):
            kw = dict(zip(GRID_KEYS, combo))
            try:
                out.append(configs.apply_overrides(base, kw))
            except ConfigError as e:
                raise ConfigError(f"grid combination {kw} is impossible: {e}") from None
        return out


def smoke() -> SweepConfig:
    """A few seconds per configuration: used by the tests."""
    return SweepConfig(source=("ram",), augment_cost=(0,), num_workers=(0,), prefetch_buffer_size=(1,),
                       feed=("none", "double_buffer"), batch_size=(16,), width=32, depth=1, num_samples=64,
                       steps=2, warmup_steps=1, resident_steps=1, image_size=(16,))


def quick() -> SweepConfig:
    """The demo's sweep: 18 configurations, about 3 minutes on a 2-core CPU."""
    return SweepConfig()


def full() -> SweepConfig:
    """A broad sweep over every knob: 768 configurations; expect about 3 hours on a 2-core CPU."""
    return SweepConfig(source=("arrayrecord", "memmap", "ram"), batch_size=(32, 128), precision=("fp32", "bf16"),
                       grad_accum_steps=(1, 2), augment_cost=(0, 4), num_workers=(0, 1, 2, 4),
                       prefetch_buffer_size=(1, 4), device_buffer_size=(1, 2), feed=("none", "double_buffer"),
                       steps=40)


PRESETS = {"smoke": smoke, "quick": quick, "full": full}


# --------------------------------------------------------------------------------------- running

def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def run_one_isolated(cfg: TrainConfig, timeout_s: float) -> dict:
    """Runs one configuration in a child process; returns {'row', 'steps', 'grain_stats'} or an error."""
    with tempfile.TemporaryDirectory(prefix="memsim-run-") as tmp:
        tmp = Path(tmp)
        (tmp / "config.json").write_text(json.dumps(dataclasses.asdict(cfg)))
        proc = subprocess.Popen([sys.executable, "-m", "experiments.runone", str(tmp)], cwd=env_lib.REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            return {"error": f"timed out after {timeout_s:.0f} s (config_timeout_s)"}
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
        if proc.returncode == 0 and (tmp / "row.json").exists():
            out = {"row": json.loads((tmp / "row.json").read_text())}
            for name in ("steps", "grain_stats"):
                p = tmp / f"{name}.csv"
                out[name] = pd.read_csv(p) if p.exists() and p.stat().st_size > 1 else pd.DataFrame()
            return out
        if (tmp / "error.json").exists():
            return {"error": json.loads((tmp / "error.json").read_text())["error"]}
        tail = (err or "").strip().splitlines()[-3:]
        if proc.returncode < 0:
            why = f"killed by {_signal_name(proc.returncode)}"
            if proc.returncode == -signal.SIGKILL:
                why += " (out of memory?)"
            if proc.returncode == -signal.SIGINT:
                raise KeyboardInterrupt
            return {"error": why + (": " + " | ".join(tail) if tail else "")}
        return {"error": f"exit code {proc.returncode}: " + " | ".join(tail)}


def run_one_inline(cfg: TrainConfig) -> dict:
    from experiments import train
    try:
        res = train.run_detailed(cfg)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:  # noqa: BLE001 — recorded as a failed row
        return {"error": f"{type(e).__name__}: {e}"}
    return {"row": res.row.iloc[0].to_dict(), "steps": res.steps, "grain_stats": res.grain_stats}


def _append_frame(out_dir: Path, name: str, df: pd.DataFrame, cid: str) -> None:
    if df is None or not len(df):
        return
    w = results.RowWriter(out_dir, name)
    for rec in df.assign(config_id=cid).to_dict("records"):
        w.append(rec)


def run(cfg: SweepConfig, out_dir: Path, experiment: str = "sweep", progress: bool = True,
        on_config_done=None) -> pd.DataFrame:
    """Runs every configuration of the grid not yet in ``out_dir/rows.csv``; returns all rows.

    ``on_config_done(row)``, if given, is called after each configuration's row is written.
    """
    from tqdm import tqdm

    todo = cfg.train_configs()
    environment = env_lib.environment()
    cfg_path = out_dir / "config.json"
    if not cfg_path.exists():
        results.write_json_atomic(cfg_path, {"experiment": experiment, "sweep": configs.to_flat_dict(cfg),
                                             "grid_keys": list(GRID_KEYS), "num_configs": len(todo),
                                             "environment": environment})
    done = results.done_config_ids(out_dir)
    writer = results.RowWriter(out_dir)
    skipped = sum(results.config_id(configs.to_flat_dict(c)) in done for c in todo)
    bar = tqdm(total=len(todo), initial=skipped, disable=not progress, unit="config", dynamic_ncols=True,
               desc=experiment, file=sys.stderr)
    try:
        for tc in todo:
            flat = configs.to_flat_dict(tc)
            cid = results.config_id(flat)
            if cid in done:
                continue
            bar.set_postfix_str(" ".join(f"{k}={flat[k]}" for k in GRID_KEYS if len(getattr(cfg, k)) > 1))
            t0 = time.perf_counter()
            out = run_one_isolated(tc, cfg.config_timeout_s) if cfg.isolate else run_one_inline(tc)
            if "row" in out:
                row = {"config_id": cid, **out["row"]}
            else:
                row = {"config_id": cid, **flat, **environment, "status": "failed", "error": out["error"],
                       "wall_s": time.perf_counter() - t0}
            writer.append(row)
            _append_frame(out_dir, "steps", out.get("steps"), cid)
            _append_frame(out_dir, "grain_stats", out.get("grain_stats"), cid)
            done.add(cid)
            bar.update(1)
            if on_config_done is not None:
                on_config_done(row)
    finally:
        bar.close()
    return results.read_csv_rows(out_dir / "rows.csv")


def main(cfg: SweepConfig, preset: str, run_id: str | None = None, results_root: str | None = None,
         experiment: str = "sweep") -> int:
    out = results.run_dir(experiment, run_id, results_root, resume=run_id is not None)
    print(f"{experiment}: {len(cfg.train_configs())} configurations → {out}", flush=True)
    try:
        rows = run(cfg, out, experiment)
    except KeyboardInterrupt:
        n = len(results.done_config_ids(out))
        print(f"\ninterrupted: {n} finished configuration(s) kept in {out / 'rows.csv'}; "
              f"rerun with --run_id={out.name} to finish the rest", file=sys.stderr)
        return 130
    ok = rows[rows.status == "ok"] if len(rows) else rows
    print(f"{len(rows)} rows ({len(ok)} ok, {len(rows) - len(ok)} failed) in {out / 'rows.csv'}")
    return 0
