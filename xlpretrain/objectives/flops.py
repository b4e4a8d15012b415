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
    "(T tokens, L row length, P predicted tokens; BTMLM adds its forward-only decoding pass, "
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
    """6·N_matmul·T: the layers' Q, K, V, O and two FFN matrices, forward + backward."""
    per_layer = 4 * config.hidden_size**2 + 2 * config.hidden_size * config.mlp_dim
    return 6.0 * config.num_layers * per_layer * tokens


def attention_scores(config: ModelConfig, tokens: int, length: int) -> float:
    """12·layers·hidden·L·T: QKᵀ and the weighted values over full rows, forward + backward."""
    return 12.0 * config.num_layers * config.hidden_size * length * tokens


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
