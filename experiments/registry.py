"""The experiments the CLI knows: name → presets, a runner and its help."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Experiment:
    help: str
    presets: dict[str, Callable]
    default_preset: str
    main: Callable
    run_options: tuple[str, ...] = ("run_id", "results_root")
    extra_help: tuple[str, ...] = (
        "",
        "run options:",
        "  --run_id=ID            resume (or name) results/<experiment>/ID; default: a new id",
        "  --results_root=DIR     where results go (default: ./results)",
    )


def _train_main(cfg, preset: str, run_id: str | None = None, results_root: str | None = None,
                coordinator: str | None = None, process_id: str | None = None,
                init_timeout_s: str | None = None) -> int:
    from experiments import configs, env, results, train

    if coordinator is not None or process_id is not None or cfg.num_processes > 1 or _cluster():
        return _train_multi(cfg, preset, run_id, results_root, coordinator, process_id, init_timeout_s)
    train.check_runtime(cfg)
    out = results.run_dir("train", run_id, results_root, resume=run_id is not None)
    results.write_json_atomic(out / "config.json", {"experiment": "train", "preset": preset,
                                                    "config": configs.to_flat_dict(cfg),
                                                    "environment": env.environment()})
    res = train.run_detailed(cfg)
    results.RowWriter(out).append(res.row.iloc[0].to_dict())
    res.steps.to_csv(out / "steps.csv", index=False)
    res.grain_stats.to_csv(out / "grain_stats.csv", index=False)
    print(train.summary(res.row.iloc[0]))
    print(f"rows: {out / 'rows.csv'}")
    return 0


def _cluster() -> str | None:
    from experiments import distributed
    return distributed.cluster_env()


def _train_multi(cfg, preset, run_id, results_root, coordinator, process_id, init_timeout_s) -> int:
    """``train`` over several processes: a local launch (--num_processes=N), or one process of a
    cluster (--coordinator=HOST:PORT --process_id=I, or a scheduler's environment)."""
    import sys
    from experiments import configs, distributed, env, results, train
    from experiments.configs import ConfigError, check

    timeout = configs.coerce("init_timeout_s", init_timeout_s, float) if init_timeout_s is not None \
        else distributed.INIT_TIMEOUT_S
    check(timeout > 0, "init_timeout_s", timeout, "must be a positive number of seconds")
    pid = configs.coerce("process_id", process_id, int) if process_id is not None else None
    if coordinator is not None and coordinator != "auto":
        distributed.parse_coordinator(coordinator)
    joining = pid is not None or coordinator == "auto" or (coordinator is None and _cluster())
    if pid is not None:
        check(coordinator is not None, "process_id", pid,
              "joining a cluster needs --coordinator=HOST:PORT (process 0's address) as well")
        check(0 <= pid < cfg.num_processes, "process_id", pid,
              f"must be in 0..{cfg.num_processes - 1} (num_processes={cfg.num_processes})")
    elif coordinator not in (None, "auto"):
        check(cfg.num_processes > 1, "coordinator", coordinator,
              "a local launch needs --num_processes > 1; to join a cluster give --process_id too")
    header = {"experiment": "train", "preset": preset, "config": configs.to_flat_dict(cfg)}
    if not joining:
        out = results.run_dir("train", run_id, results_root, resume=run_id is not None)
        results.write_json_atomic(out / "config.json", header)
        print(f"train: {cfg.num_processes} processes on this machine → {out}", file=sys.stderr, flush=True)
        try:
            multi = distributed.launch(cfg, cfg.num_processes, results_dir=out,
                                       coordinator=coordinator, init_timeout_s=timeout)
        except distributed.DistributedError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("\ninterrupted: every process was stopped", file=sys.stderr)
            return 130
        print(train.summary(multi.row.iloc[0]))
        print(distributed.summary(multi))
        print(f"rows: {out / 'rows.csv'} (per process: {out / 'processes.csv'})")
        return 0
    # one process of a cluster: process 0 writes the results
    try:
        res, multi = distributed.join(cfg, None if coordinator == "auto" else coordinator, pid, timeout)
        if multi is None:
            print(train.summary(res.row.iloc[0]))
            return 0
        out = results.run_dir("train", run_id, results_root, resume=run_id is not None)
        results.write_json_atomic(out / "config.json", {**header, "environment": env.environment()})
        distributed.write_results(out, multi)
        print(train.summary(multi.row.iloc[0]))
        print(distributed.summary(multi))
        print(f"rows: {out / 'rows.csv'} (per process: {out / 'processes.csv'})")
        return 0
    except ConfigError:
        raise
    except BaseException as e:  # noqa: BLE001 — one line, then out without jax.distributed's exit barrier
        print(f"error: process {pid if pid is not None else '?'}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
              file=sys.stderr, flush=True)
        import os
        os._exit(130 if isinstance(e, KeyboardInterrupt) else 1)


def _train_presets():
    from experiments import train
    return train.PRESETS


class _Lazy(dict):
    """Presets imported on first use, so ``--help`` and bad-key errors do not import jax."""

    def __init__(self, factory):
        super().__init__()
        self._factory = factory

    def _load(self):
        if not super().__len__():
            self.update(self._factory())

    def __getitem__(self, k):
        self._load()
        return super().__getitem__(k)

    def __iter__(self):
        self._load()
        return super().__iter__()

    def __contains__(self, k):
        self._load()
        return super().__contains__(k)

    def __len__(self):
        self._load()
        return super().__len__()

    def keys(self):
        self._load()
        return super().keys()


def _sweep_presets():
    from experiments import sweep
    return sweep.PRESETS


def _sweep_main(cfg, preset, run_id=None, results_root=None, retry_failed=False):
    from experiments import sweep
    return sweep.main(cfg, preset, run_id=run_id, results_root=results_root, retry_failed=retry_failed)


def _study_presets():
    from experiments import study
    return study.PRESETS


def _study_main(cfg, preset, run_id=None, results_root=None, retry_failed=False):
    from experiments import study
    return study.main(cfg, preset, run_id=run_id, results_root=results_root, retry_failed=retry_failed)


def _probe_presets():
    from experiments import probes
    return probes.PRESETS


def _probe_main(cfg, preset, run_id=None, results_root=None):
    from experiments import probes
    return probes.main(cfg, preset, run_id=run_id, results_root=results_root)


def _scaling_presets():
    from experiments import scaling
    return scaling.PRESETS


def _scaling_main(cfg, preset, run_id=None, results_root=None):
    from experiments import scaling
    return scaling.main(cfg, preset, run_id=run_id, results_root=results_root)


def _hosts_presets():
    from experiments import hosts
    return hosts.PRESETS


def _hosts_main(cfg, preset, run_id=None, results_root=None):
    from experiments import hosts
    return hosts.main(cfg, preset, run_id=run_id, results_root=results_root)


_SWEEP_OPTIONS = ("run_id", "results_root", "retry_failed")
_SWEEP_HELP = Experiment.extra_help + (
    "  --retry_failed         with --run_id: run again the (configuration, repeat) pairs whose rows all",
    "                         failed (default: a resumed sweep skips every pair that has a row)",
)


_TRAIN_OPTIONS = ("run_id", "results_root", "coordinator", "process_id", "init_timeout_s")
_TRAIN_HELP = Experiment.extra_help + (
    "  --num_processes=N      (a knob) N data-parallel processes on this machine, each on its share of the",
    "                         cores; batch_size is the global batch (batch_size / N per process)",
    "  --coordinator=H:P      with --process_id: join a cluster whose process 0 listens at H:P; without it:",
    "                         the port a local launch uses (default: a free one); 'auto': JAX's own",
    "                         detection (SLURM, Open MPI, ...; also used when their environment is set)",
    "  --process_id=I         this process's id in 0..num_processes-1 (with --coordinator)",
    "  --init_timeout_s=S     every process must join within S seconds (default 60)",
)


def _rules_presets():
    from experiments import rules
    return rules.PRESETS


def _rules_main(cfg, preset, run_id=None, results_root=None):
    from experiments import rules
    return rules.main(cfg, preset, run_id=run_id, results_root=results_root)


def _components_presets():
    from experiments import components
    return components.PRESETS


def _components_main(cfg, preset, run_id=None, results_root=None):
    from experiments import components
    return components.main(cfg, preset, run_id=run_id, results_root=results_root)


def _recommend_presets():
    from experiments import recommend
    return recommend.PRESETS


def _recommend_main(cfg, preset, run_id=None, results_root=None):
    from experiments import recommend
    return recommend.main(cfg, preset, run_id=run_id, results_root=results_root)


def _env_presets():
    from experiments import envcheck
    return envcheck.PRESETS


def _env_main(cfg, preset):
    from experiments import envcheck
    return envcheck.main(cfg, preset)


EXPERIMENTS: dict[str, Experiment] = {
    "train": Experiment("one measured training run: loader → device feed → jitted step; "
                        "--num_processes=N: N data-parallel JAX processes",
                        _Lazy(_train_presets), "quick", _train_main, _TRAIN_OPTIONS, _TRAIN_HELP),
    "sweep": Experiment("a grid of training runs, resumable, one row per configuration",
                        _Lazy(_sweep_presets), "quick", _sweep_main, _SWEEP_OPTIONS, _SWEEP_HELP),
    "probe": Experiment("measure this machine's tiers and links (reads, copies, transfers, matmul); "
                        "raw rows, fitted by 'python -m analysis links DIR'",
                        _Lazy(_probe_presets), "quick", _probe_main),
    "scaling": Experiment("train the Transformer family on stdlib text for several token budgets: a loss table",
                          _Lazy(_scaling_presets), "quick", _scaling_main),
    "hosts": Experiment("the straggler check: N = 1, 2, 4 data-parallel processes, one slowed on purpose, "
                        "measured vs predicted from single-process references",
                        _Lazy(_hosts_presets), "quick", _hosts_main),
    "rules": Experiment("the folklore, measured: each rule of thumb (workers, pinned memory, prefetch, bf16, "
                        "gradient accumulation, tiers, mmap, device_put copies, input-bound steps) tested on this "
                        "machine; verdicts by 'python -m analysis rules DIR'",
                        _Lazy(_rules_presets), "quick", _rules_main),
    "components": Experiment("the cost model's parts over many shapes: the training step alone (on a batch already "
                             "on the device) and the loader alone, resumable; 'costmodel fit' reads them",
                             _Lazy(_components_presets), "quick", _components_main),
    "recommend": Experiment("the cost model's recommendation (cheapest loader setup within 5% of the best predicted) "
                            "measured beside the best predicted and grain.experimental.pick_performance_config's "
                            "choice; --model_file=MODEL.json", _Lazy(_recommend_presets), "quick", _recommend_main),
    "study": Experiment("the main job: the quick sweep plus a readable report with figures",
                        _Lazy(_study_presets), "quick", _study_main, _SWEEP_OPTIONS, _SWEEP_HELP),
    "env": Experiment("check this environment: platform, devices, memory kinds, package versions against the "
                      "tested ranges, what is missing (exit 1 if something required is)",
                      _Lazy(_env_presets), "default", _env_main, run_options=(), extra_help=()),
}
