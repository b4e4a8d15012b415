"""GPUs to compile for without one: XLA:GPU device descriptions and compile-only topologies.

XLA:GPU compiles for a GPU it cannot see when it is given the device's description (a
``GpuTargetConfig`` text proto: compute capability, SMs, shared memory, registers, memory);
``jax.experimental.topologies`` then makes compile-only devices of it, and ``jax.jit(...).lower``
on arguments sharded over them compiles the real program, Triton kernels and ``ptxas`` included.
That needs the CUDA plugin and ``ptxas`` (``pip install -e ".[gpu-compile]"``), not a GPU. The
figures are the vendors' published ones (XLA keeps the same for its own GPU tests).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class GpuSpec:
    """What XLA:GPU needs to know of a device to compile for it."""

    name: str  # the device kind XLA reports
    compute_capability: tuple[int, int]
    sm_count: int
    fp32_lanes_per_sm: int
    shared_memory_per_sm: int  # bytes
    shared_memory_per_block_optin: int  # bytes a kernel may ask for
    l2_cache: int  # bytes
    memory: int  # bytes
    memory_bandwidth: int  # bytes / s
    clock_ghz: float

    def target_config(self) -> str:
        """The ``GpuTargetConfig`` text proto XLA:GPU compiles against."""
        major, minor = self.compute_capability
        fields = {
            "threads_per_block_limit": 1024,
            "threads_per_warp": 32,
            "shared_memory_per_block": 49152,
            "shared_memory_per_core": self.shared_memory_per_sm,
            "threads_per_core_limit": 2048,
            "core_count": self.sm_count,
            "fpus_per_core": self.fp32_lanes_per_sm,
            "block_dim_limit_x": 2147483647,
            "block_dim_limit_y": 65535,
            "block_dim_limit_z": 65535,
            "memory_bandwidth": self.memory_bandwidth,
            "l2_cache_size": self.l2_cache,
            "clock_rate_ghz": self.clock_ghz,
            "device_memory_size": self.memory,
            "shared_memory_per_block_optin": self.shared_memory_per_block_optin,
            "registers_per_core_limit": 65536,
            "registers_per_block_limit": 65536,
        }
        info = "\n".join(f"  {key}: {value}" for key, value in fields.items())
        capability = f"  cuda_compute_capability {{ major: {major} minor: {minor} }}"
        return (
            f"gpu_device_info {{\n{info}\n{capability}\n}}\n"
            f'platform_name: "CUDA"\ndevice_description_str: "{self.name}"\n'
        )


GPUS: dict[str, GpuSpec] = {
    "h100": GpuSpec(
        "NVIDIA H100 80GB HBM3", (9, 0), 132, 128, 233472, 232448, 50 * 2**20, 84978434048,
        3352320000000, 1.98,
    ),
    "h200": GpuSpec(
        "NVIDIA H200", (9, 0), 132, 128, 233472, 232448, 60 * 2**20, 150754820096,
        4800000000000, 1.98,
    ),
    "a100": GpuSpec(
        "NVIDIA A100-SXM4-80GB", (8, 0), 108, 64, 167936, 166912, 40 * 2**20, 85100068864,
        2039040000000, 1.41,
    ),
}  # fmt: skip


def install_hint() -> str:
    import jax

    return (
        f'pip install -e ".[gpu-compile]" or jax-cuda12-plugin=={jax.__version__} '
        "nvidia-cuda-nvcc-cu12 (the CUDA plugin at jax's version, and ptxas; no GPU needed)"
    )


def parse_topology(name: str) -> tuple[GpuSpec, int, int]:
    """``h100:8`` (one host of 8) or ``h100:4x8`` (4 hosts of 8) → (spec, hosts, per host)."""
    gpu, _, shape = name.partition(":")
    if gpu not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r} in {name!r}; known: {', '.join(GPUS)}")
    try:
        *hosts, per_host = (int(x) for x in (shape or "1").split("x"))
        (hosts,) = hosts or [1]
    except ValueError:
        raise ValueError(f"{name!r}: expected GPU:N or GPU:HOSTSxN, e.g. h100:8") from None
    if hosts < 1 or per_host < 1:
        raise ValueError(f"{name!r}: hosts and GPUs per host must be ≥ 1")
    return GPUS[gpu], hosts, per_host


def topology_devices(name: str) -> list:
    """Compile-only devices of GPU topology ``name`` (``h100:8``, ``h200:2x8``, ``a100:1``)."""
    from jax.experimental import topologies

    spec, hosts, per_host = parse_topology(name)
    try:
        topology = topologies.get_topology_desc(
            platform="cuda", target_config=spec.target_config(), topology=f"1x{hosts}x{per_host}"
        )
    except Exception as error:  # noqa: BLE001 - a missing plugin and a refused shape land here
        raise ValueError(
            f"{name}: XLA:GPU made no compile-only topology ({type(error).__name__}: {error}); "
            f"it needs {install_hint()}"
        ) from error
    return list(topology.devices)
