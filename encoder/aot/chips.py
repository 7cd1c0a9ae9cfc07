"""Accelerator chip constants: the compile report's fit check and step-time estimate, and
the peak FLOP/s a run's MFU is measured against (peak_flops_per_device).

Per chip, from the vendors' datasheets (Cloud TPU system architecture pages; NVIDIA's
product briefs). Peak FLOP/s is dense bf16; HBM bandwidth and the interconnect figure are
what the bound divides by (ICI: bidirectional per chip; DCN: per chip, the host's NICs
over its chips). Figures marked `recalled` were not re-read against the page at the time
of writing.
"""
import dataclasses
import time

GiB = 2 ** 30
GB = 10 ** 9


@dataclasses.dataclass(frozen=True)
class Chip:
    name: str
    hbm_bytes: int
    peak_flops: float        # dense bf16 FLOP/s
    hbm_bandwidth: float     # bytes/s
    ici_bandwidth: float     # bytes/s, bidirectional, per chip
    dcn_bandwidth: float     # bytes/s per chip across slices (GPUs: across hosts)
    source: str
    interconnect: str = "ICI within a slice / DCN across slices"


_GPU_LINKS = "NVLink within a host / InfiniBand across hosts"

CHIPS: dict[str, Chip] = {
    # https://cloud.google.com/tpu/docs/v5e: 197 TFLOPs bf16, 16 GB HBM2 at 819 GBps,
    # ICI 400 GBps bidirectional per chip; 2 x 100 Gbps NICs per 8-chip host.
    "v5e": Chip("TPU v5 lite", 16 * GiB, 197e12, 819 * GB, 400 * GB, 25e9 / 8,
                "https://cloud.google.com/tpu/docs/v5e"),
    # https://cloud.google.com/tpu/docs/v6e: 918 TFLOPs bf16, 32 GB HBM at 1638 GBps,
    # ICI 800 GBps bidirectional per chip (DCN per chip assumed as v5e's: not on the page).
    "v6e": Chip("TPU v6 lite", 32 * GiB, 918e12, 1638 * GB, 800 * GB, 25e9 / 8,
                "https://cloud.google.com/tpu/docs/v6e"),
    # https://cloud.google.com/tpu/docs/v5p: 459 TFLOPs bf16, 95 GiB HBM2e at 2765 GBps,
    # ICI 1200 GBps bidirectional per chip, DCN 50 Gbps per chip.
    "v5p": Chip("TPU v5", 95 * GiB, 459e12, 2765 * GB, 1200 * GB, 50e9 / 8,
                "https://cloud.google.com/tpu/docs/v5p"),
    # https://cloud.google.com/tpu/docs/v4: 275 TFLOPs bf16, 32 GiB HBM2 at 1200 GBps;
    # ICI 6 links of 50 GB/s (recalled), DCN as v5p (recalled).
    "v4": Chip("TPU v4", 32 * GiB, 275e12, 1200 * GB, 300 * GB, 50e9 / 8,
               "https://cloud.google.com/tpu/docs/v4 (ICI, DCN recalled)"),
    # NVIDIA H100 SXM datasheet: 989 TFLOPs dense bf16, 80 GB HBM3 at 3.35 TB/s, NVLink
    # 900 GB/s; H200: 141 GB HBM3e at 4.8 TB/s, same compute and NVLink. Across hosts: one
    # 400 Gb/s InfiniBand NDR port per GPU (an HGX H100 node's 8 ConnectX-7; recalled).
    "h100": Chip("NVIDIA H100", 80 * GB, 989e12, 3.35e12, 900 * GB, 400e9 / 8,
                 "https://www.nvidia.com/en-us/data-center/h100/ (InfiniBand recalled)",
                 _GPU_LINKS),
    "h200": Chip("NVIDIA H200", 141 * GB, 989e12, 4.8e12, 900 * GB, 400e9 / 8,
                 "https://www.nvidia.com/en-us/data-center/h200/ (InfiniBand recalled)",
                 _GPU_LINKS),
    # A100 SXM 80GB datasheet: 312 TFLOPs dense bf16, 2,039 GB/s HBM2e, NVLink 600 GB/s;
    # one 200 Gb/s InfiniBand HDR port per GPU (a DGX A100's 8 ConnectX-6; recalled).
    "a100": Chip("NVIDIA A100", 80 * GB, 312e12, 2.039e12, 600 * GB, 200e9 / 8,
                 "https://www.nvidia.com/en-us/data-center/a100/ (InfiniBand recalled)",
                 _GPU_LINKS),
}


def chip_for_topology(topology: str) -> Chip:
    """'v5e:2x2' -> CHIPS['v5e'] (also v5litepod-*, v6e, v5p, v4 names)."""
    generation = topology.split(":")[0].split("-")[0].lower()
    generation = {"v5litepod": "v5e", "v5lite": "v5e", "v6litepod": "v6e"}.get(generation,
                                                                              generation)
    if generation not in CHIPS:
        raise ValueError(f"no chip constants for topology {topology!r}; known: "
                         f"{sorted(CHIPS)}")
    return CHIPS[generation]


def chip_for_device(device) -> Chip | None:
    """The constants of a device by its device_kind ('TPU v5 lite', 'NVIDIA H100 80GB HBM3')."""
    kind = getattr(device, "device_kind", "").lower()
    for chip in CHIPS.values():
        if chip.name.lower() == kind or (chip.name.lower().startswith("nvidia")
                                         and chip.name.split()[-1].lower() in kind):
            return chip
    return None


def peak_flops_per_device() -> float:
    """Datasheet dense bf16 peak of this host's accelerator; a measurement on CPU (or on a
    device with no constants here)."""
    import jax
    chip = chip_for_device(jax.devices()[0])
    if chip is not None:
        return chip.peak_flops
    return measure_matmul_flops()


def measure_matmul_flops(n: int = 1024, repeats: int = 5) -> float:
    """Achieved float32 FLOP/s of an n x n matmul on the default device."""
    import jax
    import jax.numpy as jnp
    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        f(a).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best
