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


def _train_main(cfg, preset: str, run_id: str | None = None, results_root: str | None = None) -> int:
    from experiments import configs, env, results, train

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


def _env_presets():
    from experiments import envcheck
    return envcheck.PRESETS


def _env_main(cfg, preset):
    from experiments import envcheck
    return envcheck.main(cfg, preset)


EXPERIMENTS: dict[str, Experiment] = {
    "train": Experiment("one measured training run: loader → device feed → jitted step",
                        _Lazy(_train_presets), "quick", _train_main),
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
    "study": Experiment("the main job: the quick sweep plus a readable report with figures",
                        _Lazy(_study_presets), "quick", _study_main, _SWEEP_OPTIONS, _SWEEP_HELP),
    "env": Experiment("check this environment: platform, devices, memory kinds, package versions against the "
                      "tested ranges, what is missing (exit 1 if something required is)",
                      _Lazy(_env_presets), "default", _env_main, run_options=(), extra_help=()),
}
