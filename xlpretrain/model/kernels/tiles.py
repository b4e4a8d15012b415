"""The fused attention kernel's launch shapes (tiles, warps, stages) per kernel, and the
defaults: plain data, so a config is validated without building the kernel."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

KERNELS = ("forward", "dq", "dkv")


@dataclasses.dataclass(frozen=True)
class KernelTiles:
    """One kernel's launch shape: its ``[block_q, block_k]`` tile, and Triton's warps per
    program and software-pipeline stages. Registers per thread grow with the tile over
    ``num_warps``; past 255 ptxas spills to local memory, which costs far more than a smaller
    tile (``tests/test_kernels_sm90.py`` checks the defaults never spill on sm_90a)."""

    block_q: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 2

    def __post_init__(self) -> None:
        for name in ("block_q", "block_k", "num_warps"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"attention tile {name} must be a power of two, got {value}")
        if self.num_stages < 1:
            raise ValueError(f"attention tile num_stages must be ≥ 1, got {self.num_stages}")

    def __str__(self) -> str:
        return f"{self.block_q}x{self.block_k}:w{self.num_warps}:s{self.num_stages}"

    @classmethod
    def parse(cls, text: str) -> KernelTiles:
        """``BQxBK[:wWARPS][:sSTAGES]``, e.g. ``64x128:w8:s3``."""
        try:
            shape, *options = text.split(":")
            block_q, block_k = (int(x) for x in shape.split("x"))
            settings = {"w": "num_warps", "s": "num_stages"}
            extra = {settings[o[0]]: int(o[1:]) for o in options}
        except (ValueError, KeyError, IndexError):
            expected = "expected BQxBK[:wWARPS][:sSTAGES], e.g. 64x128:w8:s3"
            raise ValueError(f"attention tiles {text!r}: {expected}") from None
        return cls(block_q, block_k, **extra)


@dataclasses.dataclass(frozen=True)
class Tiles:
    """Launch shapes of the forward, dQ and dK/dV kernels, which may differ: dQ and dK/dV
    hold two accumulators each and loop over opposite sides."""

    forward: KernelTiles
    dq: KernelTiles
    dkv: KernelTiles

    @classmethod
    def uniform(cls, block_q: int, block_k: int, num_warps: int = 4, num_stages: int = 2):
        tiles = KernelTiles(block_q, block_k, num_warps, num_stages)
        return cls(tiles, tiles, tiles)

    def __str__(self) -> str:
        return " ".join(f"{name}={getattr(self, name)}" for name in KERNELS)

    @classmethod
    def parse(cls, text: str, base: Tiles | None = None) -> Tiles:
        """``KERNEL=BQxBK[:wW][:sS]`` entries (KERNEL: forward, dq, dkv) separated by spaces or
        commas; kernels not named keep ``base``'s (default: those for bfloat16 inputs)."""
        tiles = {name: getattr(base or default_tiles(jnp.bfloat16), name) for name in KERNELS}
        for entry in text.replace(",", " ").split():
            name, _, value = entry.partition("=")
            if name not in KERNELS or not value:
                raise ValueError(
                    f"attention tiles entry {entry!r}: expected KERNEL=BQxBK[:wW][:sS] with "
                    f"KERNEL one of {KERNELS}"
                )
            tiles[name] = KernelTiles.parse(value)
        return cls(**tiles)

    def fitted(self, q_len: int, k_len: int) -> Tiles:
        """Each tile no larger than the rows need (a power of two ≥ 16)."""

        def fit(block: int, length: int) -> int:
            return min(block, max(16, 1 << (length - 1).bit_length()))

        return Tiles(*(
            dataclasses.replace(t, block_q=fit(t.block_q, q_len), block_k=fit(t.block_k, k_len))
            for t in (self.forward, self.dq, self.dkv)
        ))  # fmt: skip


# Spill-free on sm_90a for every registered mask with either relative bias and dropout
# (tests/test_kernels_sm90.py); why these, in docs/performance.md. The backward kernels hold two
# [block, head_dim] float32 accumulators beside their inputs, and dQ the bias table's gradient:
# 32 rows on the accumulated side, fewer for float32 inputs (twice the registers per tile) and
# for heads wider than 64.
_TILES_16BIT = Tiles(KernelTiles(64, 64), KernelTiles(32, 32), KernelTiles(64, 32))
_TILES_16BIT_WIDE = Tiles(KernelTiles(64, 32), KernelTiles(32, 32), KernelTiles(32, 32))
_TILES_32BIT = Tiles(KernelTiles(32, 64), KernelTiles(32, 32), KernelTiles(32, 16))
# float32 with heads wider than 64 spills at every tile tried (16 × 16: 20 B in dK/dV).
_TILES_32BIT_WIDE = Tiles(KernelTiles(32, 32), KernelTiles(16, 32), KernelTiles(16, 16))


def default_tiles(dtype, head_dim: int = 64) -> Tiles:
    """The launch shapes for inputs of ``dtype`` and heads of ``head_dim``."""
    wide = head_dim > 64
    if jnp.dtype(dtype).itemsize > 2:
        return _TILES_32BIT_WIDE if wide else _TILES_32BIT
    return _TILES_16BIT_WIDE if wide else _TILES_16BIT
