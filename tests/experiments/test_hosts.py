"""The straggler check's orchestration, with a fake multi-process launch and fake references."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from experiments import hosts
from experiments.configs import ConfigError
from experiments.results import read_csv_rows
from experiments.train import TrainConfig


def fake_reference(calls):
    def ref(tc: TrainConfig, cores, timeout_s):
        calls.append((tc.batch_size, tc.augment_cost, cores))
        aug = 1e-4 * (1 + tc.augment_cost)
        row = {"status": "ok", "error": "", "samples_per_s": 1.0 / aug, "num_workers": tc.num_workers,
               "per_worker_buffer_size": tc.per_worker_buffer_size, "prefetch_buffer_size": tc.prefetch_buffer_size,
               "feed": tc.feed, "cpu_buffer_size": tc.cpu_buffer_size, "device_buffer_size": tc.device_buffer_size,
               "batch_size": tc.batch_size, "grad_accum_steps": 1, "precision": "fp32", "augment_cost": tc.augment_cost,
               "image_size": tc.image_size, "channels": 3, "decode_s_per_sample": 0.0, "augment_s_per_sample": aug,
               "compute_time_median_s": 1e-3, "step_time_median_s": 2e-3, "step_time_p90_s": 2.2e-3}
        steps = pd.DataFrame({"phase": "fed", "warmup": False, "step": range(8), "compute_s": 1e-3,
                              "t_decode": 0.0, "t_augment": aug * tc.batch_size * np.linspace(0.95, 1.05, 8)})
        return {"row": row, "steps": steps}
    return ref


@dataclasses.dataclass
class FakeMulti:
    row: pd.DataFrame
    processes: pd.DataFrame


def fake_launch(calls, fail_n=()):
    def launch(cfg, num_processes, *, per_process=None, timeout_s=None):
        calls.append((cfg.batch_size, num_processes, per_process))
        if num_processes in fail_n:
            raise RuntimeError(f"process 1 of {num_processes} exited with code 1")
        sps = 500.0 * (1 + 0.01 * len(calls))
        procs = pd.DataFrame({"process_id": range(num_processes), "samples_per_s": sps / num_processes,
                              "step_s_median": 0.01, "data_wait_s_median": 0.0, "data_wait_frac": 0.0})
        return FakeMulti(pd.DataFrame([{"samples_per_s": sps, "num_processes": num_processes, "status": "ok"}]),
                         procs)
    return launch


def fake_probe(calls, seconds=2e-3):
    """An all-reduce of ``seconds`` per size (times N / 2), recorded in ``calls``."""
    def probe(num_processes, sizes_bytes, *, repeats, timeout_s):
        calls.append((num_processes, sizes_bytes, repeats))
        t = seconds * num_processes / 2
        return pd.DataFrame({"num_processes": num_processes,
                             "size_bytes": [sum(b) if isinstance(b, list) else b for b in sizes_bytes],
                             "seconds_median": t, "seconds_p90": 1.5 * t, "repeats": repeats})
    return probe


CFG = dataclasses.replace(hosts.smoke(), hosts=(1, 2, 4), repeats=2, sim_items=200)


@pytest.fixture(autouse=True)
def two_cpus(monkeypatch):
    monkeypatch.setattr(hosts, "available_cpus", lambda: [0, 1])


def test_rows_predictions_and_resume(tmp_path):
    refs, launches, probes = [], [], []
    table = hosts.run(CFG, tmp_path, launch=fake_launch(launches), reference=fake_reference(refs),
                      probe=fake_probe(probes), progress=False)
    rows = read_csv_rows(tmp_path / "rows.csv")
    # per round: N=1 slow; N=2 and N=4 normal and slow; three launches; a probe for N=2 and N=4
    assert len(rows) == 2 * 10 and (rows.role == "multi").sum() == 6 and (rows.role == "collective").sum() == 4
    # the probe reduces the step's operands (each float32 gradient leaf, and the loss), among N processes
    params, leaves = hosts.gradient_leaves(CFG)
    assert params == 32 * 16 * 16 * 3 + 32 + 32 * 10 + 10  # smoke: mlp, width 32, depth 1
    assert sorted(leaves) == sorted(4 * n for n in (32 * 16 * 16 * 3, 32, 32 * 10, 10, 1))
    nbytes = 4 * params + 4
    assert sorted(probes) == [(n, [leaves, nbytes], CFG.collective_repeats) for n in (2, 2, 4, 4)]
    col = rows[rows.role == "collective"]
    assert (col.size_bytes == nbytes).all() and (col.params == params).all() and (col.allreduce_operands == 5).all()
    assert len(read_csv_rows(tmp_path / "collective.csv")) == 4 * 2
    assert {(b, n) for b, n, _ in launches} == {(32, 1), (32, 2), (32, 4)}  # global batch on every launch
    assert all(per == {n - 1: {"augment_cost": 8}} for _, n, per in launches)  # the last process is slowed
    # references at the per-process batch, pinned to the core share (1 core for N >= 2 on 2 CPUs)
    assert {(b, a, c) for b, a, c in refs} == {(32, 8, (0, 1)), (16, 0, (0,)), (16, 8, (0,)), (8, 0, (0,)),
                                               (8, 8, (0,))}
    assert (tmp_path / "hosts.csv").exists() and (tmp_path / "steps.csv").exists()
    assert len(read_csv_rows(tmp_path / "processes.csv")) == 2 * (1 + 2 + 4)
    assert table.num_processes.tolist() == [1, 2, 4]
    assert table.slowed_process.tolist() == [0, 1, 3] and set(table.slowed_how) == {"augment_cost=8"}
    assert (table.repeats == 2).all() and (table.measured_lo <= table.measured_hi).all()
    np.testing.assert_allclose(table.rel_error, table.predicted_samples_per_s / table.measured_samples_per_s - 1)
    # the slowed process (augment 9e-4 s per sample, no workers) sets the pace: N × b/N / (b/N · 9e-4),
    # its CPU times doubled for N = 4 (half a core each, from a reference on one core)
    assert table.cpu_dilation.tolist() == [1.0, 1.0, 2.0]
    # (the all-reduce, 2 and 4 ms, hides behind the slowed transform: 14.4 and 14.4 ms a step)
    np.testing.assert_allclose(table.predicted_samples_per_s, [1 / 9e-4, 2 / 9e-4, 4 / 9e-4 / 2], rtol=0.03)
    np.testing.assert_allclose(table.predicted_no_allreduce_samples_per_s, table.predicted_samples_per_s, rtol=0.03)
    assert table.allreduce_s.tolist() == [0.0, 2e-3, 4e-3]
    assert "N" in hosts.summary(table) and "4.00ms" in hosts.summary(table)
    # a rerun of the same folder runs nothing again
    hosts.run(CFG, tmp_path, launch=fake_launch(launches), reference=fake_reference(refs), probe=fake_probe(probes),
              progress=False)
    assert len(launches) == 6 and len(refs) == 10 and len(probes) == 4


def test_the_measured_allreduce_enters_the_step(tmp_path):
    # a compute-bound run: 50 ms of all-reduce among 2 processes beside a 1 ms step and no transform
    cfg = dataclasses.replace(CFG, hosts=(1, 2), repeats=1, slow_augment_cost=0)

    def ref(tc, cores, timeout_s):
        out = fake_reference([])(tc, cores, timeout_s)
        out["row"].update(augment_s_per_sample=1e-7, samples_per_s=tc.batch_size / 1e-3)
        out["steps"]["t_augment"] = 1e-7 * tc.batch_size * np.linspace(0.99, 1.01, 8)
        return out
    table = hosts.run(cfg, tmp_path, launch=fake_launch([]), reference=ref, probe=fake_probe([], seconds=0.05),
                      progress=False).set_index("num_processes")
    assert table.allreduce_s.tolist() == [0.0, 0.05]
    # N=2: 32 samples a step of 1 ms + 50 ms; without the all-reduce 32 per 1 ms
    assert table.loc[2, "predicted_samples_per_s"] == pytest.approx(32 / 0.051, rel=0.02)
    assert table.loc[2, "predicted_no_allreduce_samples_per_s"] == pytest.approx(32 / 1e-3, rel=0.05)
    assert table.loc[1, "predicted_samples_per_s"] == table.loc[1, "predicted_no_allreduce_samples_per_s"]


def test_a_failed_launch_is_a_row_and_the_prediction_still_stands(tmp_path):
    cfg = dataclasses.replace(CFG, hosts=(1, 2), repeats=1)
    table = hosts.run(cfg, tmp_path, launch=fake_launch([], fail_n=(2,)), reference=fake_reference([]),
                      probe=fake_probe([]), progress=False)
    rows = read_csv_rows(tmp_path / "rows.csv")
    bad = rows[rows.status == "failed"]
    assert len(bad) == 1 and "process 1 of 2 exited" in bad.error.iloc[0] and bad.num_processes.iloc[0] == 2
    two = table.set_index("num_processes").loc[2]
    assert two.repeats == 0 and np.isnan(two.measured_samples_per_s) and two.predicted_samples_per_s > 0


def test_missing_reference_gives_no_prediction(tmp_path):
    def ref(tc, cores, timeout_s):
        return {"error": "killed by SIGKILL"} if tc.augment_cost == 8 else fake_reference([])(tc, cores, timeout_s)
    cfg = dataclasses.replace(CFG, hosts=(2,), repeats=1)
    table = hosts.run(cfg, tmp_path, launch=fake_launch([]), reference=ref, probe=fake_probe([]), progress=False)
    assert np.isnan(table.predicted_samples_per_s.iloc[0])
    assert "no ok single-process slow reference for N=2" in table.prediction_error.iloc[0]


def test_a_failed_probe_is_a_row_and_gives_no_prediction_with_the_term(tmp_path):
    def probe(num_processes, sizes_bytes, *, repeats, timeout_s):
        raise RuntimeError(f"process 1 of {num_processes} was killed by SIGKILL")
    cfg = dataclasses.replace(CFG, hosts=(2,), repeats=1)
    table = hosts.run(cfg, tmp_path, launch=fake_launch([]), reference=fake_reference([]), probe=probe,
                      progress=False)
    rows = read_csv_rows(tmp_path / "rows.csv")
    bad = rows[rows.status == "failed"]
    assert len(bad) == 1 and bad.role.iloc[0] == "collective" and "SIGKILL" in bad.error.iloc[0]
    assert np.isnan(table.predicted_samples_per_s.iloc[0]) and table.predicted_no_allreduce_samples_per_s.iloc[0] > 0
    assert "no ok collective probe for N=2" in table.prediction_error.iloc[0]


def test_bad_config():
    with pytest.raises(ConfigError, match="hosts=\\(1, 3\\): every number of processes must divide batch_size"):
        dataclasses.replace(CFG, hosts=(1, 3))
    with pytest.raises(ConfigError, match="nothing would be slowed"):
        dataclasses.replace(CFG, slow_augment_cost=None)
    with pytest.raises(ConfigError, match="slow_process=-2"):
        dataclasses.replace(CFG, slow_process=-2)
    assert hosts.HostsConfig(slow_process=5).slowed_id(4) == -1  # an id beyond N slows no process there
    # a launch the runtime would refuse is refused here, before any reference runs
    with pytest.raises(ConfigError, match="the run of N=2 processes is impossible: feed='grain_device_put'"):
        dataclasses.replace(CFG, feed="grain_device_put")
