"""XLM-R-compatible encoder: config, attention, layers, heads and the masked LM.

The classes are imported on first use, so that reading a model's config (``model.config``)
does not build the Flax modules.
"""

import importlib

_EXPORTS = {
    "MaskedLM": "xlpretrain.model.encoder",
    "ModelConfig": "xlpretrain.model.config",
    "dot_product_attention": "xlpretrain.model.attention",
    "init_params": "xlpretrain.model.encoder",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'xlpretrain.model' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
