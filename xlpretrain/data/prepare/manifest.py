"""The store's manifest, written last, from the finished pieces' JSONs: what training reads
at start (`store.open_store`) and `--verify` checks shards against.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from xlpretrain.data.corpora import store as store_lib
from xlpretrain.data.prepare.inputs import Task
from xlpretrain.data.tokenizer import Tokenizer

SHARD_FIELDS = ("lines", "tokens", "bytes", "sha256")  # what the manifest keeps of a shard


def write_manifest(tasks: Sequence[Task], out: str) -> dict:
    """The manifest, from the finished pieces' JSONs (every piece must be finished)."""
    tokenizer = store_lib.tokenizer_path(out)
    manifest = {
        "format": store_lib.FORMAT,
        "tokenizer": {
            "sha256": store_lib.fingerprint(tokenizer),
            "vocab_size": Tokenizer.load(tokenizer).vocab_size,
        },
    }
    for task in tasks:
        with open(os.path.join(out, task.name + ".json")) as f:
            done = json.load(f)
        for key, shard in sorted(done["shards"].items()):
            entry = manifest.setdefault(task.kind, {}).setdefault(
                key, {"shards": [], "lines": 0, "tokens": 0, "skipped": {}}
            )
            entry["shards"].append({"path": task.shard(key), **{k: shard[k] for k in SHARD_FIELDS}})
            entry["lines"] += shard["lines"]
            entry["tokens"] += shard["tokens"]
            for kind, count in shard["skipped"].items():
                entry["skipped"][kind] = entry["skipped"].get(kind, 0) + count
    store_lib.write_manifest(out, manifest)
    return manifest
