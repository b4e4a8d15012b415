"""Compile a function for a GPU this host does not have, and read what ptxas made of its kernels.

Pallas interpret mode checks a kernel's arithmetic, not whether Triton accepts it or how it fits
the chip. XLA:GPU compiles deviceless (``gpu_targets``): the Pallas→Triton lowering, Triton's
own passes and XLA's ``ptxas`` all run, so a kernel Triton or ptxas refuses (a gather in a
tile, mixed-precision dots, a tile that is not a power of two, more shared memory than the
SM has) fails here as it would on the GPU. From XLA's dump of the compiled program we read each
kernel's launch (grid, threads, dynamic shared memory) and run ``ptxas -v`` on its PTX for
registers per thread and bytes spilled to local memory: a kernel at 255 registers that spills
is far from the chip's speed, and nothing short of a GPU run shows it otherwise.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence

import jax

from xlpretrain.parallel import gpu_targets

FLASH_KERNELS = ("_forward_kernel", "_dq_kernel", "_dkv_kernel")
_THUNK = re.compile(
    r"kCustomKernel .*?\] (?P<name>\S+) grid: \[(?P<grid>[\d, ]+)\] "
    r"threads: \[(?P<threads>[\d, ]+)\]\s+shared_memory: (?P<smem>\d+) bytes"
)
# LLVM's NVPTX backend at XLA's default level whatever `XLA_FLAGS` asks of a process's other
# compiles (tests run XLA's CPU backend at -O0): the report is of the PTX a GPU would run, and
# at -O0 every flash kernel spills.
GPU_BACKEND_OPTIONS = {"xla_backend_optimization_level": 3}
_ENTRY = re.compile(r"^\.visible \.entry (\S+)\(", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class KernelReport:
    """One GPU kernel of a compiled program, as launched and as ptxas built it."""

    name: str
    grid: tuple[int, ...]
    threads: int  # per program (block)
    shared_memory: int  # dynamic shared memory per program, bytes
    registers: int  # per thread
    spill_stores: int  # bytes
    spill_loads: int  # bytes

    def __str__(self) -> str:
        spills = f"{self.spill_stores} B spill stores" if self.spill_stores else "no spills"
        return (
            f"{self.name}: {self.registers} registers, {spills}, "
            f"{self.shared_memory / 1024:.0f} KiB shared, {self.threads} threads"
        )


def ptxas() -> str:
    """The ptxas XLA uses: the ``nvidia-cuda-nvcc-cu12`` wheel's, else the PATH's."""
    try:
        import nvidia.cuda_nvcc

        wheel = pathlib.Path(next(iter(nvidia.cuda_nvcc.__path__))) / "bin" / "ptxas"
        if wheel.is_file():
            return str(wheel)
    except ImportError:
        pass
    found = shutil.which("ptxas")
    if found is None:
        raise FileNotFoundError(f"no ptxas found; {gpu_targets.install_hint()}")
    return found


def ptxas_usage(ptx_file: pathlib.Path, arch: str) -> dict[str, tuple[int, int, int]]:
    """{entry: (registers, spill store bytes, spill load bytes)} of one PTX file."""
    out = subprocess.run(
        [ptxas(), f"-arch={arch}", "-v", "--warn-on-spills", str(ptx_file), "-o", "/dev/null"],
        capture_output=True, text=True, check=True,
    ).stderr  # fmt: skip
    usage, current = {}, None
    for line in out.splitlines():
        if match := re.search(r"Compiling entry function '(\S+)'", line):
            current = match.group(1)
        elif current and (match := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads",
                                             line)):  # fmt: skip
            spills = int(match.group(1)), int(match.group(2))
            usage[current] = (usage.get(current, (0, 0, 0))[0], *spills)
        elif current and (match := re.search(r"Used (\d+) registers", line)):
            usage[current] = (int(match.group(1)), *usage.get(current, (0, 0, 0))[1:])
    return usage


def _shard_on(device, tree):
    sharding = jax.sharding.SingleDeviceSharding(device)
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)


def compile_for_gpu(
    fn: Callable,
    args: Sequence,
    gpu: str = "h100",
    kernels: Sequence[str] = FLASH_KERNELS,
) -> tuple[jax.stages.Compiled, list[KernelReport]]:
    """``jax.jit(fn)`` compiled for one ``gpu`` (``gpu_targets.GPUS``) on abstract ``args``
    (``jax.ShapeDtypeStruct`` trees), and a report of each kernel whose name starts with one of
    ``kernels``. Raises what XLA, Triton or ptxas raise for a kernel the GPU cannot run."""
    (device,) = gpu_targets.topology_devices(f"{gpu}:1")
    lowered = jax.jit(fn).trace(*_shard_on(device, list(args))).lower()
    return compile_with_report(lowered, kernels)


def compile_with_report(
    lowered: jax.stages.Lowered, kernels: Sequence[str] = FLASH_KERNELS
) -> tuple[jax.stages.Compiled, list[KernelReport]]:
    """Compiles a program lowered for a GPU (``gpu_targets`` devices, or a real one) and reports
    its kernels named ``kernels*`` as ptxas built them."""
    with tempfile.TemporaryDirectory(prefix="xlpretrain-gpu-compile-") as dump:
        # A compilation-cache hit would skip the compile, and with it the dump we read.
        cache = jax.config.jax_enable_compilation_cache
        jax.config.update("jax_enable_compilation_cache", False)
        try:
            compiled = lowered.compile(
                compiler_options={"xla_dump_to": dump, **GPU_BACKEND_OPTIONS}
            )
        finally:
            jax.config.update("jax_enable_compilation_cache", cache)
        reports = _read_dump(pathlib.Path(dump), tuple(kernels))
    return compiled, reports


def _arch(target_config: str) -> str:
    """ptxas's -arch from the compute capability XLA compiled for (sm_90a on Hopper)."""
    capability = re.search(
        r"cuda_compute_capability\s*\{\s*major:\s*(\d+)(?:\s*minor:\s*(\d+))?", target_config
    )
    if capability is None:
        raise ValueError("XLA's dump names no CUDA compute capability")
    major, minor = int(capability.group(1)), int(capability.group(2) or 0)
    return f"sm_{major}{minor}{'a' if major == 9 else ''}"


def _read_dump(dump: pathlib.Path, kernels: tuple[str, ...]) -> list[KernelReport]:
    launches = {}
    for thunks in dump.glob("*thunk_sequence.txt"):
        for match in _THUNK.finditer(thunks.read_text()):
            if match.group("name").startswith(kernels):
                launches[match.group("name")] = match
    if not launches:
        return []
    (target,) = dump.glob("*gpu_target_config.pbtxt")
    arch, usage = _arch(target.read_text()), {}
    for ptx in sorted(dump.glob("*.ptx")):
        if any(name in launches for name in _ENTRY.findall(ptx.read_text())):
            usage.update(ptxas_usage(ptx, arch))
    reports = []
    for name, launch in sorted(launches.items()):
        registers, stores, loads = usage[name]
        reports.append(
            KernelReport(
                name=name,
                grid=tuple(int(x) for x in launch.group("grid").split(",")),
                threads=math.prod(int(x) for x in launch.group("threads").split(",")),
                shared_memory=int(launch.group("smem")),
                registers=registers,
                spill_stores=stores,
                spill_loads=loads,
            )
        )
    return reports


@dataclasses.dataclass(frozen=True)
class FlashCase:
    """One configuration of the fused attention whose gradient program is compiled (and, on a
    GPU, run): a registered mask, its relative bias ('none', 'bucketed', XLM-E's 'gated'),
    input dtype, row length (need not be a multiple of the tile), attention dropout, and a
    ModernBERT local layer's window (the largest query-key distance; 0: none)."""

    mask: str
    bias: str = "none"
    dtype: str = "bfloat16"
    length: int = 512
    dropout: float = 0.0
    batch: int = 2
    heads: int = 12
    head_dim: int = 64
    num_buckets: int = 32
    max_distance: int = 128
    window: int = 0

    def __str__(self) -> str:
        window = f"/window{self.window}" if self.window else ""
        return (f"{self.mask}/{self.bias}/{self.dtype}/L{self.length}/dropout{self.dropout}"
                f"/d{self.head_dim}{window}")  # fmt: skip

    def mask_fn(self):
        """The case's mask function, within its window if it has one."""
        from xlpretrain import masks

        mask_fn = masks.get(self.mask)
        return masks.windowed(mask_fn, self.window) if self.window else mask_fn

    def loss(self, tiles=None, platform: str = "gpu") -> Callable:
        """``loss(q, k, v, table, gate_u, gate_v, gate_w, meta)``: the sum of the fused
        attention's output (float32); its gradient reaches every kernel."""
        from xlpretrain.model import relative_position
        from xlpretrain.model.kernels import flash

        def loss(q, k, v, table, gate_u, gate_v, gate_w, meta):
            bias = None
            if self.bias != "none":
                gated = self.bias == "gated"
                scale = relative_position.gate_scale(q, gate_u, gate_v, gate_w) if gated else None
                bias = relative_position.RelativeBias(
                    table, scale, self.num_buckets, self.max_distance
                )
            out = flash.attention(
                q, k, v, mask_fn=self.mask_fn(), q_meta=meta, k_meta=meta, bias=bias,
                dropout_rate=self.dropout,
                dropout_rng=jax.random.key(0) if self.dropout else None,
                tiles=tiles, platform=platform,
            )  # fmt: skip
            return out.astype(jax.numpy.float32).sum()

        return loss

    def abstract_args(self) -> tuple:
        import jax.numpy as jnp

        def shape(*dims, dtype=jnp.float32):
            return jax.ShapeDtypeStruct(dims, dtype)

        qkv = shape(self.batch, self.length, self.heads, self.head_dim, dtype=self.dtype)
        gate = shape(self.heads, self.head_dim)
        fields = (*META_FIELDS, "window") if self.window else META_FIELDS
        meta = {f: shape(self.batch, self.length, dtype=jnp.int32) for f in fields}
        return (qkv, qkv, qkv, shape(self.num_buckets, self.heads), gate, gate, shape(), meta)

    def gradient(self, tiles=None, platform: str = "gpu") -> Callable:
        """The gradient of ``loss`` with respect to every floating-point input."""
        return jax.grad(self.loss(tiles, platform), argnums=tuple(range(7)))


META_FIELDS = ("segment_ids", "pair_ids", "side", "positions", "is_masked")


def checked_cases() -> list[FlashCase]:
    """The configurations every kernel change is compiled for (tests/test_kernels_sm90.py):
    every mask as the papers' configs run it (bf16, attention dropout), and at its heaviest:
    float32 inputs (twice the registers per tile), XLM-E's gated bias, dropout, a length no tile
    divides; then the other biases and no dropout."""
    from xlpretrain import masks

    return [
        *(FlashCase(m, "none", "bfloat16", 512, 0.1) for m in masks.MASKS),
        *(FlashCase(m, "gated", "float32", 300, 0.1) for m in masks.MASKS),
        FlashCase("mmlm", "none", "bfloat16", 512, 0.0),
        FlashCase("camlm", "gated", "bfloat16", 512, 0.1),
        FlashCase("camlm", "bucketed", "bfloat16", 512, 0.0),
        FlashCase("tlm", "bucketed", "float32", 300, 0.0),
        FlashCase("mmlm", "none", "float32", 512, 0.1),
        # Other head widths: the tiny configs' 32 (float32), and 128 (bf16).
        FlashCase("mmlm", "none", "float32", 128, 0.1, heads=4, head_dim=32),
        FlashCase("camlm", "gated", "float32", 300, 0.1, heads=4, head_dim=32),
        FlashCase("camlm", "gated", "bfloat16", 300, 0.1, heads=4, head_dim=128),
        # ModernBERT's local layers: mmBERT's window at its lengths, and at the heaviest.
        FlashCase("mmlm", "none", "bfloat16", 1024, 0.0, window=64),
        FlashCase("tlm", "none", "float32", 300, 0.1, window=64),
    ]
