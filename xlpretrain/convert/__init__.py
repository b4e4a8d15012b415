"""Hugging Face XLM-R / ModernBERT / BERT import/export and checkpoint merging: ``python -m
xlpretrain.convert {from-hf,to-hf,to-hf-seq2seq,merge}``.

``from_hf`` turns an HF ``XLMRobertaForMaskedLM``, ``ModernBertForMaskedLM`` or
``BertForMaskedLM`` folder into an xlpretrain checkpoint folder (``folder.py`` describes it);
``to_hf`` turns a checkpoint folder or a training workdir into an HF folder that
``transformers`` loads as is (the masked LM of the model's backbone; for an XLM-E run its
discriminator as ``XLMRobertaModel`` / ``ModernBertModel`` / ``BertModel``; for a fine-tuning
task's workdir, ``task_workdir.py``, the backbone's class of its task kind); ``to_hf_seq2seq``
turns a VECO model into an ``EncoderDecoderModel`` whose decoder cross-attention is VECO's
plug-in (``seq2seq.py``); ``merge`` averages checkpoints of one model into a checkpoint folder
(``merging.py``).
"""

from __future__ import annotations

import os

from xlpretrain import backbones
from xlpretrain.convert import folder, hf, seq2seq, task_workdir
from xlpretrain.convert.folder import Params, Pretrained
from xlpretrain.convert.hf import TaskModel
from xlpretrain.convert.merging import merge


def from_hf(
    src: str | os.PathLike, dst: str | os.PathLike, *, allow_missing_head: bool = False
) -> Pretrained:
    """HF folder ``src`` → new checkpoint folder ``dst``; returns the converted model. Its
    ``model_type`` picks the backbone whose converter reads it; any other is refused naming
    every family that converts (``backbones.for_hf``)."""
    folder.new_folder(dst)  # fail before reading a large checkpoint
    path, hf_config = hf.read_config(src)
    backbone = backbones.for_hf(hf_config, str(path / "config.json"))
    model = backbone.read_hf(src, allow_missing_head)
    folder.write(model, dst)
    return model


def to_hf(src: str | os.PathLike, dst: str | os.PathLike) -> Pretrained:
    """Checkpoint folder, training workdir or fine-tuning task workdir ``src`` → new HF folder
    ``dst``, by the model's backbone (``config.architecture``): a task workdir as the class of
    its kind, with its selected params and labels."""
    folder.new_folder(dst)  # fail before reading a large checkpoint
    hf.safetensors_writer()
    if task_workdir.is_task_workdir(src):
        tuned = task_workdir.read(src)
        write_hf_task(tuned.model, tuned.head, tuned.kind, list(tuned.labels), dst)
        return tuned.model
    model = folder.read(src)
    backbones.of(model.config).write_hf(model, dst)
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


def write_hf_task(
    model: Pretrained, head: Params, kind: str, labels: list[str], dst: str | os.PathLike
) -> None:
    """A fine-tuned model — its encoder ``model`` (an LM head, if any, left out) and its task
    ``head`` (``model.task_heads``) — as its backbone's HF class of task ``kind``, with
    ``labels`` (token classification's; QA has none), in the new HF folder ``dst``."""
    folder.new_folder(dst)
    backbones.of(model.config).write_hf_task(model, head, kind, labels, dst)


def read_hf_task(src: str | os.PathLike) -> TaskModel:
    """An HF token-classification or QA folder of any family that converts (by its
    ``model_type``): the task module's params, its kind and labels."""
    path, hf_config = hf.read_config(src)
    return backbones.for_hf(hf_config, str(path / "config.json")).read_hf_task(path)


__all__ = [
    "Pretrained", "TaskModel", "from_hf", "merge", "read_hf_task", "to_hf", "to_hf_seq2seq",
    "write_hf_task",
]  # fmt: skip
