"""Analytic training FLOPs: the terms every objective's count is made of.

Forward + backward is 3× the forward pass (2 FLOPs per multiply-add), so a weight matmul costs
6 FLOPs per parameter and token. Embeddings are gathers and cost nothing; recomputation under
remat is not counted, so MFU from these counts is *model* FLOPs utilisation.
"""

from __future__ import annotations

import dataclasses

from xlpretrain.model.config import ModelConfig

FLOP_FORMULA = (
    "sum over objectives of 6*N_matmul*T + 12*layers*hidden*L*T + 6*(hidden^2 + hidden*vocab)*P "
    "(T tokens, L row length, P predicted tokens; ModernBERT: 3 FFN matrices (GeGLU), a local "
    "layer's L is its window, min(L, local_window + 1), rotary no matmul; BTMLM adds its "
    "forward-only decoding pass, "
    "1/3 of that; VECO counts two passes, the second with the cross-attention sub-layer; "
    "XLM-E adds the generator's layers and the discriminator head on every token; "
    "remat recomputation not counted)"
)


@dataclasses.dataclass(frozen=True)
class StepShape:
    """One objective's share of a step: `tokens` row slots (T) of `length` (L), `predictions`
    weighted prediction slots (P)."""

    tokens: int
    length: int
    predictions: int


def encoder_matmuls(config: ModelConfig, tokens: int) -> float:
    """6·N_matmul·T: the layers' Q, K, V, O and FFN matrices (two; three for ModernBERT's
    GeGLU, whose input and gate are one each), forward + backward."""
    ffn = 3 if config.gated_mlp else 2
    per_layer = 4 * config.hidden_size**2 + ffn * config.hidden_size * config.mlp_dim
    return 6.0 * config.num_layers * per_layer * tokens


def attended_keys(config: ModelConfig, length: int) -> list[int]:
    """Per layer, the keys a query's scores are counted over: the row (L), or for a ModernBERT
    local layer its window (local_window + 1 keys, the query's own and local_window // 2 each
    side), at most L."""
    if not config.rotary:  # only the pre-norm, rotary layers have local windows
        return [length] * config.num_layers
    window = min(length, config.local_window // 2 * 2 + 1)
    return [length if i % config.global_every == 0 else window for i in range(config.num_layers)]


def attention_scores(config: ModelConfig, tokens: int, length: int) -> float:
    """12·hidden·L·T per layer: QKᵀ and the weighted values, forward + backward, over every
    key a query attends to (`attended_keys`)."""
    return 12.0 * config.hidden_size * sum(attended_keys(config, length)) * tokens


def lm_head(config: ModelConfig, predictions: int) -> float:
    """6·(hidden² + hidden·vocab)·P: the head's dense layer and tied output matrix."""
    return 6.0 * (config.hidden_size**2 + config.hidden_size * config.vocab_size) * predictions


def masked_lm(config: ModelConfig, shape: StepShape) -> float:
    """One pass of the encoder over every token and the LM head on the predictions."""
    return (
        encoder_matmuls(config, shape.tokens)
        + attention_scores(config, shape.tokens, shape.length)
        + lm_head(config, shape.predictions)
    )
