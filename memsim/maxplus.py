"""Max-plus recurrences of the staged input pipeline, jit-compiled and vmapped over configurations.

Items are loader batches, one per optimizer step (as in the measured path, where the step splits
the batch into ``grad_accum_steps`` micro-batches), numbered j = 0, 1, ...
For item j the simulator computes, in order (all times in seconds, 0 = start, ``max`` over
constraints, ``x[j - L]`` = 0 for ``j < L``):

========================  =======================================================================
worker free  ``wf[j]``     ``wq[j - k]`` (worker ``j mod k`` has put its previous batch in its
                           queue; k = num_workers, Grain hands batches to workers round-robin);
                           with no worker processes the loader thread is free at ``taken[j-1]``,
                           and when that thread is also the consumer's thread (no host buffer) it
                           waits for the consumer too (``tfree[j]``).
read start   ``ls[j]``     ``max(wf[j] + latency, le[j-1])``: the per-record latency overlaps
                           between workers, the link's bandwidth is shared (one server, served in
                           item order).
read end     ``le[j]``     ``ls[j] + R[j]``
transformed  ``wc[j]``     ``le[j] + X[j]``
worker out   ``wq[j]``     ``max(wc[j], taken[j - p·k])``: the worker's own output queue holds
                           ``p = per_worker_buffer_size`` batches (blocking after service).
taken        ``taken[j]``  ``max(wq[j], taken[j-1], ts[j - B_H])``: batches leave the workers in
                           order into the host buffer of ``B_H`` batches; with ``B_H = 0`` the hand
                           over is a rendezvous with the consumer: ``max(wq[j], taken[j-1], tfree[j])``.
consumer free ``tfree[j]`` ``td[j-1]`` (a feed thread), or ``max(td[j-1], cd[j-1])`` when the
                           transfer runs inside the step loop (``feed='none'``).
transfer     ``ts, tc``    ``ts[j] = max(taken[j], tfree[j])``, ``tc[j] = ts[j] + T[j]``
on device    ``td[j]``     ``max(tc[j], cs[j - B_D])`` (device buffer of ``B_D`` batches); with
                           ``B_D = 0``: ``max(tc[j], cd[j-1])``.
compute      ``cs, cd``    ``cs[j] = max(td[j], cd[j-1])`` (for many hosts: the max of ``td`` over
                           hosts), ``cd[j] = cs[j] + C[j]`` (C: a whole optimizer step, all its
                           micro-batches and the update).
========================  =======================================================================

Every buffer blocks its producer when full (blocking after service), and every lag is a ring of
past times. Small rings (up to ``LANE_RING_MAX`` slots) are read per lane; for larger ones,
configurations that share the lag are packed into tiles of M lanes, so the read is one contiguous
slice per tile. ``jax.vmap`` runs the item step over tiles inside ``jax.lax.scan`` over the items
of a chunk (service times are drawn in bulk per chunk) and an outer scan over chunks. Per chunk
the kernel returns sums of busy, blocked and buffered times and the time the chunk's last item
finished computing; :mod:`memsim.pipeline` turns them into rates, fractions, occupancies and
batch-means errors. Blocks of about 2048 lanes keep one item's working set in the CPU caches.

Devices: the tiles are spread over a :class:`jax.sharding.Mesh` with an axis named
:data:`CONFIG_AXIS` (``"configs"``; :func:`config_mesh` builds one, by default over every local
device). Each call of the kernel takes one block per device, as arrays sharded over that axis
(``NamedSharding``), and ``jax.shard_map`` runs the same per-block program on every device with
no communication between them, so a configuration's numbers do not depend on the mesh. A mesh
spanning several processes (``jax.distributed``) works the same way: every process builds the
same inputs, computes the blocks of its own devices, and the results are gathered onto every
process at the end.

Cost on the 2-vCPU development VM (CPU time per configuration-item): about 3.5 ns for
deterministic stages with wide tiles, plus 3–4 ns per lognormal stage, about 1.7 ns for a ring
read per lane by a gather (under 1 ns by selects for rings of up to 8 slots); tiles narrower than
a few hundred lanes cost more per lane. ``python -m benchmarks.pipeline`` measures the whole sweep.

References: Baccelli, Cohen, Olsder & Quadrat, *Synchronization and Linearity* (1992), ch. 7
(max-plus models of queues in tandem with blocking); Dallery & Gershwin, *Manufacturing flow
line systems: a review of models and analytical results*, Queueing Systems 12 (1992).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from memsim import distributions as dists
from memsim.knobs import ConfigError

CONFIG_AXIS = "configs"  # the mesh axis that configurations (tiles) are spread over

ACC_NAMES = (
    "busy_compute",      # sum of C (incl. optimizer update)
    "busy_transfer",     # sum of T
    "busy_workers",      # sum of latency + R + X (a worker is occupied while reading and transforming)
    "busy_link",         # sum of R
    "sojourn_worker_queues",  # taken - wq
    "sojourn_host_buffer",    # ts - taken
    "sojourn_device_buffer",  # cs - td
    "blocked_workers",   # worker held a finished batch: wq - wc (or taken - wc without workers)
    "blocked_transfer",  # td - tc
)
# Sums the kernel always accumulates; the busy sums of deterministic stages are known in closed form.
_TIME_ACC = ACC_NAMES[4:]
TRACE_NAMES = ("wf", "ls", "le", "wc", "wq", "taken", "ts", "tc", "td", "cs", "cd",
               "lat", "R", "X", "T", "C")


def kernel_acc_names(samplers: tuple) -> tuple:
    """Names of the running sums the kernel returns for these (static) samplers."""
    stoch = [s != "det" for s in samplers]  # read, transform, transfer, compute
    busy = []
    if stoch[3]:
        busy.append("busy_compute")
    if stoch[2]:
        busy.append("busy_transfer")
    if stoch[0] or stoch[1]:
        busy.append("busy_workers")
    if stoch[0]:
        busy.append("busy_link")
    return tuple(busy) + _TIME_ACC


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Lanes:
    """Per-lane numbers (one lane = one configuration, or one host of one), shape (..., M)."""

    stream: jax.Array   # uint32 random stream id
    lat: jax.Array      # per-batch read latency, seconds (deterministic)
    mR: jax.Array       # mean link time per batch
    pR: jax.Array       # read sampler parameter
    mX: jax.Array       # mean transform time per batch
    pX: jax.Array
    mT: jax.Array       # mean host->device transfer time per batch
    pT: jax.Array
    mC: jax.Array       # mean compute time per step (all micro-batches)
    pC: jax.Array
    upd: jax.Array      # optimizer update seconds per step (deterministic)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Tile:
    """Lags and switches per lane, shape (..., M). A ring read per tile uses lane 0's lag, so the
    planner puts lanes with equal lags for such rings (see ``lane_rings``) in one tile."""

    lag_w: jax.Array    # k (workers)
    lag_q: jax.Array    # p * k (per-worker queues)
    lag_h: jax.Array    # B_H (host buffer)
    lag_d: jax.Array    # B_D (device buffer)
    no_workers: jax.Array   # bool: loader runs in a thread of the main process
    merged: jax.Array       # bool: ... and that thread is the consumer's (no host buffer)
    host0: jax.Array        # bool: B_H == 0
    dev0: jax.Array         # bool: B_D == 0
    feed_none: jax.Array    # bool: transfer inside the step loop


def _draws(lanes: Lanes, js, tables, *, samplers, seed_key, dtype, has_update, coupled):
    """Service times of items ``js`` (shape (n,)) for every lane: (R, X, T, C), each (n, G, M).

    Drawn in bulk for a chunk of items, outside the serial recurrence, where XLA evaluates the
    logarithms and exponentials at about twice the speed. Deterministic stages return their mean
    (shape (1, G, M)).
    """
    seed_key = seed_key.astype(jnp.uint32)
    out = []
    for stage, (mean, param) in enumerate(((lanes.mR, lanes.pR), (lanes.mX, lanes.pX),
                                           (lanes.mT, lanes.pT), (lanes.mC, lanes.pC))):
        s = samplers[stage]
        if s == "det":
            out.append(mean[None])
            continue
        keys = jax.vmap(lambda j, st=stage: dists.item_key(j, st, seed_key))(js)[:, None, None]
        out.append(mean[None] * dists.draw(s, lanes.stream[None], keys, param[None], tables[stage], dtype))
    r, x, t, c = out
    if has_update:
        c = c + lanes.upd[None]
    if coupled:  # one synchronous step for all hosts: the compute time of each tile's lane 0
        c = jnp.broadcast_to(c[..., :1], c.shape[:-1] + (lanes.stream.shape[-1],))
    return r, x, t, c


def _step(tile: Tile, lat, state, lagged, service, *, coupled, acc_names):
    """One item for one tile of M lanes; see the module docstring for the recurrences.

    ``state`` holds the previous item's ``le, taken, td, cd``; ``lagged`` holds ``wq[j-k],
    taken[j-p·k], ts[j-B_H], cs[j-B_D]`` read from the rings; ``service`` the item's
    ``(R, X, T, C)``. Returns the new state, the values to write into the rings, the terms to
    accumulate (``acc_names``) and the item's times (for traces).
    """
    le_p, taken_p, td_p, cd_p = state
    wq_lag, taken_lag, ts_lag, cs_lag = lagged
    r, x, t, c = service
    tfree = jnp.where(tile.feed_none, jnp.maximum(td_p, cd_p), td_p)
    wf = jnp.where(tile.no_workers, taken_p, wq_lag)
    wf = jnp.where(tile.merged, jnp.maximum(wf, tfree), wf)
    ls = jnp.maximum(wf + lat, le_p)
    le = ls + r
    wc = le + x
    wq = jnp.where(tile.no_workers, wc, jnp.maximum(wc, taken_lag))
    a = jnp.maximum(wq, taken_p)
    taken = jnp.where(tile.host0, jnp.maximum(a, tfree), jnp.maximum(a, ts_lag))
    ts = jnp.maximum(taken, tfree)
    tc = ts + t
    td = jnp.where(tile.dev0, jnp.maximum(tc, cd_p), jnp.maximum(tc, cs_lag))
    ready = jnp.broadcast_to(jnp.max(td), td.shape) if coupled else td
    cs = jnp.maximum(ready, cd_p)
    cd = cs + c
    wdep = jnp.where(tile.no_workers, taken, wq)
    zero = jnp.zeros_like(wq)
    all_terms = {
        "busy_compute": c, "busy_transfer": t, "busy_workers": lat + r + x, "busy_link": r,
        "sojourn_worker_queues": jnp.where(tile.no_workers, zero, taken - wq),
        "sojourn_host_buffer": ts - taken, "sojourn_device_buffer": cs - td,
        "blocked_workers": wdep - wc, "blocked_transfer": td - tc,
    }
    terms = tuple(all_terms[k] for k in acc_names)
    times = (wf, ls, le, wc, wq, taken, ts, tc, td, cs, cd)
    return (le, taken, td, cd), (wq, taken, ts, cs), terms, times


LANE_RING_MAX = 16  # rings up to this size are read per lane
MIN_RING = 8
SELECT_MAX = 8  # per-lane rings up to this size are read by selects, larger ones by a gather


def _ring_read(ring, j, lag, per_lane: bool):
    """Item j - lag from a ring (G, R, M); lag has shape (G, M).

    Per tile (``per_lane=False``): every lane of tile g has lane 0's lag; one contiguous slice per
    tile. Per lane: an element gather (any lag per lane; used for small rings, so that lanes that
    differ only in small buffers share tiles).
    """
    size = ring.shape[1]
    if per_lane:
        idx = jnp.remainder(j - lag, size)
        if size <= SELECT_MAX:  # a few selects beat a gather
            out = ring[:, 0, :]
            for r in range(1, size):
                out = jnp.where(idx == r, ring[:, r, :], out)
            return out
        return jnp.take_along_axis(ring, idx[:, None, :], axis=1)[:, 0, :]
    idx = jnp.remainder(j - lag[:, 0], size)
    return jnp.take_along_axis(ring, idx[:, None, None], axis=1)[:, 0, :]


def _ring_write(ring, j, value):
    return jax.lax.dynamic_update_index_in_dim(ring, value, jnp.remainder(j, ring.shape[1]), 1)


_FLOAT_LANES = ("lat", "mR", "pR", "mX", "pX", "mT", "pT", "mC", "pC", "upd")
_INT_TILE = ("lag_w", "lag_q", "lag_h", "lag_d")
_BOOL_TILE = ("no_workers", "merged", "host0", "dev0", "feed_none")


@functools.partial(jax.jit, static_argnames=("mesh", "samplers", "n_chunks", "chunk", "rings", "coupled",
                                             "trace", "dtype", "has_update"))
def _run(lane_f, stream, tile_i, tile_b, tables, seed_key, *, mesh, samplers, n_chunks, chunk, rings,
         coupled, trace, dtype, has_update=True):
    """:func:`_kernel` on every device of ``mesh``, each on its own block of tiles.

    The tile axis of every input and output is split over ``CONFIG_AXIS``; the tables and the
    seed are replicated. There is no communication between devices (a tile's lanes stay on one
    device, so coupled hosts stay together too).
    """
    body = functools.partial(_kernel, samplers=samplers, n_chunks=n_chunks, chunk=chunk, rings=rings,
                             coupled=coupled, trace=trace, dtype=dtype, has_update=has_update)
    split = PartitionSpec(None, CONFIG_AXIS)  # (fields, tiles, lanes)
    tiles = PartitionSpec(CONFIG_AXIS)        # (tiles, ...)
    rep = PartitionSpec()
    # check_vma=False: the scans start from constants and carry per-device values, which is
    # what each block computes on its own (no collective is used)
    return jax.shard_map(body, mesh=mesh, in_specs=(split, tiles, split, split, rep, rep),
                         out_specs=tiles, check_vma=False)(lane_f, stream, tile_i, tile_b, tables, seed_key)


def _kernel(lane_f, stream, tile_i, tile_b, tables, seed_key, *, samplers, n_chunks, chunk, rings, coupled,
            trace, dtype, has_update=True):
    # rings: ((size, per_lane), ...) for the four rings
    """All tiles of one block: ``jax.vmap`` of :func:`_step` over tiles inside ``lax.scan`` over items.

    Inputs are packed (float lane fields (F, G, M), streams (G, M), lags
    (4, G, M) and switches (5, G, M)) so that a block travels in few transfers. Service
    times are drawn per chunk of items in bulk; the serial scan then reads one row per item. The
    rings of past times stay outside the vmap, shaped (tiles, ring size, lanes), so writing item
    j is one dynamic-update-slice and reading a lag is one contiguous slice per tile.

    The first item never waits (every lagged time is 0), so the first compute start is
    ``latency + R + X + T`` of item 0 (the max over hosts when coupled).
    """
    lanes = Lanes(stream=stream, **dict(zip(_FLOAT_LANES, lane_f)))
    tile = Tile(**dict(zip(_INT_TILE, tile_i)), **dict(zip(_BOOL_TILE, tile_b)))
    g, m = lanes.stream.shape
    acc_names = kernel_acc_names(samplers)
    step = jax.vmap(functools.partial(_step, coupled=coupled, acc_names=acc_names),
                    in_axes=(0, 0, 0, 0, 0))
    draws = functools.partial(_draws, lanes, tables=tables, samplers=samplers, seed_key=seed_key,
                              dtype=dtype, has_update=has_update, coupled=coupled)
    lags = (tile.lag_w, tile.lag_q, tile.lag_h, tile.lag_d)
    z = jnp.zeros((g, m), dtype)

    def item(carry, xs):
        ring_list, state, acc = carry
        j, service = xs
        lagged = tuple(_ring_read(rg, j, lag, per_lane) for rg, lag, (_, per_lane)
                       in zip(ring_list, lags, rings))
        state, writes, terms, times = step(tile, lanes.lat, state, lagged, service)
        ring_list = tuple(_ring_write(rg, j, v) for rg, v in zip(ring_list, writes))
        acc = acc + jnp.stack(terms, axis=1)  # one fused update of every running sum
        return (ring_list, state, acc), (times if trace else None)

    def one_chunk(carry, c_idx):
        ring_list, state, _ = carry
        js = c_idx * chunk + jnp.arange(chunk, dtype=jnp.int32)
        svc = draws(js)  # each (chunk, G, M), or (1, G, M) for a deterministic stage
        scanned = tuple(v.shape[0] == chunk for v in svc)

        def body(carry, xs):
            j, vals = xs
            it = iter(vals)
            return item(carry, (j, tuple(next(it) if sc else v[0] for v, sc in zip(svc, scanned))))

        xs = (js, tuple(v for v, sc in zip(svc, scanned) if sc))
        acc0 = jnp.zeros((g, len(acc_names), m), dtype)
        (ring_list, state, acc), tr = jax.lax.scan(body, (ring_list, state, acc0), xs)
        first = lanes.lat + svc[0][0] + svc[1][0] + svc[2][0]
        if trace:
            full = lambda v: jnp.broadcast_to(v, (chunk, g, m))  # noqa: E731
            tr = tr + (full(lanes.lat),) + tuple(full(v) for v in svc)
        return (ring_list, state, acc), (acc, state[3], first, tr)

    ring_list = tuple(jnp.zeros((g, size, m), dtype) for size, _ in rings)
    init = (ring_list, (z, z, z, z), jnp.zeros((g, len(acc_names), m), dtype))
    (_, state, _), (accs, ends, firsts, tr) = jax.lax.scan(
        one_chunk, init, jnp.arange(n_chunks, dtype=jnp.int32))
    first = firsts[0]
    if coupled:
        first = jnp.broadcast_to(jnp.max(first, axis=-1, keepdims=True), first.shape)
    # accs: (chunks, G, n_acc, M) -> (G, M, chunks, n_acc); ends: (chunks, G, M) -> (G, M, chunks)
    accs = jnp.transpose(accs, (1, 3, 0, 2))
    ends = jnp.transpose(ends, (1, 2, 0))
    if trace:  # (chunks, chunk, G, M) -> (G, chunks, chunk, M)
        tr = tuple(jnp.transpose(v, (2, 0, 1, 3)) for v in tr)
    return accs, ends, first, tr


def ring_layout(tile: dict) -> tuple:
    """((size, per_lane), ...) for the four rings, from the largest lag of each.

    Sizes are powers of two, at least ``MIN_RING`` (so that small sweeps share few compiled
    layouts); rings up to ``LANE_RING_MAX`` slots are read per lane.
    """
    out = []
    for k in _INT_TILE:
        size = max(pow2(int(np.max(tile[k]))), MIN_RING)
        out.append((size, size <= LANE_RING_MAX))
    return tuple(out)


def pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for ``n <= 1``); ring and block sizes.

    >>> pow2(1), pow2(5), pow2(8)
    (1, 8, 8)
    """
    return 1 << max(0, int(n - 1).bit_length())


def compiled_variants() -> int:
    """How many compiled versions of the simulation kernel this process holds (one per shape and
    static option seen so far): sweeps of the same shape must not add one."""
    return _run._cache_size()  # noqa: SLF001 — jax.jit's cache size; no public accessor


BLOCK_LANES = 2048  # lanes per device and kernel call: one item's working set stays in the CPU caches


def config_mesh(devices=None) -> Mesh:
    """A one-axis mesh (axis :data:`CONFIG_AXIS`) to spread configurations over.

    Args:
        devices: the devices, in order (default: every local device of the default backend,
            which is what the simulation uses when it is given no mesh). In a multi-process
            runtime pass ``jax.devices()`` to spread one sweep over every process's devices.

    Returns:
        ``jax.sharding.Mesh`` of shape ``{"configs": len(devices)}``.

    Example:
        >>> mesh = config_mesh(jax.devices()[:1])
        >>> mesh.axis_names, mesh.shape[CONFIG_AXIS]
        (('configs',), 1)
    """
    devices = jax.local_devices() if devices is None else list(devices)
    if not devices:
        raise ConfigError("devices=[]: give at least one device (e.g. jax.devices()[:1])")
    bad = [d for d in devices if not isinstance(d, jax.Device)]
    if bad:
        raise ConfigError(f"devices contains {bad[0]!r}: expected jax.Device objects (from jax.devices())")
    if len(set(devices)) != len(devices):
        raise ConfigError(f"devices={devices!r}: a device appears more than once; give each device once")
    if len({d.platform for d in devices}) > 1:
        raise ConfigError(f"devices={devices!r}: devices of several platforms; give devices of one platform")
    return Mesh(np.array(devices, dtype=object), (CONFIG_AXIS,))


def check_mesh(mesh) -> Mesh:
    """``mesh``, or a one-line ``ConfigError`` saying why it cannot spread configurations.

    A usable mesh is a ``jax.sharding.Mesh`` with an axis named :data:`CONFIG_AXIS`; any other
    axis must have size 1 (the simulation only splits configurations), and at least one of its
    devices must belong to this process. ``None`` gives :func:`config_mesh` over the local devices.

    Example:
        >>> check_mesh(Mesh(np.array(jax.devices()[:1]), ("batch",)))
        Traceback (most recent call last):
        ...
        memsim.knobs.ConfigError: mesh axis_names=('batch',): no axis named 'configs' to spread configurations over; build the mesh with memsim.config_mesh(devices) or name one axis 'configs'
    """
    if mesh is None:
        return config_mesh()
    if not isinstance(mesh, Mesh):
        raise ConfigError(f"mesh={mesh!r}: expected a jax.sharding.Mesh with an axis named "
                          f"{CONFIG_AXIS!r} (memsim.config_mesh(devices) builds one)")
    if CONFIG_AXIS not in mesh.axis_names:
        raise ConfigError(f"mesh axis_names={tuple(mesh.axis_names)!r}: no axis named {CONFIG_AXIS!r} to spread "
                          f"configurations over; build the mesh with memsim.config_mesh(devices) or name "
                          f"one axis {CONFIG_AXIS!r}")
    other = {k: v for k, v in mesh.shape.items() if k != CONFIG_AXIS and v > 1}
    if other:
        raise ConfigError(f"mesh axes {other!r}: only the {CONFIG_AXIS!r} axis may have more than one device "
                          f"(the simulation only splits configurations); use memsim.config_mesh(mesh.devices.flat)")
    flat = list(mesh.devices.flat)
    if len(set(flat)) != len(flat):
        raise ConfigError(f"mesh devices {flat!r}: a device appears more than once; use "
                          f"memsim.config_mesh(devices) with each device once")
    me = jax.process_index()
    if not any(d.process_index == me for d in mesh.devices.flat):
        raise ConfigError(f"mesh devices {list(mesh.devices.flat)!r}: none belongs to process {me}; every "
                          f"process must hold part of the mesh (e.g. memsim.config_mesh(jax.devices()))")
    return mesh


def _put(x: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """A global array from a numpy array that every process holds in full (each process places
    only its own devices' shards)."""
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def _fetch(tree, mesh: Mesh):
    """Numpy copies of a tree of global arrays; with a multi-process mesh, gathered onto every
    process first (one jitted resharding to replicated for the whole tree: one program and one
    launch, where ``multihost_utils.process_allgather`` would run one per array)."""
    if all(a.is_fully_addressable for a in jax.tree_util.tree_leaves(tree)):
        return jax.device_get(tree)
    full = _replicate(mesh)(tree)
    return jax.tree_util.tree_map(lambda a: np.asarray(a.addressable_data(0)), full)


@functools.lru_cache(maxsize=None)
def _replicate(mesh: Mesh):
    """The identity, jitted to put its outputs on every device of ``mesh`` (one per mesh, so that
    its compilations are cached)."""
    return jax.jit(lambda tree: tree, out_shardings=NamedSharding(mesh, PartitionSpec()))


def block_plan(n_tiles: int, lanes_per_tile: int, n_devices: int, block_lanes: int | None = None) -> tuple[int, int]:
    """(tiles per device per call, calls) for ``n_tiles`` tiles on ``n_devices`` devices.

    Blocks hold about ``block_lanes`` lanes (default :data:`BLOCK_LANES`). When every tile fits in one call, the block is the
    power of two at or above ``ceil(n_tiles / n_devices)`` (few compiled shapes, every device used).
    Padding (``calls · n_devices · tiles per device − n_tiles`` tiles) repeats the last tile and is
    dropped.

    Example:
        >>> block_plan(3, 32, 4), block_plan(3, 32, 1), block_plan(1000, 32, 4)
        ((1, 1), (4, 1), (64, 4))
    """
    block_lanes = BLOCK_LANES if block_lanes is None else block_lanes
    per_block = max(1, block_lanes // lanes_per_tile)
    if n_tiles < per_block * n_devices:
        per_block = pow2(-(-n_tiles // n_devices))
    span = per_block * n_devices
    return per_block, -(-n_tiles // span)


def run_tiles(lanes: dict, tile: dict, tables: tuple, *, samplers: tuple, n_chunks: int,
              chunk: int, coupled: bool = False, trace: bool = False, seed_key: int = 0,
              dtype: str = "float32", block_lanes: int | None = None, mesh: Mesh | None = None):
    """Runs the kernel on numpy inputs laid out as tiles, block by block, over the devices of ``mesh``.

    Tiles are simulated in blocks of about ``block_lanes`` lanes (so one item's working set stays
    in the CPU caches), all blocks of one shape, compiled once. Each call of the kernel takes one
    block per device of the mesh's :data:`CONFIG_AXIS`, as inputs sharded over that axis; calls are
    dispatched without waiting, so the devices run concurrently. A tile's results do not depend on
    the mesh (the same per-lane arithmetic on every device; random numbers are keyed per lane).

    Args:
        lanes: ``Lanes`` field name -> array of shape (G, M).
        tile: ``Tile`` field name -> array of shape (G, M); for rings larger than
            ``LANE_RING_MAX`` the lag must be equal across each tile.
        tables: four unit-mean empirical tables (1-D), one per stage.
        samplers: four static sampler kinds (read, transform, transfer, compute).
        n_chunks, chunk: the simulation covers ``n_chunks * chunk`` items.
        coupled: the M lanes of a tile are hosts of one synchronous data-parallel step.
        trace: also return every item's times (small runs only).
        seed_key: uint32 derived from the seed.
        dtype: ``"float32"`` (fast) or ``"float64"`` (runs under ``jax.enable_x64``).
        block_lanes: lanes per block (default :data:`BLOCK_LANES`).
        mesh: a mesh with a ``"configs"`` axis (see :func:`check_mesh`); default: every local
            device. With a multi-process mesh every process must call this with the same inputs.

    Returns:
        numpy arrays: per-chunk sums (G, M, n_chunks, len(kernel_acc_names(samplers))), chunk end times
        (G, M, n_chunks), time of the first compute start (G, M), and the trace (a tuple of
        (G, n_chunks, chunk, M) arrays in ``TRACE_NAMES`` order, or None).
    """
    mesh = check_mesh(mesh)
    g, m = lanes["stream"].shape
    rings = ring_layout(tile)
    per_block, n_calls = block_plan(g, m, int(mesh.shape[CONFIG_AXIS]), block_lanes)
    span = per_block * int(mesh.shape[CONFIG_AXIS])  # tiles per call
    pad = n_calls * span - g
    if pad:  # repeat the last tile; its results are dropped
        lanes = {k: np.concatenate([v, np.repeat(v[-1:], pad, 0)]) for k, v in lanes.items()}
        tile = {k: np.concatenate([np.asarray(v), np.repeat(np.asarray(v)[-1:], pad, 0)])
                for k, v in tile.items()}
    x64 = dtype == "float64"
    has_update = bool(np.any(np.asarray(lanes["upd"]) != 0))
    outs = []
    fnp = np.float64 if x64 else np.float32
    lane_f = np.stack([np.asarray(lanes[k], fnp) for k in _FLOAT_LANES])
    stream = np.asarray(lanes["stream"], np.uint32)
    tile_i = np.stack([np.asarray(tile[k], np.int32) for k in _INT_TILE])
    tile_b = np.stack([np.asarray(tile[k], bool) for k in _BOOL_TILE])
    split = NamedSharding(mesh, PartitionSpec(None, CONFIG_AXIS))
    by_tile = NamedSharding(mesh, PartitionSpec(CONFIG_AXIS))
    rep = NamedSharding(mesh, PartitionSpec())
    with jax.enable_x64(x64):
        fdt = jnp.float64 if x64 else jnp.float32
        shared = (tuple(_put(np.asarray(t, fnp), rep) for t in tables),
                  _put(np.asarray(int(seed_key) & 0xFFFFFFFF, np.uint32), rep))
        for ci in range(n_calls):
            sl = slice(ci * span, (ci + 1) * span)
            args = (_put(lane_f[:, sl], split), _put(stream[sl], by_tile), _put(tile_i[:, sl], split),
                    _put(tile_b[:, sl], split)) + shared
            outs.append(_run(*args, mesh=mesh, samplers=tuple(samplers), n_chunks=int(n_chunks),
                             chunk=int(chunk), rings=rings, coupled=bool(coupled), trace=bool(trace),
                             dtype=fdt, has_update=has_update))
        outs = _fetch(outs, mesh)
    accs = np.concatenate([o[0] for o in outs])[:g]  # (G, M, chunks, kernel_acc_names)
    ends = np.concatenate([o[1] for o in outs])[:g]
    first = np.concatenate([o[2] for o in outs])[:g]
    tr = tuple(np.concatenate([o[3][i] for o in outs])[:g] for i in range(len(TRACE_NAMES))) if trace else None
    return accs, ends, first, tr


def choose_tile_width(counts: np.ndarray, max_width: int = 2048, overhead: float = 64.0) -> int:
    """Lanes per tile minimising padded lanes plus a per-tile overhead (a power of two up to 64, then
    multiples of 32: other widths vectorise badly).

    Args:
        counts: number of configurations in each class of equal lags.
        max_width: largest tile width.
        overhead: cost of one tile in lane units.

    Example:
        >>> choose_tile_width(np.array([100, 100, 100]))
        128
        >>> choose_tile_width(np.array([1, 1, 1]))
        1
    """
    counts = np.asarray(counts, dtype=np.int64)
    top = int(counts.max())
    # measured: a tile width of 100 costs about 1.5x a width of 96 or 128 per lane
    widths = np.array([w for w in (1, 2, 4, 8, 16, 32, 64) if w < 2 * top] + list(range(96, max_width + 1, 32)))
    widths = widths[widths < top + 32]
    tiles = -(-counts[None, :] // widths[:, None])
    cost = (tiles * widths[:, None]).sum(1) + overhead * tiles.sum(1)
    return int(widths[np.argmin(cost)])
