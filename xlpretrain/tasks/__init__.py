"""The kinds of fine-tuning task, by name: one declaration each (`declaration.TaskKind`), in its
own module; adding one is its module and a line here."""

from __future__ import annotations

from xlpretrain.tasks import classification, qa, tagging
from xlpretrain.tasks.declaration import TaskKind

KINDS: dict[str, TaskKind] = {
    kind.name: kind for kind in (classification.KIND, tagging.KIND, qa.KIND)
}


def get(name: str) -> TaskKind:
    """The task kind named `name`."""
    if name not in KINDS:
        raise ValueError(f"unknown task kind {name!r}; known: {', '.join(KINDS)}")
    return KINDS[name]
