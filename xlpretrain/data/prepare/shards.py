"""One piece's work and how a re-run recognises it as done: its shards, written under a
temporary name and renamed, then a JSON with what the piece was made from and each shard's
size and SHA-256. A piece is a pure function of its bytes and the store's tokenizer, so any
process (a worker, a job of an array, a Beam worker) may run it.
"""

from __future__ import annotations

import json
import os

from xlpretrain.data.corpora import store as store_lib
from xlpretrain.data.prepare.inputs import RECORD_FILES, Task
from xlpretrain.data.prepare.readers import Reading, documents
from xlpretrain.data.tokenizer import Tokenizer


def run_task(task: Task, out: str, reading: Reading) -> None:
    """Tokenizes one piece into its shards in `out` (a pure function of its bytes and the
    store's tokenizer), then writes its JSON: nothing is left under a final name unless it
    finished."""
    done_path = os.path.join(out, task.name + ".json")
    if os.path.exists(done_path):  # from other settings: it must not vouch for the new shards
        os.remove(done_path)
    tokenizer = Tokenizer.load(store_lib.tokenizer_path(out))
    shards = {}
    for key, (texts, skipped) in sorted(documents(task, reading).items()):
        path = os.path.join(out, task.shard(key))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        sides = zip(*texts, strict=True)  # a pair's first texts, then its second
        columns = [tokenizer.encode_batch(list(side), num_threads=1) for side in sides]
        encoded = list(zip(*columns, strict=True))
        shards[key] = {
            "lines": len(texts),
            "tokens": sum(len(ids) for column in columns for ids in column),
            "skipped": skipped,
            **store_lib.write_shard(path, encoded),
        }
    done = {"made_from": made_from(task, reading), "shards": shards}
    os.makedirs(os.path.dirname(done_path), exist_ok=True)
    with open(f"{done_path}.tmp{os.getpid()}", "w") as f:
        json.dump(done, f, sort_keys=True)
    os.replace(f"{done_path}.tmp{os.getpid()}", done_path)


def made_from(task: Task, reading: Reading) -> dict:
    """What a piece was made from, kept in its JSON: a re-run with other inputs or settings
    redoes the piece instead of keeping it."""
    settings = {"piece": [task.start, task.end], "max_line_bytes": reading.max_line_bytes}
    if task.tfds is not None:
        spec = task.tfds
        return {
            "input": spec.where,
            "records": spec.records,
            "version": spec.version,
            "language": spec.language,
            "text_fields": list(spec.text_fields),
            "language_fields": list(spec.language_fields),
            **settings,
        }
    return {
        "input": os.path.basename(task.source),
        "input_bytes": os.path.getsize(task.source),
        "fields": list(reading.fields(task)) if task.source.endswith(RECORD_FILES) else [],
        **settings,
    }


def finished(task: Task, out: str, reading: Reading) -> bool:
    """Whether the piece's shards were written, from these inputs and settings."""
    try:
        with open(os.path.join(out, task.name + ".json")) as f:
            done = json.load(f)
    except (OSError, ValueError):
        return False
    if done.get("made_from") != made_from(task, reading):
        return False
    for key, shard in done["shards"].items():
        path = os.path.join(out, task.shard(key))
        if not os.path.isfile(path) or os.path.getsize(path) != shard["bytes"]:
            return False
    return True
