"""Fused attention kernels (``flash``: Pallas/Triton; ``splash``: JAX's TPU kernel), and the
platform they are built for.

The platform is normally the default backend's. Ahead-of-time compilation for a TPU topology
from a CPU host (``python -m xlpretrain.aot --topology``) names it instead, so ``auto`` picks the
TPU kernel and the kernel is compiled for the TPU rather than interpreted for the host.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import jax

_TARGET: contextvars.ContextVar[str | None] = contextvars.ContextVar("platform", default=None)


def platform() -> str:
    """'cpu', 'gpu' or 'tpu': what the traced program will run on."""
    return _TARGET.get() or jax.default_backend()


@contextlib.contextmanager
def compiling_for(target: str) -> Iterator[None]:
    """Traces inside the block are for ``target`` (e.g. 'tpu'), whatever this host has."""
    token = _TARGET.set(target)
    try:
        yield
    finally:
        _TARGET.reset(token)
