"""The fine-tuning tasks by name, one entry each (seqio's `TaskRegistry` is the model): a task
is its kind (`xlpretrain.tasks`: how examples become rows, the head, the loss, the metric), its
source (XTREME's layout or a user's folder), the writer of its submission files, its config
section's defaults and the protocols it runs under. The config schema makes one section per
entry from its defaults (`schema`); the suite reads the rest (`suite`). Adding a task is one
`register` call here and, where it wants one, a preset; adding a kind is its module in
`xlpretrain.tasks` and a line there.

The defaults of XTREME's tasks are its own baselines for XLM-R base (google-research/xtreme
scripts/train_*.sh: 8 rows × 4 accumulated = 32 per step, QA 4 × 8; no warm-up and no weight
decay but for QA: 500 warm-up steps, weight decay 1e-4; run_tag.py steps its scheduler before
the optimizer, `scheduler_first`). English dev is scored every `--save_steps` (XNLI 100, PAWS-X
200, PAN-X 1,000, UD-POS 500) and the best kept (`--save_only_best_checkpoint`), then compared
with the final model (`--eval_all_checkpoints`); train_qa.sh's `--save_steps -1` scores nothing
during training and predicts with the final model. Seeds: run_tag.py gets `--seed 1`,
run_classify.py and run_squad.py their default 42. The retrieval tasks are not fine-tuned: the
pre-trained encoder's sentence embeddings after the 8th layer (run_bucc2018.sh: the `<s>`
state, run_tatoeba.sh: the mean over the row's tokens; batches of 100).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from xlpretrain import tasks as task_kinds
from xlpretrain.data.xtreme import (
    write_id_pairs,
    write_label_lines,
    write_qa_predictions,
    write_tag_lines,
)
from xlpretrain.finetune import folder_source
from xlpretrain.finetune.folder_source import FolderSource
from xlpretrain.finetune.xtreme_source import XtremeSource, source

RETRIEVAL = "retrieval"  # the kind of a task scored on sentence embeddings, not fine-tuned
Source = XtremeSource | FolderSource


@dataclasses.dataclass(frozen=True)
class Task:
    """One task: see the module docstring."""

    name: str
    kind: str  # a fine-tuning kind (`tasks.KINDS`) or RETRIEVAL
    source: Source
    writer: Callable[[Any, Any], None]  # (path, one language's predictions): its file
    defaults: Mapping[str, Any]  # of its config section (`schema`)

    @property
    def fine_tuned(self) -> bool:
        return self.kind != RETRIEVAL

    @property
    def users(self) -> bool:
        """Whether its data is a user's folder (scored here, beside chance) rather than
        XTREME's (scored as evaluate.py scores it)."""
        return isinstance(self.source, FolderSource)

    @property
    def protocols(self) -> tuple[str, ...]:
        return self.source.protocols

    @property
    def suffix(self) -> str:
        """Of its submission files: `test-<lang>.<suffix>`."""
        return "json" if self.kind == task_kinds.qa.KIND.name else "tsv"


TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Adds `task`; a name already taken or a kind unknown is refused."""
    if task.name in TASKS:
        raise ValueError(f"task {task.name!r} is registered already")
    if task.fine_tuned:
        task_kinds.get(task.kind)
    TASKS[task.name] = task
    return task


def get(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(TASKS)}")
    return TASKS[name]


_PAIRS = task_kinds.classification.KIND.name
_TAGGING = task_kinds.tagging.KIND.name
_QA = task_kinds.qa.KIND.name
_SENTENCES = dict(
    epochs=5.0, learning_rate=2e-5, batch_size=32, loader_batch_size=8, max_length=128, seed=42
)
_TAGS = dict(
    epochs=10.0, learning_rate=2e-5, batch_size=32, loader_batch_size=8, max_length=128, seed=1,
    scheduler_first=True,
)  # fmt: skip
_SQUAD = dict(
    eval_every_steps=-1, select="none", seed=42, epochs=3.0, learning_rate=3e-5, batch_size=32,
    loader_batch_size=4, max_length=384, warmup_steps=500, weight_decay=1e-4,
)  # fmt: skip
_EMBEDDINGS = dict(layer=8, batch_size=100)
# A user's own data: pre-training's recipe of ERNIE-M for fine-tuning (10 % warm-up, weight
# decay 0.01, layer-wise decay 0.8), 3 epochs, dev (where the folder has one) once an epoch.
_FOLDER = dict(
    epochs=3.0, learning_rate=2e-5, batch_size=32, max_length=128, warmup_fraction=0.1,
    weight_decay=0.01, layer_decay=0.8,
)  # fmt: skip

_XTREME = (
    ("xnli", _PAIRS, write_label_lines, dict(_SENTENCES, eval_every_steps=100)),
    ("pawsx", _PAIRS, write_label_lines, dict(_SENTENCES, eval_every_steps=200)),
    ("panx", _TAGGING, write_tag_lines, dict(_TAGS, eval_every_steps=1000)),
    ("udpos", _TAGGING, write_tag_lines, dict(_TAGS, eval_every_steps=500)),
    ("xquad", _QA, write_qa_predictions, _SQUAD),
    ("mlqa", _QA, write_qa_predictions, _SQUAD),
    ("tydiqa", _QA, write_qa_predictions, _SQUAD),
    ("bucc2018", RETRIEVAL, write_id_pairs, dict(_EMBEDDINGS, pooling="cls")),
    ("tatoeba", RETRIEVAL, write_label_lines, dict(_EMBEDDINGS, pooling="mean")),
)
_QA_FOLDER = dict(_FOLDER, max_length=384)
_FOLDERS = (
    ("pairs", _PAIRS, folder_source.PAIRS, write_label_lines, _FOLDER),
    ("tagging", _TAGGING, folder_source.TAGGING, write_tag_lines, _FOLDER),
    ("extractive_qa", _QA, folder_source.QUESTIONS, write_qa_predictions, _QA_FOLDER),
)
for _name, _kind, _writer, _defaults in _XTREME:
    register(Task(_name, _kind, source(_name), _writer, _defaults))
for _entry in _FOLDERS:
    register(Task(*_entry))
