"""A prepared store: the corpus tokenized once (`python -m xlpretrain.data.prepare`), read by
random access.

Layout of a store folder::

    manifest.json                 format, tokenizer fingerprint, per key its shards (path,
                                  lines, tokens, bytes, SHA-256) and skipped lines by kind
    tokenizer.model               the tokenizer the ids come from: a SentencePiece model, or
    (or tokenizer.json)           a tokenizer.json with its tokenizer_config.json
    mono/<lang>/<i>.array_record  usable lines as token ids, int32, BLOCK lines to a record
    parallel/<l1>-<l2>/<i>.array_record
                                  the same for pairs, both sides of each
    <kind>/<key>/<dataset>.<i>.array_record
                                  the same from piece i of a TFDS dataset (see `prepare`)

A record holds a block of BLOCK consecutive lines (the last of a shard fewer): their count,
their lengths (a pair's two), then their ids. ArrayRecord keeps an index entry per record in
memory for every shard it reads, so blocks keep that index at a fraction of a byte per line;
and rows are packed from consecutive lines, so one block read serves a whole row (the last
block read is kept per key).

A key's shards are its pieces' in input order, each the usable lines of its piece in order;
with one input file per key (a folder), the store's line `n` of a key is the folder source's
line `n`, and rows built from either are the same. Beside the shards, a small JSON per piece
(`<kind>/<key>/<i>.json`, or `tfds/<dataset>/<i>.json` for a TFDS piece, which may write
several keys) records what it was made from; `prepare` resumes from them.
Start-up reads the manifest and checks each shard's size (one `stat` a shard); a shard's
ArrayRecord index is read when it is first used, and `verify_store` reads every byte. Token
ids are the run's own (`Tokenizer` ids), so the step loop never runs the tokenizer; `line`
decodes them for the tools that need text (retrieval).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from xlpretrain.data.corpora.sources import (
    DataError,
    FileStats,
    MonolingualBase,
    Pair,
    ParallelBase,
    parse_pair,
)
from xlpretrain.data.pretraining.streams import MONO, PARALLEL
from xlpretrain.data.tokenizer import FILES, Tokenizer, tokenizer_file

FORMAT = "xlpretrain-store/2"  # /2: shards carry their size and SHA-256
BLOCK = 32  # lines per record
MANIFEST = "manifest.json"


class StoreError(DataError):
    """A store cannot be used as it is: the message names the file."""


def fingerprint(tokenizer: str | os.PathLike[str]) -> str:
    """The SHA-256 of a tokenizer file: what a store's ids were made with."""
    return file_digest(tokenizer)


def tokenizer_path(store: str | os.PathLike[str]) -> str:
    """The tokenizer file the store keeps; an error if it has none (or both kinds)."""
    try:
        found = tokenizer_file(store)
    except ValueError as error:
        raise StoreError(f"{error}: prepare the store again") from None
    if found is None:
        raise StoreError(
            f"{store} has no tokenizer ({' or '.join(FILES)}): prepare the store again"
        )
    return str(found)


def encode_block(lines: Sequence[Sequence[np.ndarray]]) -> bytes:
    """One record: `len(lines)`, each line's side lengths, then all ids (a line is a tuple
    of one array, or of a pair's two)."""
    sides = [np.asarray(side, np.int32) for line in lines for side in line]
    header = [len(lines), *(len(side) for side in sides)]
    return np.concatenate([np.asarray(header, np.int32), *sides]).astype(np.int32).tobytes()


def decode_block(record: bytes, sides: int) -> list[tuple[np.ndarray, ...]]:
    """The lines of a record written by `encode_block` with `sides` arrays per line."""
    ids = np.frombuffer(record, dtype=np.int32)
    count = int(ids[0])
    first = 1 + count * sides
    ends = (first + np.cumsum(ids[1:first])).tolist()
    starts = [first, *ends][: len(ends)]
    # Plain slices: half the time of np.split, which a block read pays per line.
    arrays = [ids[start:end] for start, end in zip(starts, ends, strict=True)]
    return [tuple(arrays[i * sides : (i + 1) * sides]) for i in range(count)]


def write_shard(path: str, lines: Sequence[Sequence[np.ndarray]]) -> dict[str, Any]:
    """Writes lines (each a tuple of id arrays) as the shard `path`, in blocks of BLOCK, under a
    temporary name renamed at the end; returns its size and SHA-256 for the manifest."""
    from array_record.python.array_record_module import ArrayRecordWriter

    temporary = f"{path}.tmp{os.getpid()}"
    writer = ArrayRecordWriter(temporary, "group_size:1")
    for start in range(0, len(lines), BLOCK):
        writer.write(encode_block(lines[start : start + BLOCK]))
    writer.close()
    written = {"bytes": os.path.getsize(temporary), "sha256": file_digest(temporary)}
    os.replace(temporary, path)
    return written


def file_digest(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file, read in 16 MB pieces (hashlib releases the GIL, so threads can
    check shards side by side)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while piece := f.read(16 << 20):
            digest.update(piece)
    return digest.hexdigest()


def verify_store(
    store: str | os.PathLike[str], workers: int = 8
) -> tuple[int, list[str], list[str]]:
    """Reads every shard the manifest names and compares its size and SHA-256 with the
    manifest's: (shards checked, a line per shard missing or of another size, a line per shard
    of the right size whose bytes changed). Start-up checks sizes only; this finds damage that
    keeps the size, before a run reads it. (Preparing again redoes the pieces of the first
    kind; it keeps those of the second, as it checks sizes only, unless they are deleted.)"""
    import concurrent.futures

    store = os.path.abspath(store)
    manifest = read_manifest(store)
    shards = [
        shard
        for kind in (MONO, PARALLEL)
        for entry in manifest.get(kind, {}).values()
        for shard in entry["shards"]
    ]

    def problem(shard: dict) -> tuple[str, str] | None:
        path = os.path.join(store, shard["path"])
        try:
            _check_size(path, shard["bytes"])
        except StoreError as error:
            return "size", str(error)
        if file_digest(path) != shard["sha256"]:
            return "bytes", f"{path} has the manifest's size but not its SHA-256: its bytes changed"
        return None

    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
        problems = [p for p in pool.map(problem, shards) if p]
    resized = [line for kind, line in problems if kind == "size"]
    changed = [line for kind, line in problems if kind == "bytes"]
    return len(shards), resized, changed


def write_manifest(store: str, manifest: dict[str, Any]) -> None:
    """Writes the manifest last and atomically: a store with one is complete."""
    temporary = os.path.join(store, MANIFEST + ".tmp")
    with open(temporary, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(temporary, os.path.join(store, MANIFEST))


def read_manifest(store: str | os.PathLike[str]) -> dict[str, Any]:
    """The store's manifest, checked for the format this version reads."""
    path = os.path.join(store, MANIFEST)
    if not os.path.isdir(store):
        raise StoreError(f"data.store {store}: no such folder (prepare one with python -m "
                         "xlpretrain.data.prepare)")  # fmt: skip
    if not os.path.isfile(path):
        raise StoreError(
            f"{path} is missing: {store} is not a finished store (run python -m "
            "xlpretrain.data.prepare again with the same arguments to finish it)"
        )
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as error:
        raise StoreError(f"{path} cannot be read: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise StoreError(
            f"{path}: format {found!r}, but this version of xlpretrain reads {FORMAT!r}; "
            "prepare the store again"
        )
    return manifest


class _Shards:
    """One key's lines over its shard files, by global index; readers open on first use (so
    that the object travels to worker processes as paths and counts), and the last block read
    is kept."""

    def __init__(self, paths: Sequence[str], counts: Sequence[int], sides: int):
        self.paths = list(paths)
        self.counts = list(counts)  # lines per shard
        self.ends = np.cumsum(counts, dtype=np.int64)
        self.sides = sides
        self._readers: dict[int, Any] = {}
        self._block: tuple[tuple[int, int], list] | None = None

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_readers": {}, "_block": None}

    def read(self, index: int) -> tuple[np.ndarray, ...]:
        if not 0 <= index < len(self):
            raise IndexError(f"line {index} out of range ({len(self)} lines)")
        shard = int(np.searchsorted(self.ends, index, side="right"))
        offset = index - (int(self.ends[shard - 1]) if shard else 0)
        where = (shard, offset // BLOCK)
        cached = self._block  # one read: grain's threads may replace it meanwhile
        if cached is None or cached[0] != where:
            cached = self._block = (where, self._read_block(*where))
        return cached[1][offset % BLOCK]

    def _read_block(self, shard: int, block: int) -> list:
        path = self.paths[shard]
        try:
            reader = self._readers.get(shard)
            if reader is None:
                reader = self._readers[shard] = _open(path, -(-self.counts[shard] // BLOCK))
            return decode_block(reader.read([block])[0], self.sides)
        except RuntimeError as error:  # what array_record raises for a damaged file
            raise StoreError(f"{path} cannot be read as ArrayRecord: {error}") from None


def _check_size(path: str, size: int) -> None:
    """A shard that is missing, or whose size is not the manifest's (a torn copy, a file
    rewritten), stops the run at start-up: one `stat` a shard."""
    try:
        found = os.path.getsize(path)
    except FileNotFoundError:
        raise StoreError(f"{path} is missing from the store: prepare it again") from None
    if found != size:
        raise StoreError(
            f"{path} has {found} bytes, but the manifest says {size}: the file was changed or "
            "cut short after the store was prepared; prepare it again"
        )


def _open(path: str, count: int):
    from array_record.python.array_record_module import ArrayRecordReader

    if not os.path.isfile(path):
        raise StoreError(f"{path} is missing from the store: prepare it again")
    reader = ArrayRecordReader(path, "readahead_buffer_size:0")
    if reader.num_records() != count:
        raise StoreError(
            f"{path} holds {reader.num_records()} records, but the manifest's lines make {count}: "
            "the file was changed after the store was prepared; prepare it again"
        )
    return reader


def _load(store: str, kind: str, manifest: dict, keys: Iterable[str]):
    sides = 2 if kind == PARALLEL else 1
    shards, stats = {}, {}
    for key in keys:
        entry = manifest[kind][key]
        paths = [os.path.join(store, shard["path"]) for shard in entry["shards"]]
        for path, shard in zip(paths, entry["shards"], strict=True):
            _check_size(path, shard["bytes"])
        counts = [shard["lines"] for shard in entry["shards"]]
        skipped = entry["skipped"]
        stats[key] = FileStats(
            path=os.path.join(store, kind, key),
            total=sum(counts) + sum(skipped.values()),
            used=sum(counts),
            **skipped,
        )
        if sum(counts):
            shards[key] = _Shards(paths, counts, sides)
    if not shards:
        raise StoreError(f"{os.path.join(store, MANIFEST)}: no {kind} data with a usable line")
    return shards, stats


class _StoreSource:
    """What both store sources share: the store's tokenizer, to decode ids into text."""

    def _tokenizer(self) -> Tokenizer:
        if getattr(self, "_decoder", None) is None:
            self._decoder = Tokenizer.load(tokenizer_path(self.path))
        return self._decoder

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_decoder": None}


class StoreMonolingual(_StoreSource, MonolingualBase):
    """A store's monolingual data: one record of token ids per line, by language."""

    _UNITS = ("languages", "documents")

    def tokens(self, lang: str, index: int, tokenizer: Tokenizer) -> np.ndarray:
        return self._file(lang).read(index)[0]

    def line(self, lang: str, index: int) -> str:
        return self._tokenizer().decode(self.tokens(lang, index, self._tokenizer()))


class StoreParallel(_StoreSource, ParallelBase):
    """A store's parallel data: one record of both sides' token ids per pair."""

    _UNITS = ("language pairs", "pairs")

    def token_pair(
        self, pair: Pair, index: int, tokenizer: Tokenizer
    ) -> tuple[np.ndarray, np.ndarray]:
        first, second = self._file(pair).read(index)
        return first, second

    def line(self, pair: Pair, index: int) -> tuple[str, str]:
        first, second = self.token_pair(pair, index, self._tokenizer())
        decode = self._tokenizer().decode
        return decode(first), decode(second)


def open_store(
    store: str | os.PathLike[str], kinds: Iterable[str]
) -> tuple[StoreMonolingual | None, StoreParallel | None]:
    """The store's sources of the kinds asked for (`mono`, `parallel`): the manifest is read
    and every shard it names checked to exist with the manifest's size; nothing else is read
    (`verify_store` reads every byte)."""
    store = os.path.abspath(store)
    manifest = read_manifest(store)
    tokenizer_path(store)  # there, as the run's tokenizer may be the store's
    mono = parallel = None
    kinds = set(kinds)
    for kind in kinds:
        if not manifest.get(kind):
            raise StoreError(
                f"{os.path.join(store, MANIFEST)}: the store holds no {kind} data, which the "
                "run's objectives read (prepare it with "
                f"--{'mono_dir' if kind == MONO else 'parallel_dir'})"
            )
    if MONO in kinds:
        shards, stats = _load(store, MONO, manifest, sorted(manifest[MONO]))
        mono = StoreMonolingual(store, shards, stats)
    if PARALLEL in kinds:
        keys = sorted(manifest[PARALLEL], key=parse_pair)  # the folder source's order
        shards, stats = _load(store, PARALLEL, manifest, keys)
        parallel = StoreParallel(
            store,
            {parse_pair(k): v for k, v in shards.items()},
            {parse_pair(k): v for k, v in stats.items()},
        )
    return mono, parallel


def check_tokenizer(store: str | os.PathLike[str], tokenizer: str | os.PathLike[str]) -> None:
    """The run's tokenizer (the file `tokenizer`) must be the one the store's ids come from."""
    manifest = read_manifest(store)
    theirs, ours = manifest["tokenizer"]["sha256"], fingerprint(tokenizer)
    if theirs != ours:
        raise StoreError(
            f"{os.path.join(store, MANIFEST)}: its ids come from a tokenizer with SHA-256 "
            f"{theirs[:12]}…, but the run's ({tokenizer}) is {ours[:12]}…: use the store's "
            "tokenizer (leave tokenizer.path empty in a new workdir) or prepare the store with "
            "this tokenizer"
        )
