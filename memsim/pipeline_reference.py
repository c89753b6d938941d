"""A straightforward event-by-event simulator of the same pipeline model, in pure Python.

It keeps an event heap and the state of every worker, buffer and thread, and after each event
starts whatever can start. It knows nothing of max-plus algebra, so agreeing with
:mod:`memsim.maxplus` item by item (given the same service times) checks the recurrences; it is
also the baseline of ``python -m benchmarks.pipeline``.

Model (the same as :mod:`memsim.pipeline`): k workers take batches round-robin; a worker waits
the read latency, reads over the shared link (served in batch order), transforms, and puts the
batch in its own queue (``per_worker_buffer_size``), blocking when it is full. Batches leave the
worker queues in order into the host buffer; a feed thread transfers them to the device buffer
(or, with ``feed='none'``, the step loop transfers each batch after the previous step); compute
takes them in order. A full buffer blocks its producer; a buffer of size 0 is a hand-over.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque

import numpy as np

from memsim.distributions import batch_shape_params, unit_table

TIME_NAMES = ("wf", "ls", "le", "wc", "wq", "taken", "ts", "tc", "td", "cs", "cd")


def draw_services(config, n_items: int, seed: int = 0) -> dict:
    """Service times per item drawn with Python's ``random`` (same distributions as the JAX kernel)."""
    from memsim.pipeline import DIST_FIELDS, derived, grid_frame

    frame = grid_frame([config], config)
    d = derived(frame)
    rng = random.Random(seed)
    b = float(d["b"][0])
    out = {"lat": [float(d["lat"][0])] * n_items}
    for name, mean_key, n in (("R", "mR", b), ("X", "mX", b), ("T", "mT", 1.0),
                              ("C", "mC", float(d["accum"][0]))):
        dist = getattr(config, DIST_FIELDS[("R", "X", "T", "C").index(name)])
        kind, p = batch_shape_params(dist, np.array([n]))
        p = float(p[0])
        mean = float(d[mean_key][0])
        table = list(unit_table(dist))
        if kind == "det":
            vals = [mean] * n_items
        elif kind == "gamma":
            vals = [mean * rng.gammavariate(p, 1.0 / p) for _ in range(n_items)]
        elif kind == "lognormal":
            vals = [mean * rng.lognormvariate(-0.5 * p * p, p) for _ in range(n_items)]
        else:
            vals = [mean * rng.choice(table) for _ in range(n_items)]
        out[name] = vals
    upd = float(d["upd"][0])
    out["C"] = [c + upd for c in out["C"]]
    return out


def simulate_reference(config, n_items: int = 2000, seed: int = 0, services: dict | None = None,
                       warmup_frac: float = 0.2, batches: int = 8) -> dict:
    """Simulates one configuration event by event.

    Args:
        config: a ``memsim.pipeline.PipelineConfig``.
        n_items: loader batches to simulate.
        seed: seed of Python's ``random`` when ``services`` is not given.
        services: optional per-item service times ``lat, R, X, T, C`` (lists or arrays of length
            ``n_items``), e.g. from ``simulate_trace``, to replay exactly.
        warmup_frac: leading fraction of items left out of ``items_per_s``.
        batches: batches of the batch-means error of ``samples_per_s``.

    Returns:
        dict: per-item times (``TIME_NAMES``, numpy arrays), ``items_per_s``,
        ``samples_per_s`` (with ``samples_per_s_stderr``), ``data_wait_frac`` and ``events``
        (number of events processed).

    Example:
        >>> from memsim.pipeline import PipelineConfig
        >>> cfg = PipelineConfig(num_workers=1, transform_dist="deterministic",
        ...                      compute_dist="deterministic", transfer_latency_s=0,
        ...                      device_sample_bytes=0, record_bytes=0, batch_size=1,
        ...                      transform_s=0.02, compute_s=0.01)
        >>> round(float(simulate_reference(cfg, 100)["items_per_s"]), 6)
        50.0
    """
    from memsim.pipeline import derived, grid_frame

    frame = grid_frame([config], config)
    d = {k: (v[0].item() if hasattr(v[0], "item") else v[0]) for k, v in derived(frame).items()}
    svc = services if services is not None else draw_services(config, n_items, seed)
    lat, R, X, T, C = (list(map(float, svc[k])) for k in ("lat", "R", "X", "T", "C"))
    n = n_items
    k = int(d["k"])
    no_workers, merged, none = bool(d["no_workers"]), bool(d["merged"]), bool(d["feed_none"])
    p = int(d["p"])
    bh, bd = int(d["host_buffer"]), int(d["device_buffer"])
    t = {name: [math.nan] * n for name in TIME_NAMES}

    heap: list = []
    seq = 0

    def schedule(time, kind, who):
        nonlocal seq
        heapq.heappush(heap, (time, seq, kind, who))
        seq += 1

    w_state = ["idle"] * k
    w_item = [-1] * k
    w_next = list(range(k))
    w_queue = [deque() for _ in range(k)]
    link_busy = False
    next_link = 0
    next_take = 0
    host = deque()
    th_state, th_item = "idle", -1          # feed thread (or step loop when feed='none')
    dev = deque()
    comp_busy = False
    computed = 0
    events = 0

    def thread_free_for(j):
        """The consumer thread may start work on item j (transfer, or loading when merged)."""
        if th_state != "idle":
            return False
        return computed >= j if none else True

    def start_transfer(i, now):
        nonlocal th_state, th_item
        t["ts"][i] = now
        th_state, th_item = "busy", i
        schedule(now + T[i], "transfer_done", i)

    def advance(now):
        nonlocal comp_busy, th_state, th_item, next_take, link_busy, next_link
        changed = True
        while changed:
            changed = False
            # compute takes the next batch on the device
            if not comp_busy:
                i = None
                if bd >= 1 and dev:
                    i = dev.popleft()
                elif bd == 0 and th_state == "blocked":
                    i = th_item
                    t["td"][i] = now
                    th_state, th_item = "idle", -1
                if i is not None:
                    t["cs"][i] = now
                    comp_busy = True
                    schedule(now + C[i], "compute_done", i)
                    changed = True
            # a blocked transfer pushes into the device buffer
            if th_state == "blocked" and bd >= 1 and len(dev) < bd:
                t["td"][th_item] = now
                dev.append(th_item)
                th_state, th_item = "idle", -1
                changed = True
            # the consumer thread takes the next batch from the host buffer (or hand-over)
            if not merged and thread_free_for(next_take if bh == 0 else (host[0] if host else -1)):
                if bh >= 1 and host:
                    start_transfer(host.popleft(), now)
                    changed = True
                elif bh == 0 and next_take < n:
                    w = next_take % k
                    if w_queue[w] and w_queue[w][0] == next_take:
                        i = w_queue[w].popleft()
                        t["taken"][i] = now
                        next_take += 1
                        start_transfer(i, now)
                        changed = True
            # batches leave the worker queues in order into the host buffer
            if not no_workers and bh >= 1:
                while next_take < n and len(host) < bh:
                    w = next_take % k
                    if not (w_queue[w] and w_queue[w][0] == next_take):
                        break
                    i = w_queue[w].popleft()
                    t["taken"][i] = now
                    host.append(i)
                    next_take += 1
                    changed = True
            # blocked workers put their batch away
            for w in range(k):
                if w_state[w] != "blocked":
                    continue
                i = w_item[w]
                if not no_workers:
                    if len(w_queue[w]) < p:
                        t["wq"][i] = now
                        w_queue[w].append(i)
                        w_state[w], w_item[w] = "idle", -1
                        changed = True
                elif merged:
                    t["wq"][i] = t["wc"][i]
                    t["taken"][i] = now
                    th_state = "idle"
                    w_state[w], w_item[w] = "idle", -1
                    start_transfer(i, now)
                    changed = True
                elif len(host) < bh:
                    t["wq"][i] = t["wc"][i]
                    t["taken"][i] = now
                    host.append(i)
                    w_state[w], w_item[w] = "idle", -1
                    changed = True
            # idle workers start their next batch
            for w in range(k):
                if w_state[w] != "idle" or w_next[w] >= n:
                    continue
                i = w_next[w]
                if merged:
                    if not thread_free_for(i):
                        continue
                    th_state = "loading"
                t["wf"][i] = now
                w_state[w], w_item[w] = "latency", i
                w_next[w] += k
                schedule(now + lat[i], "latency_done", w)
                changed = True
            # the link reads the next batch in order
            if not link_busy and next_link < n:
                w = next_link % k
                if w_state[w] == "wait_link" and w_item[w] == next_link:
                    t["ls"][next_link] = now
                    link_busy = True
                    w_state[w] = "reading"
                    schedule(now + R[next_link], "read_done", w)
                    changed = True

    advance(0.0)
    while heap:
        now, _, kind, who = heapq.heappop(heap)
        events += 1
        if kind == "latency_done":
            w_state[who] = "wait_link"
        elif kind == "read_done":
            i = w_item[who]
            t["le"][i] = now
            link_busy = False
            next_link += 1
            w_state[who] = "transforming"
            schedule(now + X[i], "transform_done", who)
        elif kind == "transform_done":
            t["wc"][w_item[who]] = now
            w_state[who] = "blocked"
        elif kind == "transfer_done":
            t["tc"][who] = now
            th_state = "blocked"
        elif kind == "compute_done":
            t["cd"][who] = now
            comp_busy = False
            computed += 1
        advance(now)

    out = {name: np.asarray(v) for name, v in t.items()}
    out["taken"] = np.where(np.isnan(out["taken"]), out["ts"], out["taken"])  # hand-overs
    warm = int(round(warmup_frac * n))
    warm = min(max(warm, 1), n - 1)
    cd = out["cd"]
    span = cd[-1] - cd[warm - 1]
    busy = float(np.sum(C[warm:]))
    out["items_per_s"] = (n - warm) / span if span > 0 else math.inf
    out["samples_per_s"] = out["items_per_s"] * d["b"]
    out["data_wait_frac"] = 1.0 - busy / span if span > 0 else 0.0
    # batch means over `batches` equal groups of the measured items (as memsim.pipeline does)
    edges = np.linspace(warm - 1, n - 1, batches + 1).round().astype(int)
    durs = np.diff(cd[edges])
    cnt = np.diff(edges).astype(float)
    rate = cnt.sum() / durs.sum()
    resid = cnt - rate * durs
    se = math.sqrt(float(np.sum(resid**2)) / (batches * (batches - 1))) / durs.mean()
    out["samples_per_s_stderr"] = se * d["b"]
    out["events"] = events
    return out
