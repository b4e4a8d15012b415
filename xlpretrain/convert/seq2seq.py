"""VECO's pre-trained model as a Hugging Face ``EncoderDecoderModel`` (``to-hf-seq2seq``).

VECO initialises sequence-to-sequence fine-tuning from its pre-trained encoder: the encoder is
the plain stream (embeddings and every layer, the plug-in left out) and the decoder is built
from the *last* N layers (VECO found these best), each with its self-attention, FFN and
LayerNorms and with its pre-trained plug-in as the decoder's cross-attention over the encoder
output — the role the plug-in played for the s stream, which read the other sequence's last
plain-stream states. The decoder shares nothing with the encoder in the HF model: both get
copies of our embeddings, and the decoder's LM head is ours, tied to its word embeddings.

Differences inherent to this initialisation, not to the export: HF decoder self-attention is
causal while our layers were trained bidirectionally (the ICLR variant's s stream excepted,
which is causal); the decoder's first layer reads embeddings where our layer ``L - N`` read
layer ``L - N - 1``'s output; during VECO pre-training the plug-in read the *paired*
sequence, and in the decoder it reads the source. Fine-tuning closes these gaps.
"""

from __future__ import annotations

import os

from xlpretrain.convert.folder import Pretrained, unpadded
from xlpretrain.convert.hf import Part, export_ids, export_tensors, fresh_pooler, write_folder
from xlpretrain.convert.xlmr import (
    CROSS_ATTENTION_RULES,
    ENCODER_ARCHITECTURE,
    ENCODER_RULES,
    RULES,
    check_xlmr_tokenizer,
    config_to_hf,
)
from xlpretrain.data.tokenizer import SpecialIds
from xlpretrain.model.config import ModelConfig

DECODER_ARCHITECTURE = "XLMRobertaForCausalLM"
# The plug-in becomes the decoder's cross-attention, so the export expresses it.
PLUG_IN = ("cross_attention",)


def decoder_layers_of(config: ModelConfig, decoder_layers: int | None) -> range:
    """Our layers that become the decoder's: the last ``decoder_layers`` (default: all)."""
    if not config.cross_attention:
        raise ValueError(
            "to-hf-seq2seq needs a model with VECO's plug-in cross-attention "
            "(model.cross_attention=True); this model has none: export it with to-hf"
        )
    count = config.num_layers if decoder_layers is None else decoder_layers
    if not 1 <= count <= config.num_layers:
        raise ValueError(
            f"decoder_layers={count}: the model has {config.num_layers} layers; choose 1 to "
            f"{config.num_layers}"
        )
    return range(config.num_layers - count, config.num_layers)


def seq2seq_config(
    config: ModelConfig, decoder_layers: int | None = None, special: SpecialIds | None = None
) -> dict:
    """``config.json`` of the ``EncoderDecoderModel``: XLM-R encoder, XLM-R causal decoder
    with cross-attention; generation starts from ``<s>`` and stops at ``</s>`` (``special``:
    the ids of the model's tokenizer, ``hf.export_ids``)."""
    layers = decoder_layers_of(config, decoder_layers)
    special = special or export_ids(config, None)
    encoder = config_to_hf(config, ENCODER_ARCHITECTURE, expressible=PLUG_IN, special=special)
    decoder = {
        **config_to_hf(config, DECODER_ARCHITECTURE, expressible=PLUG_IN, special=special),
        "num_hidden_layers": len(layers),
        "is_decoder": True,
        "add_cross_attention": True,
    }
    return {
        "architectures": ["EncoderDecoderModel"],
        "model_type": "encoder-decoder",
        "is_encoder_decoder": True,
        "encoder": encoder,
        "decoder": decoder,
        "decoder_start_token_id": special.bos,
        "bos_token_id": special.bos,
        "eos_token_id": special.eos,
        "pad_token_id": config.pad_token_id,
        "vocab_size": config.vocab_size,
    }


def seq2seq_tensors(model: Pretrained, decoder_layers: int | None = None) -> dict:
    """The ``EncoderDecoderModel`` state dict: ``encoder.*`` (``XLMRobertaModel``, with a fresh
    pooler) and ``decoder.*`` (``XLMRobertaForCausalLM``, the tied ``lm_head.decoder`` left
    out as ``save_pretrained`` leaves it)."""
    model = unpadded(model)
    config = model.config
    parts = [
        Part("encoder.", ENCODER_RULES, range(config.num_layers)),
        Part(
            "decoder.",
            (*RULES, *CROSS_ATTENTION_RULES),
            decoder_layers_of(config, decoder_layers),
        ),
    ]
    return {**export_tensors(model.params, parts), **fresh_pooler(config, "encoder.")}


def write_seq2seq(
    model: Pretrained, path: str | os.PathLike, decoder_layers: int | None = None
) -> None:
    """Writes the ``EncoderDecoderModel`` folder (with the tokenizer, if the model has one);
    ``path`` must not exist yet."""
    check_xlmr_tokenizer(model.config, model.tokenizer)
    special = export_ids(model.config, model.tokenizer)
    hf_config = seq2seq_config(model.config, decoder_layers, special)
    tensors = seq2seq_tensors(model, decoder_layers)
    write_folder(path, hf_config, tensors, model.tokenizer)
