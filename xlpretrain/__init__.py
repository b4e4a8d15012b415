"""xlpretrain: cross-lingual encoder pre-training in JAX/Flax.

``xlpretrain.load(path)`` (see ``xlpretrain.api``) loads a workdir or checkpoint folder for
inference; it is imported on first use so that ``import xlpretrain.<module>`` stays light.
"""

from __future__ import annotations

import sys
from typing import Any

if sys.argv[:1] == ["-m"]:  # `python -m xlpretrain.X` is finding its program: a program starts
    from xlpretrain.core import quiet

    quiet.install()


def __getattr__(name: str) -> Any:
    if name == "load":
        from xlpretrain.api import load

        return load
    raise AttributeError(f"module 'xlpretrain' has no attribute {name!r}")


__all__ = ["load"]
