"""What a step can be compiled for on this machine without the hardware: the abstract chips
of a TPU topology (libtpu) or of a GPU node (XLA's CUDA compiler, deviceless).

`devices('v5e:2x2')`, `devices('h100:8')` (one host, 8 GPUs), `devices('h100:2x8')` (2 hosts
of 8), `devices('a100:8')`, `devices('h200:8')`: the devices a mesh is built over, as
MaxText's train_compile.py does for TPUs and jax's deviceless AOT test does for GPUs.

GPUs are described to XLA by a GpuTargetConfigProto; GPU_SPECS holds the figures it needs
per GPU, taken from XLA's own per-GPU specs (openxla/xla,
xla/backends/gpu/target_config/specs/{a100_sxm_80,h100_sxm,h200}.txtpb) and rendered by
`gpu_target_config`. The CUDA compiler itself (jax-cuda12-pjrt, jax-cuda12-plugin and
cuDNN: requirements-gpu-compile.txt) is kept out of the runtime environment, in a folder
of its own (`ENCODER_GPU_COMPILER`, default `.gpu_compiler/` in the repository), so that
no CPU process loads it; `load_cuda_compiler` registers it with jax on first use.
"""
import dataclasses
import importlib
import os
import re
import sys

import jax

from encoder import errors

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPU_COMPILER_ENV = "ENCODER_GPU_COMPILER"
GPU_COMPILER_INSTALL = ("pip install --no-deps --target .gpu_compiler "
                        "-r requirements-gpu-compile.txt")


# ------------------------------------------------------------------ GPU targets

@dataclasses.dataclass(frozen=True)
class GpuSpec:
    """What XLA's GPU compiler reads of a GPU (GpuDeviceInfoProto fields)."""
    description: str             # the device kind jax reports
    capability: tuple[int, int]  # CUDA compute capability
    accelerated: bool            # sm_90a-style arch-specific features (Hopper and later)
    cores: int                   # streaming multiprocessors
    fpus_per_core: int
    shared_memory_per_core: int
    shared_memory_per_block_optin: int
    memory_bytes: int
    memory_bandwidth: int        # bytes/s
    l2_bytes: int
    clock_ghz: float
    source: str


_SPECS_AT = "openxla/xla xla/backends/gpu/target_config/specs/"
GPU_SPECS: dict[str, GpuSpec] = {
    "a100": GpuSpec("NVIDIA A100-SXM4-80GB", (8, 0), False, 108, 64, 167936, 166912,
                    85100068864, 2039040000000, 41943040, 1.41, _SPECS_AT + "a100_sxm_80.txtpb"),
    "h100": GpuSpec("NVIDIA H100 80GB HBM3", (9, 0), True, 132, 128, 233472, 232448,
                    84942979072, 3352320000000, 52428800, 1.98, _SPECS_AT + "h100_sxm.txtpb"),
    "h200": GpuSpec("NVIDIA H200 141GB HBM3e", (9, 0), True, 132, 128, 233472, 232448,
                    151397597184, 4800000000000, 52428800, 1.98, _SPECS_AT + "h200.txtpb"),
}
GPUS_PER_HOST_MAX = 8  # an HGX/DGX node


def gpu_target_config(spec: GpuSpec, dnn_version: tuple[int, int, int]) -> str:
    """The GpuTargetConfigProto text XLA compiles for. dnn_version is the cuDNN the
    compiler will build its fused-attention graphs with (the installed one)."""
    major, minor = spec.capability
    info = {
        "threads_per_block_limit": 1024, "threads_per_warp": 32,
        "shared_memory_per_block": 49152, "shared_memory_per_core": spec.shared_memory_per_core,
        "threads_per_core_limit": 2048, "core_count": spec.cores,
        "fpus_per_core": spec.fpus_per_core, "block_dim_limit_x": 2147483647,
        "block_dim_limit_y": 65535, "block_dim_limit_z": 65535,
        "memory_bandwidth": spec.memory_bandwidth, "l2_cache_size": spec.l2_bytes,
        "clock_rate_ghz": spec.clock_ghz, "device_memory_size": spec.memory_bytes,
        "shared_memory_per_block_optin": spec.shared_memory_per_block_optin,
        "registers_per_core_limit": 65536, "registers_per_block_limit": 65536,
        "thread_dim_limit_x": 1024, "thread_dim_limit_y": 1024, "thread_dim_limit_z": 64,
    }
    lines = ["gpu_device_info {"]
    lines += [f"  {k}: {v}" for k, v in info.items()]
    lines += ["  cuda_compute_capability {", f"    major: {major}", f"    minor: {minor}",
              f"    feature_extension: {'ACCELERATED_FEATURES' if spec.accelerated else 'NONE'}",
              "  }", f'  name: "{spec.description}"', "}", 'platform_name: "CUDA"',
              "dnn_version_info {", *[f"  {k}: {v}" for k, v in
                                      zip(("major", "minor", "patch"), dnn_version)],
              "}", f'device_description_str: "{spec.description}"']
    return "\n".join(lines) + "\n"


_GPU_TOPOLOGY = re.compile(r"^([a-z]\d+[a-z]?):(?:(\d+)x)?(\d+)$")


def parse_gpu_topology(topology: str) -> tuple[str, int, int] | None:
    """'h100:8' -> ('h100', 1, 8); 'h100:2x8' -> ('h100', 2, 8) (hosts x GPUs per host);
    None when the name is not a GPU's (a TPU topology). A known GPU with a bad shape is
    refused naming the forms."""
    m = _GPU_TOPOLOGY.match(topology.lower())
    name = topology.split(":")[0].lower()
    if name not in GPU_SPECS:
        return None
    hosts, per_host = (int(m.group(2) or 1), int(m.group(3))) if m else (0, 0)
    if not (1 <= per_host <= GPUS_PER_HOST_MAX and hosts >= 1):
        raise errors.UsageError(f"--topology={topology}: a GPU node is {name}:N (one host of "
                                f"N = 1 to {GPUS_PER_HOST_MAX} GPUs) or {name}:HxN (H hosts "
                                f"of N), e.g. {name}:8, {name}:2x8")
    return name, hosts, per_host


def gpu_compiler_dir() -> str:
    return os.environ.get(GPU_COMPILER_ENV) or os.path.join(REPO, ".gpu_compiler")


def _cuda_plugin():
    """The jax CUDA plugin module, from the environment (a GPU install of jax) or from the
    side folder; None where neither has it."""
    try:
        return importlib.import_module("jax_plugins.xla_cuda12")
    except ImportError:
        pass
    folder = gpu_compiler_dir()
    if not os.path.isdir(os.path.join(folder, "jax_plugins", "xla_cuda12")):
        return None
    if folder not in sys.path:
        sys.path.append(folder)
    importlib.invalidate_caches()
    import jax_plugins  # noqa: F401 - a namespace package: its path now includes the folder
    return importlib.import_module("jax_plugins.xla_cuda12")


def load_cuda_compiler():
    """Registers XLA's CUDA compiler with jax (once) for compile-only use: the CPU stays the
    runtime. Refuses with the install command where the compiler is missing."""
    from jax._src import xla_bridge  # private: registering a plugin after start-up
    if "cuda" in xla_bridge._topology_factories:  # noqa: SLF001
        return
    if jax.config.jax_platforms in (None, ""):
        # a CUDA plugin given no platform list tries to start a GPU runtime (cuInit)
        jax.config.update("jax_platforms", "cpu")
    plugin = _cuda_plugin()
    if plugin is None:
        raise errors.UsageError(
            f"GPU topologies compile with XLA's CUDA compiler, which is not installed: "
            f"{GPU_COMPILER_INSTALL} (or set {GPU_COMPILER_ENV} to where it is)")
    if xla_bridge._plugins_registered:  # noqa: SLF001 - discovery ran before the folder
        plugin.initialize()            # was on the path: register it by hand
        _partitioners_for("cuda")
    else:
        xla_bridge._discover_and_register_pjrt_plugins()  # noqa: SLF001
    if "cuda" not in xla_bridge._topology_factories:  # noqa: SLF001
        raise errors.UsageError(f"the CUDA plugin in {gpu_compiler_dir()} did not register "
                                f"(reinstall it: {GPU_COMPILER_INSTALL})")


def _partitioners_for(platform: str) -> None:
    """A plugin registered by hand after jax's plugin discovery misses the callbacks that
    discovery runs for each plugin: custom_partitioning's lowering (the kernels' shard_map
    partitioners) would be unknown to the CUDA compiler ("No registered implementation for
    custom call to CustomSPMDPartitioning for platform CUDA") whenever anything imported
    custom_partitioning before this compiler was loaded. Registered here for the new plugin."""
    from jax._src import custom_partitioning as cp, xla_bridge
    from jax._src.lib import xla_client
    factory = xla_bridge._backend_factories.get(platform)  # noqa: SLF001
    c_api = getattr(factory, "c_api", None)
    if c_api is None:
        return
    xla_client.register_custom_call_partitioner(
        cp._CUSTOM_PARTITIONING_CALL_NAME,  # noqa: SLF001
        cp._custom_partitioning_propagate_user_sharding,  # noqa: SLF001
        cp._custom_partitioning_partition,  # noqa: SLF001
        cp._custom_partitioning_infer_sharding_from_operands,  # noqa: SLF001
        can_side_effecting_have_replicated_sharding=True, c_api=c_api)


def installed_cudnn() -> tuple[int, int, int]:
    """The cuDNN version the CUDA compiler loads (major, minor, patch)."""
    versions = importlib.import_module("jax_cuda12_plugin._versions")
    v = int(versions.cudnn_get_version())  # e.g. 91002
    return v // 10000, (v // 100) % 100, v % 100


def gpu_devices(topology: str) -> list:
    name, hosts, per_host = parse_gpu_topology(topology)
    load_cuda_compiler()
    from jax.experimental import topologies
    text = gpu_target_config(GPU_SPECS[name], installed_cudnn())
    desc = topologies.get_topology_desc(platform="cuda", target_config=text,
                                        topology=f"1x{hosts}x{per_host}")
    return list(desc.devices)


# ------------------------------------------------------------------ TPU targets

def tpu_devices(topology: str, num_slices: int = 1) -> list:
    """The chips of a TPU topology ('v5e:2x2', 'v5p:4x4x4', 'v6e:8x8') as abstract devices,
    compiled for by libtpu on a machine without a TPU. A single chip ('v5e:1x1') names its
    host bounds (libtpu's default host is 2x2)."""
    try:
        import libtpu  # noqa: F401
    except ImportError as e:
        raise errors.UsageError(f"--topology={topology} compiles with libtpu, which is not "
                                "installed: pip install -r requirements-test.txt (it pins "
                                "libtpu to jax's version)") from e
    # Several processes may compile at once (tests, a fit sweep); libtpu's lock file is for
    # processes that own real chips, which a compile-only client does not.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from jax.experimental import topologies
    kwargs = {}
    dims = topology.split(":")[-1].split("x")
    if all(d == "1" for d in dims):
        kwargs["chips_per_host_bounds"] = (1, 1, 1)
    try:
        desc = topologies.get_topology_desc(platform="tpu", topology_name=topology,
                                            num_slices=num_slices, **kwargs)
    except jax.errors.JaxRuntimeError as e:  # libtpu's INVALID_ARGUMENT: a name it cannot read
        text = str(e).split("INVALID_ARGUMENT:")[-1].strip()
        raise errors.UsageError(f"--topology={topology}: {text} (a TPU generation and its "
                                "chips, e.g. v5e:2x2, v5p:2x2x2, v6e:4x4; or a GPU node: "
                                f"{', '.join(f'{g}:8' for g in GPU_SPECS)}, h100:2x8)") from None
    return list(desc.devices)


def devices(topology: str, num_slices: int = 1) -> list:
    """The abstract devices of a TPU topology or a GPU node, by name."""
    if num_slices < 1:
        raise errors.UsageError(f"--num_slices={num_slices}: expected 1 or more")
    if parse_gpu_topology(topology) is not None:
        if num_slices != 1:
            raise errors.UsageError(f"--num_slices is for TPU slices; a GPU topology names its "
                                    f"hosts: {topology.split(':')[0]}:{num_slices}x8")
        return gpu_devices(topology)
    return tpu_devices(topology, num_slices)


def hosts_of(devices_: list) -> int:
    return len({d.process_index for d in devices_})
