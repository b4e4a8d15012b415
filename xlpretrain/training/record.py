"""A resolved config as a run records it: the content of the workdir's `config.json`.

The plan (`plan.resolve`; a fine-tuning task's, `finetune.plan.FineTunePlan.task_plan`) builds
it once from the config it checked and carries it only to be written (`workdir.save_config`,
W&B), compared key by key with the one a workdir holds (the resume guard), or resolved again
into a plan (`plan.resolve_record`: another process's, or the one a checkpoint was trained
with). It is frozen
JSON text, not a mapping: a setting is read from the plan's typed sections, never from here.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from typing import Any

ABSENT = object()  # a key one of two records lacks


def _flat(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            yield from _flat(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1], tree


@dataclasses.dataclass(frozen=True)
class ConfigRecord:
    """A config as JSON text (tuples as lists), in its keys' order."""

    text: str

    @classmethod
    def of(cls, tree: Mapping[str, Any]) -> ConfigRecord:
        """The record of a config given as nested JSON values (a parsed `config.json`)."""
        return cls(json.dumps(tree))

    @classmethod
    def read(cls, path: str) -> ConfigRecord:
        with open(path) as f:
            return cls.of(json.load(f))

    def tree(self) -> dict[str, Any]:
        """A fresh copy of the config as nested JSON values: to write it, to hand it to W&B or
        to resolve it again (`plan.resolve_record`)."""
        return json.loads(self.text)

    def with_value(self, key: str, value: Any) -> ConfigRecord:
        """The record with dotted `key` (an existing one, which keeps its place) = `value`."""
        tree = self.tree()
        *sections, name = key.split(".")
        node = tree
        for section in sections:
            node = node[section]
        node[name] = value
        return ConfigRecord.of(tree)

    def changes(self, new: ConfigRecord) -> list[tuple[str, Any, Any]]:
        """(dotted key, value here, value in `new`) of every key whose value differs, in key
        order; a key one of the two lacks has the value `ABSENT`."""
        old, now = dict(_flat(self.tree())), dict(_flat(new.tree()))
        return [
            (key, old.get(key, ABSENT), now.get(key, ABSENT))
            for key in sorted(old.keys() | now.keys())
            if old.get(key, ABSENT) != now.get(key, ABSENT)
        ]
