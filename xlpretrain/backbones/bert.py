"""BERT / mBERT: XLM-R's post-LN layers with biases, but two token-type rows (type 0 added to
every token, as HF does without `token_type_ids`) and learned positions from row 0; optionally
the same XLM, VECO and XLM-E additions as XLM-R. Converted by `convert.bert`."""

from __future__ import annotations

from typing import Any

from xlpretrain.backbones.declaration import Backbone
from xlpretrain.backbones.xlmr import check_settings
from xlpretrain.families import BERT
from xlpretrain.model.config import ModelConfig


def hf_peer(config: ModelConfig) -> Any:
    """HF `BertForMaskedLM` of `config`'s shape and dropout rates."""
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(
        BertConfig(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            num_hidden_layers=config.num_layers,
            num_attention_heads=config.num_heads,
            intermediate_size=config.mlp_dim,
            max_position_embeddings=config.max_positions,
            hidden_dropout_prob=config.dropout_rate,
            attention_probs_dropout_prob=config.attention_dropout_rate,
            type_vocab_size=config.token_type_rows,
            layer_norm_eps=config.layer_norm_eps,
            attn_implementation="sdpa",
        )
    )


BACKBONE = Backbone(
    family=BERT,
    # Learned positions, or XLM-R's relative ones: the same layers, the same check.
    check=check_settings,
    function_settings=("layer_norm_eps", "max_distance"),
    converter="xlpretrain.convert.bert",
    hf_peer=hf_peer,
    peer_name="transformers BertForMaskedLM (sdpa attention)",
)
