"""XLM-R (and RoBERTa): post-LN layers with biases, learned positions after the padding row, one
token type; optionally XLM's language embeddings, VECO's plug-in cross-attention and XLM-E's
relative-position bias. Converted by `convert.xlmr`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xlpretrain.backbones.declaration import Backbone
from xlpretrain.core.errors import check
from xlpretrain.families import XLMR
from xlpretrain.model.config import ModelConfig

PEER_IDS = {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}  # a SentencePiece layout


def check_settings(model: Mapping[str, Any]) -> None:
    check(
        model["absolute_positions"] or model["relative_position"] != "none",
        "model.absolute_positions",
        "without absolute positions the model needs model.relative_position",
    )


def hf_peer(config: ModelConfig) -> Any:
    """HF `XLMRobertaForMaskedLM` of `config`'s shape and dropout rates."""
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

    return XLMRobertaForMaskedLM(
        XLMRobertaConfig(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            num_hidden_layers=config.num_layers,
            num_attention_heads=config.num_heads,
            intermediate_size=config.mlp_dim,
            max_position_embeddings=config.max_positions,
            hidden_dropout_prob=config.dropout_rate,
            attention_probs_dropout_prob=config.attention_dropout_rate,
            **PEER_IDS,
            type_vocab_size=1,
            layer_norm_eps=config.layer_norm_eps,
            attn_implementation="sdpa",
        )
    )


BACKBONE = Backbone(
    family=XLMR,
    check=check_settings,
    # The relative-position distance counts only where a checkpoint has relative positions.
    function_settings=("layer_norm_eps", "max_distance"),
    converter="xlpretrain.convert.xlmr",
    hf_peer=hf_peer,
    peer_name="transformers XLMRobertaForMaskedLM (sdpa attention)",
)
