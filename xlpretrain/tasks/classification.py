"""Sentence(-pair) classification (XNLI, PAWS-X): a label per example, from the `<s>` state
(or VECO's plugged-in pair representation), scored by accuracy."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from xlpretrain.data.finetuning.pairs import Encoded, encode_texts
from xlpretrain.data.finetuning.task_examples import PairExample
from xlpretrain.eval.xtreme import score
from xlpretrain.model.task_heads import PairClassifier
from xlpretrain.objectives.declaration import predictions
from xlpretrain.objectives.task_losses import classification_loss
from xlpretrain.tasks.declaration import Encoding, Head, TaskKind


def label_names(examples: Sequence[PairExample]) -> tuple[str, ...]:
    return tuple(sorted({e.label for e in examples if e.label is not None}))


def encode(examples: Sequence[PairExample], encoding: Encoding) -> Encoded:
    """Rows as `data.finetuning.pairs` lays them out; an unlabelled (test) example gets label 0,
    never trained on."""
    ids = {label: i for i, label in enumerate(encoding.labels)}
    labels = np.array([ids.get(e.label, 0) for e in examples], np.int32)
    return encode_texts(
        [e.text_a for e in examples],
        [e.text_b for e in examples],
        labels,
        encoding.tokenizer,
        max_length=encoding.max_length,
        plug_in=encoding.plug_in,
        lang_ids=encoding.lang_ids,
        layout=encoding.layout,
    )


def module(head: Head) -> PairClassifier:
    return PairClassifier(
        head.config, head.num_labels, plug_in=head.plug_in, task_head=head.task_head
    )


def outputs(model: PairClassifier, params, batch):
    return model.apply({"params": params}, batch).argmax(-1)


def decode(argmax: np.ndarray, rows: Encoded, examples, encoding: Encoding) -> list[str]:
    return [encoding.labels[int(i)] for i in argmax[: len(examples)]]


def accuracy(examples: Sequence[PairExample], predicted: Sequence[str]) -> float:
    return score.accuracy([e.label for e in examples], predicted)["accuracy"]


def majority_share(examples: Sequence[PairExample]) -> float:
    """The accuracy of always answering the most frequent label, in percent."""
    counts = Counter(e.label for e in examples)
    return 100.0 * max(counts.values()) / len(examples)


KIND = TaskKind(
    name="sequence_classification",
    label_names=label_names,
    encode=encode,
    module=module,
    loss=classification_loss,
    count=predictions,
    outputs=outputs,
    decode=decode,
    score=accuracy,
    chance=majority_share,
)
