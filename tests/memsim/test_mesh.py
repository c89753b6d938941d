"""Simulations spread over devices: the same rows on one device, on 4 devices and on 2 processes.

Multi-device runs need the XLA flag (4 forced CPU devices) or ``jax.distributed`` set up before
JAX starts, so they run in child processes; the single-device reference runs here. Blocks are
made one tile each (``BLOCK_LANES = 32``) so that tiny grids still take several kernel calls and
tile counts that the device count does not divide (padding that is dropped).
"""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path
from unittest import mock

import jax
import numpy as np
import pandas as pd
import pytest
from jax.sharding import Mesh

from memsim import maxplus
from memsim.knobs import ConfigError
from memsim.multihost import many_hosts
from memsim.pipeline import PipelineConfig, simulate_traces, sweep

ROOT = Path(__file__).resolve().parents[2]

# six tiles of 2 lanes: the host and device buffers are larger than LANE_RING_MAX, so each pair
# of them is a tile of its own; the two worker counts share it (read per lane)
GRID = {"num_workers": [0, 2], "prefetch_buffer_size": [20, 40, 70], "device_buffer_size": [20, 40]}
HOSTS = (1, 3, 8, 5, 2)  # five coupled tiles of 32 lanes
VARIABLE = PipelineConfig(num_workers=2, per_worker_buffer_size=1, prefetch_buffer_size=0, device_buffer_size=1,
                          batch_size=8, transform_s=9e-4, transform_dist="lognormal:2.0", compute_s=0.004,
                          compute_dist="deterministic")  # the slowest host sets the pace


def run_cases(mesh) -> dict:
    """The simulations compared across meshes, and for each kernel call (number of devices of its
    output, this process's devices holding a shard, tiles per shard)."""
    calls = []
    kernel = maxplus._run  # noqa: SLF001 — observed, not replaced: which devices each call used

    def observed(*args, **kwargs):
        out = kernel(*args, **kwargs)
        ends = out[1]
        calls.append((ends.sharding.num_devices, sorted(s.device.id for s in ends.addressable_shards),
                      sorted({s.data.shape[0] for s in ends.addressable_shards})))
        return out

    with mock.patch.object(maxplus, "BLOCK_LANES", 32), mock.patch.object(maxplus, "_run", observed):
        rows = sweep(GRID, n_items=40, seed=3, mesh=mesh)
        hosts = many_hosts(VARIABLE, hosts=HOSTS, n_items=40, seed=1, mesh=mesh)
    return {"sweep": rows, "hosts": hosts, "calls": calls}


def assert_same(got: dict, want: dict) -> None:
    pd.testing.assert_frame_equal(got["sweep"], want["sweep"], check_exact=True)
    pd.testing.assert_frame_equal(got["hosts"], want["hosts"], check_exact=True)


def _env(devices: int) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


FOUR_DEVICES = """
import pickle, sys
import jax, numpy as np
from jax.sharding import Mesh
from memsim import maxplus
from memsim.knobs import ConfigError
from tests.memsim.test_mesh import run_cases
assert len(jax.devices()) == 4, jax.devices()
res = run_cases(maxplus.config_mesh())
try:
    maxplus.check_mesh(Mesh(np.array(jax.devices()).reshape(2, 2), ("hosts", "configs")))
    res["error"] = None
except ConfigError as e:
    res["error"] = str(e)
pickle.dump(res, open(sys.argv[1], "wb"))
"""

TWO_PROCESSES = """
import pickle, sys
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
pid, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid)
from memsim import maxplus
from tests.memsim.test_mesh import run_cases
assert jax.process_count() == 2 and len(jax.devices()) == 4 and len(jax.local_devices()) == 2
res = run_cases(maxplus.config_mesh(jax.devices()))
res["local"] = sorted(d.id for d in jax.local_devices())
pickle.dump(res, open(out, "wb"))
"""


class Child:
    """A child process writing its results to ``out`` and its output to a log file."""

    def __init__(self, script: str, args: list, out: Path, devices: int):
        self.out, self.log = out, out.with_suffix(".log")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", script, *map(str, args)], cwd=ROOT,
                                         env=_env(devices), stdout=log, stderr=subprocess.STDOUT)

    def result(self, timeout: float = 120) -> dict:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        log = self.log.read_text(errors="replace")
        assert self.proc.returncode == 0, f"child exited {self.proc.returncode}:\n{log[-4000:]}"
        return pickle.loads(self.out.read_bytes())


@pytest.fixture(scope="module")
def children(tmp_path_factory):
    """The 4-device child and the two processes, started together (they run while the
    single-device reference is computed here)."""
    tmp = tmp_path_factory.mktemp("mesh")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kids = {"four": [Child(FOUR_DEVICES, [tmp / "four.pkl"], tmp / "four.pkl", devices=4)],
            "two": [Child(TWO_PROCESSES, [i, port, tmp / f"p{i}.pkl"], tmp / f"p{i}.pkl", devices=2)
                    for i in range(2)]}
    yield kids
    for k in kids["four"] + kids["two"]:
        if k.proc.poll() is None:
            k.proc.kill()
            k.proc.wait()


@pytest.fixture(scope="module")
def one_device(children):
    return run_cases(maxplus.config_mesh(jax.devices()[:1]))


def test_single_device_reference_is_random_and_uses_one_device(one_device):
    # the comparisons below are not vacuous: stochastic rows that differ from row to row
    assert (one_device["sweep"].samples_per_s_stderr > 0).all()
    assert one_device["sweep"].samples_per_s.nunique() == len(GRID["num_workers"]) * 6
    assert one_device["hosts"].efficiency.nunique() == len(HOSTS) and (one_device["hosts"].data_wait_frac > 0).all()
    assert {c[0] for c in one_device["calls"]} == {1}
    # blocks of 32 lanes: the 6 sweep tiles in one call (8 slots), the 5 host tiles one per call
    assert [c[2] for c in one_device["calls"]] == [[8]] + [[1]] * 5


def test_four_devices_give_the_rows_of_one_device(one_device, children):
    res = children["four"][0].result()
    assert_same(res, one_device)
    # every call spread over the 4 devices: the 6 sweep tiles in one call of 2 per device, the 5
    # host tiles in 2 calls of one per device (the padding, 2 and 3 tiles, dropped)
    assert res["calls"] == [(4, [0, 1, 2, 3], [2])] + [(4, [0, 1, 2, 3], [1])] * 2
    assert res["error"].startswith("mesh axes {'hosts': 2}:") and "\n" not in res["error"]


def test_two_processes_give_the_rows_of_one_device(one_device, children):
    for child in children["two"]:
        res = child.result()
        assert_same(res, one_device)  # every process holds every row
        # a global mesh of 4 devices; each process computed the shards of its own 2
        assert {c[0] for c in res["calls"]} == {4}
        assert all(c[1] == res["local"] for c in res["calls"]), (res["calls"], res["local"])
        assert len(res["calls"]) == 3


def test_the_default_mesh_is_every_local_device_and_gives_the_same_rows(one_device):
    assert maxplus.config_mesh().devices.tolist() == jax.local_devices()
    with mock.patch.object(maxplus, "BLOCK_LANES", 32):
        pd.testing.assert_frame_equal(sweep(GRID, n_items=40, seed=3), one_device["sweep"], check_exact=True)


BAD_MESHES = {  # built in the test: importing this module must not start JAX's backends
    "a string": (lambda: "cpu", r"^mesh='cpu': expected a jax.sharding.Mesh with an axis named 'configs'"),
    "a device list": (jax.devices, r"^mesh=\[CpuDevice"),
    "another axis name": (lambda: Mesh(np.array(jax.devices()[:1]), ("batch",)),
                          r"^mesh axis_names=\('batch',\): no axis named 'configs'"),
}


@pytest.mark.parametrize("what", BAD_MESHES)
def test_a_mesh_without_the_configs_axis_is_refused(what):
    make, match = BAD_MESHES[what]
    mesh = make()
    for call in (lambda: sweep(GRID, n_items=40, mesh=mesh), lambda: many_hosts(VARIABLE, hosts=[1], mesh=mesh),
                 lambda: simulate_traces({"num_workers": [1]}, n_items=4, mesh=mesh)):
        with pytest.raises(ConfigError, match=match) as e:
            call()
        assert "\n" not in str(e.value)


def test_bad_device_lists():
    with pytest.raises(ConfigError, match=r"^devices=\[\]"):
        maxplus.config_mesh([])
    with pytest.raises(ConfigError, match=r"^devices contains 'cpu:0'"):
        maxplus.config_mesh(["cpu:0"])
    d = jax.devices()[0]
    with pytest.raises(ConfigError, match="a device appears more than once"):
        maxplus.config_mesh([d, d])


def test_block_plan_pads_to_whole_calls():
    assert maxplus.block_plan(6, 32, 4, block_lanes=32) == (1, 2)   # 8 slots, 2 dropped
    assert maxplus.block_plan(5, 32, 4, block_lanes=2048) == (2, 1)  # one call, every device used
    assert maxplus.block_plan(1, 32, 4, block_lanes=2048) == (1, 1)
    assert maxplus.block_plan(1000, 32, 1, block_lanes=2048) == (64, 16)
