"""Hugging Face XLM-R / ModernBERT import/export and checkpoint merging: ``python -m
xlpretrain.convert {from-hf,to-hf,to-hf-seq2seq,merge}``.

``from_hf`` turns an HF ``XLMRobertaForMaskedLM`` or ``ModernBertForMaskedLM`` folder into an
xlpretrain checkpoint folder (``folder.py`` describes it); ``to_hf`` turns a checkpoint folder
or a training workdir into an HF folder that ``transformers`` loads as is
(``XLMRobertaForMaskedLM`` or ``ModernBertForMaskedLM`` by the model's architecture; for an
XLM-E run its discriminator as ``XLMRobertaModel`` / ``ModernBertModel``); ``to_hf_seq2seq``
turns a VECO model into an ``EncoderDecoderModel`` whose decoder cross-attention is VECO's
plug-in (``seq2seq.py``); ``merge`` averages checkpoints of one model into a checkpoint folder
(``merging.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from xlpretrain.convert import folder, hf, modernbert, seq2seq
from xlpretrain.convert.folder import Pretrained
from xlpretrain.convert.merging import merge

# The families `from_hf` converts, by their HF model types: its refusal names them all.
FAMILIES = {"XLM-R / RoBERTa": hf.MODEL_TYPES, "ModernBERT / mmBERT": (modernbert.MODEL_TYPE,)}


def _check_model_type(hf_config: Mapping, source: str | os.PathLike) -> None:
    """Refuses a model type no converter reads, naming every family that one does: a user
    with another model learns what would convert, not only what would not."""
    model_type = hf_config.get("model_type")
    if any(model_type in types for types in FAMILIES.values()):
        return
    known = " and ".join(
        f"{family} (model_type {' or '.join(map(repr, types))})"
        for family, types in FAMILIES.items()
    )
    raise ValueError(
        f"{source}: unsupported architecture: model_type={model_type!r}; from-hf converts "
        f"{known} masked LMs"
    )


def from_hf(
    src: str | os.PathLike, dst: str | os.PathLike, *, allow_missing_head: bool = False
) -> Pretrained:
    """HF folder ``src`` → new checkpoint folder ``dst``; returns the converted model. Its
    ``model_type`` picks the converter: ``modernbert``, else ``hf`` (XLM-R / RoBERTa); any
    other is refused (``_check_model_type``)."""
    folder.new_folder(dst)  # fail before reading a large checkpoint
    path, hf_config = hf.read_config(src)
    _check_model_type(hf_config, path / "config.json")
    if hf_config.get("model_type") == modernbert.MODEL_TYPE:
        model = modernbert.read_hf(src)
    else:
        model = hf.read_hf(src, allow_missing_head=allow_missing_head)
    folder.write(model, dst)
    return model


def to_hf(src: str | os.PathLike, dst: str | os.PathLike) -> Pretrained:
    """Checkpoint folder or training workdir ``src`` → new HF folder ``dst``, of the model's
    architecture (``config.architecture``)."""
    folder.new_folder(dst)  # fail before reading a large checkpoint
    hf.safetensors_writer()
    model = folder.read(src)
    if model.config.architecture == "modernbert":
        modernbert.write_hf(model, dst)
    else:
        hf.write_hf(model, dst)
    return model


def to_hf_seq2seq(
    src: str | os.PathLike, dst: str | os.PathLike, *, decoder_layers: int | None = None
) -> Pretrained:
    """VECO checkpoint folder or training workdir ``src`` → new HF ``EncoderDecoderModel``
    folder ``dst``, the decoder built from the last ``decoder_layers`` layers (default: all)."""
    folder.new_folder(dst)  # fail before reading a large checkpoint
    hf.safetensors_writer()
    model = folder.read(src)
    seq2seq.write_seq2seq(model, dst, decoder_layers)
    return model


__all__ = ["Pretrained", "from_hf", "merge", "to_hf", "to_hf_seq2seq"]
