"""Machine presets: memory hierarchies described from spec sheets and stated assumptions.

Each preset is a function returning a :class:`~memsim.hierarchy.Hierarchy`; its docstring gives
every number's source. :data:`PRESETS` maps names to them. Measured machines come from probe fits
instead (:meth:`Hierarchy.from_probes <memsim.hierarchy.Hierarchy.from_probes>`).

>>> sorted(PRESETS)
['h100_sxm', 'h200', 'workstation_2020']
"""

from __future__ import annotations

from memsim.hierarchy import Hierarchy, HierarchyError, Link, Tier
from memsim.units import GB, MB, TB


def pcie_bandwidth_Bps(gen: int, lanes: int = 16) -> float:
    """Theoretical bytes/s per direction of a PCIe link.

    Gen 1–2 use 8b/10b encoding, Gen 3–5 128b/130b (PCI-SIG base specifications): per lane
    2.5, 5, 8, 16, 32 GT/s; bytes/s = GT/s × encoding efficiency × lanes / 8. Packet (TLP)
    overheads are not subtracted: this is the ceiling, not what a copy achieves.

    Example:
        >>> round(pcie_bandwidth_Bps(5) / 1e9, 1)
        63.0
        >>> round(pcie_bandwidth_Bps(4) / 1e9, 1)
        31.5
    """
    gts = {1: 2.5e9, 2: 5e9, 3: 8e9, 4: 16e9, 5: 32e9}
    if gen not in gts:
        raise HierarchyError(f"gen={gen!r}: expected a PCIe generation in 1..5")
    if not isinstance(lanes, int) or lanes not in (1, 2, 4, 8, 16):
        raise HierarchyError(f"lanes={lanes!r}: expected 1, 2, 4, 8 or 16")
    eff = 8 / 10 if gen <= 2 else 128 / 130
    return gts[gen] * eff * lanes / 8


# Efficiency of a pinned DMA over PCIe relative to the theoretical rate: transaction-layer packet
# headers, flow control and DLLPs leave ~80-90 %; ``bandwidthTest`` / ``nvbandwidth`` results are
# typically about 80 % of theoretical. An assumption for the 2020 workstation; on two Hopper cloud
# hosts this project's probes measured 66-68 % (HOPPER_MEASURED below replaces it there).
PINNED_PCIE_EFFICIENCY = 0.8


def _pageable(memcpy_Bps: float, pinned_Bps: float) -> float:
    # Pageable host→device is staged: memcpy into a pinned bounce buffer, then DMA (CUDA C++
    # Best Practices Guide, "Pinned Memory"; M. Harris, "How to Optimize Data Transfers in
    # CUDA C/C++", NVIDIA blog 2012). Store-and-forward of the two hops: 1/(1/B_copy + 1/B_dma).
    return 1.0 / (1.0 / memcpy_Bps + 1.0 / pinned_Bps)


def workstation_2020() -> Hierarchy:
    """The classic textbook pyramid of a 2020 deep-learning workstation.

    Tiers (capacity, bandwidth, latency, approximate 2020 street price per GB):

    - cpu_cache: 32 MB at 1 TB/s, 10 ns (an L3 of a desktop CPU; latency order from J. Dean's
      "Latency numbers every programmer should know": L2 7 ns, main memory 100 ns).
    - ram: 32 GB at 50 GB/s (≈ dual-channel DDR4-3200: 2 × 25.6 GB/s = 51.2 GB/s peak), 100 ns,
      ≈ $4/GB.
    - page_cache, pinned_host: carved out of ram (part_of="ram").
    - gpu: 24 GB at 1000 GB/s (RTX 3090 class: 936 GB/s GDDR6X, NVIDIA spec), 0.5 µs
      (global-memory latency of hundreds of cycles: Jia et al. 2018, "Dissecting the NVIDIA Volta
      GPU Architecture via Microbenchmarking"), ≈ $62/GB ($1499 launch price / 24 GB).
    - ssd: 1 TB at 3 GB/s (PCIe 3.0 x4 NVMe, e.g. Samsung 970 EVO Plus 3.5 GB/s sequential),
      100 µs (4 KiB random read at queue depth 1; Dean lists 150 µs), ≈ $0.12/GB.
    - hdd: 4 TB at 100 MB/s, 10 ms (seek plus half a rotation at 7200 rpm; Dean: 10 ms), ≈ $0.025/GB.

    Links: each storage tier → page_cache at its own rate and latency; page_cache → ram,
    page_cache → pinned_host and ram → ram as a memcpy at 25 GB/s (a copy reads and writes
    every byte, so at most half the 50 GB/s) with 1 µs per call (a system call);
    host → gpu over PCIe 4.0 x16 (31.5 GB/s theoretical): pinned at PINNED_PCIE_EFFICIENCY of it,
    pageable as the store-and-forward of the memcpy into the bounce buffer and the pinned DMA;
    gpu → ram like pinned; gpu → gpu at half the memory bandwidth (read + write). The PCIe
    latency, 10 µs, is the usual order of a cudaMemcpy call for small sizes (an assumption).

    Example:
        >>> h = workstation_2020()
        >>> [t.name for t in h.physical_tiers()]
        ['cpu_cache', 'gpu', 'ram', 'ssd', 'hdd']
        >>> round(h.link("ram", "gpu").bandwidth_Bps / 1e9, 1), round(h.link("pinned_host", "gpu").bandwidth_Bps / 1e9, 1)
        (12.6, 25.2)
    """
    ram_bw, memcpy = 50e9, 25e9
    pcie = pcie_bandwidth_Bps(4)
    pinned = PINNED_PCIE_EFFICIENCY * pcie
    tiers = (
        Tier("cpu_cache", 32 * MB, 1 * TB, 10e-9, None, None, "desktop L3; Dean latency table"),
        Tier("gpu", 24 * GB, 1000 * GB, 0.5e-6, 1499 / 24, None, "RTX 3090 class spec; Jia et al. 2018"),
        Tier("ram", 32 * GB, ram_bw, 100e-9, 4.0, None, "~2 x DDR4-3200; Dean latency table"),
        Tier("page_cache", 32 * GB, ram_bw, 100e-9, None, "ram", "part of RAM"),
        Tier("pinned_host", 32 * GB, ram_bw, 100e-9, None, "ram", "part of RAM"),
        Tier("ssd", 1 * TB, 3 * GB, 100e-6, 0.12, None, "PCIe 3.0 x4 NVMe spec sheets"),
        Tier("hdd", 4 * TB, 100 * MB, 10e-3, 0.025, None, "7200 rpm disk; Dean latency table"),
    )
    links = (
        Link("hdd", "page_cache", 100 * MB, 10e-3, source="hdd sequential rate, seek latency"),
        Link("ssd", "page_cache", 3 * GB, 100e-6, source="NVMe sequential rate, QD1 latency"),
        Link("page_cache", "ram", memcpy, 1e-6, source="memcpy: half of DRAM peak; syscall"),
        Link("page_cache", "pinned_host", memcpy, 1e-6, source="memcpy: half of DRAM peak; syscall"),
        Link("ram", "ram", memcpy, 1e-6, source="memcpy: half of DRAM peak"),
        Link("ram", "pinned_host", memcpy, 1e-6, source="memcpy: half of DRAM peak"),
        Link("pinned_host", "gpu", pinned, 10e-6, "pinned_host",
             "PCIe 4.0 x16 x PINNED_PCIE_EFFICIENCY"),
        Link("ram", "gpu", _pageable(memcpy, pinned), 10e-6, "unpinned_host",
             "staged: memcpy to bounce buffer + pinned DMA, store-and-forward"),
        Link("gpu", "ram", pinned, 10e-6, source="PCIe 4.0 x16 x PINNED_PCIE_EFFICIENCY"),
        Link("gpu", "gpu", 500 * GB, 5e-6, source="device copy: half of memory bandwidth"),
    )
    return Hierarchy(tiers, links, "workstation_2020",
                     "textbook figures for a 2020 workstation; prices approximate street prices")


#: Host-side links of the two Hopper presets, measured by this project's probes
#: (``python -m analysis links DIR/probe``) on two cloud hosts: an H100 SXM
#: (``results/nvidia-h100``) and an H200 (``results/nvidia-h200``), each a KVM guest with 16 cores
#: of an Intel Xeon (6/207/2). Geometric means of the two; (H100, H200) in each comment. They
#: replace assumptions (PINNED_PCIE_EFFICIENCY × 63 GB/s = 50.4 GB/s pinned, 20 GB/s one-thread
#: memcpy, 10 µs per transfer, device → host at the pinned rate) that were 1.2–18× off there.
HOPPER_MEASURED = {
    "pinned_h2d_Bps": 42.2e9,    # h2d_pinned: 41.8, 42.6 GB/s (67% of PCIe 5.0 x16's 63 GB/s)
    "pinned_h2d_s": 212e-6,      # its α: 149, 301 µs (jax.device_put's dispatch included)
    "pageable_h2d_Bps": 6.0e9,   # h2d_pageable: 7.36, 4.86 GB/s (what device_put of a numpy array gets)
    "pageable_h2d_s": 161e-6,    # its α: 124, 210 µs
    "d2h_Bps": 2.85e9,           # d2h (np.asarray of a device array): 2.80, 2.91 GB/s
    "d2h_s": 288e-6,             # its α: 256, 324 µs
    "memcpy_Bps": 11.0e9,        # ram_copy: 11.8, 10.2 GB/s
    "page_cache_read_Bps": 7.7e9,  # file_read_warm: 9.87, 5.97 GB/s
}


def _hopper(name: str, hbm_bytes: float, hbm_Bps: float, hbm_source: str) -> Hierarchy:
    # Tiers from the datasheets: the GPU's (HBM, L2) and the DGX H100's host (2 TB DDR5 on two
    # Xeon Platinum 8480C sockets, 8 channels of DDR5-4800 each: 307 GB/s per socket; NVMe data
    # drives of 3.84 TB, one modelled: PCIe 4.0 x4, about 7 GB/s sequential on spec sheets).
    # Links between host memory and the GPU, and the host's copies, as measured (HOPPER_MEASURED):
    # the staged pageable path stays the store-and-forward of a copy into a pinned bounce buffer
    # and the pinned DMA, its copy at the rate the measured pageable transfer implies
    # (1 / (1/6.0 - 1/42.2) = 7.0 GB/s; slower than the 11 GB/s plain memcpy).
    m = HOPPER_MEASURED
    host_Bps, memcpy, pinned = 307.2e9, m["memcpy_Bps"], m["pinned_h2d_Bps"]
    bounce = 1.0 / (1.0 / m["pageable_h2d_Bps"] - 1.0 / pinned)
    l2_Bps = 2 * hbm_Bps
    probes = "probes of two Hopper cloud hosts (memsim.machines.HOPPER_MEASURED)"
    tiers = (
        Tier("l2", 50 * MB, l2_Bps, 0.1e-6, None, None,
             "50 MB L2 (NVIDIA Hopper whitepaper); bandwidth not published: assumed 2 x HBM"),
        Tier("hbm", hbm_bytes, hbm_Bps, 0.5e-6, None, None, hbm_source),
        Tier("ram", 2 * TB, host_Bps, 100e-9, None, None, "DGX H100 datasheet; DDR5-4800 x 8 channels"),
        Tier("page_cache", 2 * TB, host_Bps, 100e-9, None, "ram", "part of RAM"),
        Tier("pinned_host", 2 * TB, host_Bps, 100e-9, None, "ram", "part of RAM"),
        Tier("nvme", 3.84 * TB, 7 * GB, 80e-6, None, None, "PCIe 4.0 x4 NVMe spec sheets"),
    )
    links = (
        Link("nvme", "page_cache", 7 * GB, 80e-6, source="NVMe sequential rate, QD1 latency"),
        Link("page_cache", "ram", m["page_cache_read_Bps"], 1e-6, source=f"warm file read: {probes}"),
        Link("page_cache", "pinned_host", m["page_cache_read_Bps"], 1e-6, source=f"warm file read: {probes}"),
        Link("ram", "ram", memcpy, 1e-6, source=f"memcpy: {probes}"),
        Link("ram", "pinned_host", bounce, 1e-6,
             source=f"the staging copy the measured pageable transfer implies: {probes}"),
        Link("pinned_host", "hbm", pinned, m["pinned_h2d_s"], "pinned_host", f"pinned host->device: {probes}"),
        Link("ram", "hbm", m["pageable_h2d_Bps"], m["pageable_h2d_s"], "unpinned_host",
             f"pageable host->device (staged: copy to a bounce buffer + pinned DMA): {probes}"),
        Link("hbm", "ram", m["d2h_Bps"], m["d2h_s"], source=f"device->host into pageable memory: {probes}"),
        Link("hbm", "hbm", hbm_Bps / 2, 5e-6, source="device copy: half of HBM bandwidth"),
    )
    return Hierarchy(tiers, links, name,
                     f"{hbm_source}; host from the DGX H100 datasheet; host links measured on two Hopper hosts")


def h100_sxm() -> Hierarchy:
    """One H100 SXM5 and its host.

    - hbm: 80 GB HBM3 at 3.35 TB/s (NVIDIA H100 Tensor Core GPU datasheet, SXM5 column);
      0.5 µs latency (order of magnitude of GPU global-memory latency; an assumption).
    - l2: 50 MB (NVIDIA H100 Tensor Core GPU Architecture whitepaper). NVIDIA publishes no L2
      bandwidth; 2 × HBM is assumed (order of magnitude only).
    - host link: PCIe Gen5 x16, 63.0 GB/s per direction theoretical (:func:`pcie_bandwidth_Bps`).
      Measured host→device is lower and depends on the host buffer, so two links are modelled, at
      what this project's probes measured on two Hopper cloud hosts (:data:`HOPPER_MEASURED`):
      ``pinned_host -> hbm`` 42.2 GB/s (67% of 63), and ``ram -> hbm`` (pageable, what
      ``jax.device_put`` of a numpy array gets) 6.0 GB/s, the store-and-forward of a copy into a
      pinned bounce buffer and the DMA. Device → host (``hbm -> ram``) 2.85 GB/s.
    - host: 2 TB DDR5 at 307 GB/s per socket, one 3.84 TB NVMe drive at 7 GB/s (DGX H100
      datasheet; drive spec sheets).

    Example:
        >>> h = h100_sxm()
        >>> h.tier("hbm").capacity_bytes, h.tier("hbm").bandwidth_Bps
        (80000000000.0, 3350000000000.0)
        >>> round(h.link("pinned_host", "hbm").bandwidth_Bps / 1e9, 1), round(h.link("ram", "hbm").bandwidth_Bps / 1e9, 1)
        (42.2, 6.0)
    """
    return _hopper("h100_sxm", 80 * GB, 3.35 * TB, "NVIDIA H100 datasheet (SXM5): 80 GB HBM3, 3.35 TB/s")


def h200() -> Hierarchy:
    """One H200 SXM: 141 GB HBM3e at 4.8 TB/s (NVIDIA H200 Tensor Core GPU datasheet).

    Same 50 MB L2 (Hopper), same PCIe Gen5 x16 host link and host as :func:`h100_sxm`.

    Example:
        >>> h = h200()
        >>> h.tier("hbm").capacity_bytes / 1e9, h.tier("hbm").bandwidth_Bps / 1e12
        (141.0, 4.8)
        >>> h.link("pinned_host", "hbm") == h100_sxm().link("pinned_host", "hbm")
        True
    """
    return _hopper("h200", 141 * GB, 4.8 * TB, "NVIDIA H200 datasheet: 141 GB HBM3e, 4.8 TB/s")


PRESETS = {"workstation_2020": workstation_2020, "h100_sxm": h100_sxm, "h200": h200}
