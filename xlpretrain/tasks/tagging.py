"""Token classification (PAN-X, UD-POS): a label per word, on its first sub-token, scored by
seqeval's span F1 as XTREME scores both tasks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xlpretrain.data.finetuning.task_examples import TaggedSentence
from xlpretrain.data.finetuning.token_labels import TaggedRows, decode_tags, encode_tagged
from xlpretrain.eval.xtreme import score
from xlpretrain.model.task_heads import TokenClassifier
from xlpretrain.objectives.task_losses import labelled_tokens, tagging_loss
from xlpretrain.tasks.declaration import Encoding, Head, TaskKind


def label_names(sentences: Sequence[TaggedSentence]) -> tuple[str, ...]:
    return tuple(sorted({label for s in sentences for label in s.labels or ()}))


def encode(sentences: Sequence[TaggedSentence], encoding: Encoding) -> TaggedRows:
    return encode_tagged(
        sentences,
        encoding.tokenizer,
        {label: i for i, label in enumerate(encoding.labels)},
        max_length=encoding.max_length,
        layout=encoding.layout,
        lang_id=encoding.lang_ids[0],
    )


def module(head: Head) -> TokenClassifier:
    return TokenClassifier(head.config, head.num_labels, head.task_head)


def outputs(model: TokenClassifier, params, batch):
    return model.apply({"params": params}, batch).argmax(-1)


def decode(argmax: np.ndarray, rows: TaggedRows, sentences, encoding: Encoding):
    return decode_tags(argmax[: len(rows)], rows, encoding.labels)


def span_f1(sentences: Sequence[TaggedSentence], predicted: Sequence[Sequence[str]]) -> float:
    return score.span_f1([list(s.labels) for s in sentences], [list(p) for p in predicted])["f1"]


KIND = TaskKind(
    name="token_classification",
    label_names=label_names,
    encode=encode,
    module=module,
    loss=tagging_loss,
    count=labelled_tokens,
    outputs=outputs,
    decode=decode,
    score=span_f1,
)
