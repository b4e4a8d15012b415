"""Fused attention kernels (``flash``: Pallas/Triton; ``splash``: JAX's TPU kernel), and the
platform each call is built for.

Every kernel call names its platform: ``cpu`` (Pallas interpret mode, a checker), ``gpu``
(Triton) or ``tpu`` (Mosaic). A model fixes it when it is built (``ModelConfig.kernel_platform``,
the host's by default; ``python -m xlpretrain.aot`` names another), so it is part of the traced
function's identity. Ambient state would not be: JAX's trace cache keys on the function and its
static arguments, so a function traced once in interpret mode and lowered again "for a GPU"
would silently reuse the interpreted trace.
"""

from __future__ import annotations

import jax

PLATFORMS = ("cpu", "gpu", "tpu")


def host_platform() -> str:
    """'cpu', 'gpu' or 'tpu': the platform of this process's default backend."""
    backend = jax.default_backend()
    return "gpu" if backend in ("cuda", "rocm") else backend


def check_platform(platform: str) -> str:
    if platform not in PLATFORMS:
        raise ValueError(f"kernel platform {platform!r}; expected one of {PLATFORMS}")
    return platform
