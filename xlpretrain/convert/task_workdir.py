"""A fine-tuning task's workdir (``finetune.task_run``) as an export reads it.

Beside the run's ``config.json`` and ``checkpoints/``, the run writes before its first step::

    task.json         {"kind", "labels" (id order; QA: []), "task_head" (the family's, as
                      built), "model" (the ModelConfig fields, as model.json holds them),
                      "languages" (what lang_ids index)}
    tokenizer.model   the pre-trained model's tokenizer (either kind), as in a checkpoint
    or .json          folder

so the fine-tuned model is whole in its workdir: the pre-trained folder (``init.path``) may move
or go, and the config is the one the run built (its model overrides applied), not the
pre-trained one. Its parameters are the ones selected on the development set
(``best/best.json`` names ``best/step_N/``) if the run selected, else its latest finished
checkpoint's: what the run predicted its test sets with.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from xlpretrain.convert import folder
from xlpretrain.convert.folder import Params, Pretrained
from xlpretrain.convert.hf import SEQUENCE_CLASSIFICATION, abstract_task_params, head_of
from xlpretrain.data.tokenizer import Tokenizer
from xlpretrain.model.config import ModelConfig

TASK_FILE = folder.TASK_FILE
BEST_DIR = "best"  # as `finetune.task_run.BEST`
BEST_RECORD = "best.json"


@dataclasses.dataclass(frozen=True)
class TaskRecord:
    """What a task workdir's params need to be a model: the task kind and its labels, the head
    style and the model config the module was built with, and the languages ``lang_ids``
    index."""

    kind: str
    labels: tuple[str, ...]
    task_head: str
    config: ModelConfig
    languages: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class FineTuned:
    """A task workdir's fine-tuned model: its encoder (``model``, layers stacked, no LM head),
    its ``head``, and where the params came from (``source``, for messages)."""

    model: Pretrained
    head: Params
    kind: str
    labels: tuple[str, ...]
    source: Path


def record_task(workdir: str | os.PathLike, record: TaskRecord, tokenizer: Tokenizer) -> None:
    """Writes ``task.json`` and the tokenizer into ``workdir`` (the same again on a resume)."""
    workdir = Path(workdir)
    fields = {
        "kind": record.kind,
        "labels": list(record.labels),
        "task_head": record.task_head,
        "model": folder.config_record(record.config),
        "languages": list(record.languages),
    }
    (workdir / TASK_FILE).write_text(json.dumps(fields, indent=2) + "\n")
    tokenizer.save(workdir / tokenizer.FILE)


def is_task_workdir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a fine-tuning task's workdir (it has a ``task.json``)."""
    return (Path(path) / TASK_FILE).is_file()


def read_record(workdir: str | os.PathLike) -> TaskRecord:
    path = Path(workdir) / TASK_FILE
    try:
        fields = json.loads(path.read_text())
        return TaskRecord(
            fields["kind"],
            tuple(fields["labels"]),
            fields["task_head"],
            folder.recorded_config(fields["model"], path),
            tuple(fields["languages"]),
        )
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a task record: {type(error).__name__}: {error}") from error


def read(workdir: str | os.PathLike) -> FineTuned:
    """The fine-tuned model of a task workdir of a kind (``tasks.KINDS``): the
    selected params (``best/``), else the latest finished checkpoint's."""
    from xlpretrain import tasks  # here: reading a pre-trained folder imports no task's loss

    workdir = Path(workdir).absolute()
    record = read_record(workdir)
    if record.kind not in tasks.KINDS:
        raise ValueError(
            f"{workdir} fine-tunes {record.kind}, a kind of task this installation does not "
            f"know ({', '.join(tasks.KINDS)})"
        )
    config = record.config
    if record.kind == SEQUENCE_CLASSIFICATION and config.cross_attention:
        raise ValueError(
            f"{workdir}: a VECO model's pair classifier (cross-attention, plugged in or out) "
            "has no Hugging Face task class: Hugging Face has no VECO encoder"
        )
    abstract = abstract_task_params(config, record.kind, record.task_head, len(record.labels))
    source = selected_params(workdir)
    if source.parent.name == BEST_DIR:  # best/step_N holds the params tree itself
        params = folder.restore(source, abstract)
    else:
        params = folder.restore(source, {"params": abstract}, partial=True)["params"]
    backbone = params["backbone"]
    if not config.scan_layers:
        backbone = folder.stack_layers(backbone, config)
    model = Pretrained(
        dataclasses.replace(config, scan_layers=True),
        backbone,
        folder.tokenizer_or_none(workdir),
        record.languages if config.num_languages else (),
    )
    return FineTuned(model, head_of(params), record.kind, record.labels, source)


def selected_params(workdir: Path) -> Path:
    """The Orbax folder of the params a finished run predicted with: ``best/step_N`` as
    ``best.json`` names it, else the latest finished checkpoint's ``state``."""
    best = workdir / BEST_DIR / BEST_RECORD
    if best.is_file():
        return workdir / BEST_DIR / json.loads(best.read_text())["path"]
    finished = folder.finished_steps(workdir) if (workdir / folder.CHECKPOINTS_DIR).is_dir() else []
    if not finished:
        raise FileNotFoundError(
            f"{workdir} holds no parameters yet (no {BEST_DIR}/{BEST_RECORD}, no finished "
            f"checkpoint in {folder.CHECKPOINTS_DIR}/): run the task first"
        )
    return workdir / folder.CHECKPOINTS_DIR / str(finished[-1]) / "state"
