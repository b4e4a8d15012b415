"""XLM-R-compatible encoder: config, attention, layers, heads and the masked LM."""

from xlpretrain.model.attention import dot_product_attention
from xlpretrain.model.config import ModelConfig
from xlpretrain.model.encoder import MaskedLM, init_params

__all__ = ["MaskedLM", "ModelConfig", "dot_product_attention", "init_params"]
