"""`python -m xlpretrain.data.prepare (--mono_dir DIR | --parallel_dir DIR | --mono_tfds NAME
| --parallel_tfds NAME)... (--tokenizer MODEL | --vocab_size N) --out STORE [--workers N]
[--shard I/N | --beam]`: tokenize a corpus once into a store that training reads by random
access (`--config.data.store=STORE`; layout in `xlpretrain.data.corpora.store`).
`--verify --out STORE` reads every shard back against the manifest.

The inputs and the flags that read them are in docs/data.md; how the work is split and resumed
in this package's `__init__`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from xlpretrain.core import programs
from xlpretrain.data.corpora import store as store_lib
from xlpretrain.data.prepare import prepare, tfds_input

PROGRAM = "python -m xlpretrain.data.prepare"


def _shard_argument(text: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I/N, e.g. 0/8, got {text!r}") from None
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"I/N needs 0 <= I < N, got {text!r}")
    return index, count


def _fields(text: str) -> tuple[str, str]:
    fields = tuple(part.strip() for part in text.split(","))
    if len(fields) != 2 or not all(fields):
        raise argparse.ArgumentTypeError(f"expected two feature names A,B, got {text!r}")
    return fields


def main(argv: Sequence[str] | None = None) -> None:
    parser = programs.ArgumentParser(
        prog=PROGRAM,
        description="Tokenize a corpus once into a store that training reads by random access "
        "(--config.data.store=STORE); or check a store's every byte (--verify).",
    )
    parser.add_argument(
        "--mono_dir", default="", help="folder of <lang>.txt, <lang>.jsonl or <lang>.parquet"
    )
    parser.add_argument(
        "--parallel_dir", default="", help="folder of <l1>-<l2>.tsv, .jsonl or .parquet pairs"
    )
    parser.add_argument(
        "--mono_tfds",
        action="append",
        default=[],
        metavar="NAME[@SPLIT][=LANG]",
        help="a TFDS dataset of documents (repeatable); =LANG for all its records, else each "
        "record's --language_field",
    )
    parser.add_argument(
        "--parallel_tfds",
        action="append",
        default=[],
        metavar="NAME[@SPLIT][=L1-L2]",
        help="a TFDS dataset of pairs (repeatable); =L1-L2 for all its records, else each "
        "record's --pair_language_fields",
    )
    parser.add_argument("--tfds_data_dir", default="", help="where the TFDS datasets are")
    parser.add_argument(
        "--language_field", default="language", help="a --mono_tfds record's language feature"
    )
    parser.add_argument(
        "--pair_text_fields",
        type=_fields,
        default=(),
        help="a pair record's two texts (a <l1>-<l2>.jsonl object, .parquet row or "
        "--parallel_tfds record; default: the pair's codes, as TFDS's Translation names them, "
        "or source,target for TFDS records that name their languages)",
    )
    parser.add_argument(
        "--pair_language_fields",
        type=_fields,
        default=(),
        help="the features naming a --parallel_tfds record's two languages",
    )
    parser.add_argument(
        "--tokenizer", default="", help="a SentencePiece model or a Hugging Face tokenizer.json"
    )
    parser.add_argument("--vocab_size", type=int, default=0, help="train a tokenizer of N ids")
    parser.add_argument("--out", required=True, help="the store folder (created or resumed)")
    parser.add_argument("--workers", type=int, default=1, help="processes tokenizing pieces")
    parser.add_argument("--shard", type=_shard_argument, default=(0, 1), help="job I of N")
    parser.add_argument("--shard_mb", type=float, default=64.0, help="input MB per piece")
    parser.add_argument(
        "--max_line_bytes", type=int, default=1_000_000, help="longer lines are skipped"
    )
    parser.add_argument(
        "--sentences_per_language",
        type=int,
        default=10_000,
        help="tokenizer training sample per language (with --vocab_size)",
    )
    parser.add_argument(
        "--character_coverage",
        type=float,
        default=0.9995,
        help="share of the sample's characters the trained tokenizer covers, the rest <unk> "
        "(with --vocab_size; SentencePiece's default)",
    )
    parser.add_argument(
        "--text_field",
        default="text",
        help="the document of a .jsonl or .parquet record, or of a --mono_tfds record",
    )
    parser.add_argument(
        "--beam",
        action="store_true",
        help="run the pieces as an Apache Beam pipeline; other flags (--runner=..., "
        "--direct_num_workers=N, ...) are its pipeline options",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="read every shard of the store --out and compare its size and SHA-256 with the "
        "manifest's (a run checks sizes only)",
    )
    args, rest = parser.parse_known_args(argv)
    if rest and not args.beam:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.verify:
        return _verify(args.out, args.workers if args.workers > 1 else 8)
    tfds_options = dict(data_dir=args.tfds_data_dir)
    manifest = prepare(
        out=args.out,
        mono_dir=args.mono_dir,
        parallel_dir=args.parallel_dir,
        mono_tfds=[
            tfds_input(
                store_lib.MONO,
                spec,
                text_fields=(args.text_field,),
                language_fields=(args.language_field,),
                **tfds_options,
            )
            for spec in args.mono_tfds
        ],
        parallel_tfds=[
            tfds_input(
                store_lib.PARALLEL,
                spec,
                text_fields=args.pair_text_fields,
                language_fields=args.pair_language_fields,
                **tfds_options,
            )
            for spec in args.parallel_tfds
        ],
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
        workers=args.workers,
        shard=args.shard,
        shard_mb=args.shard_mb,
        max_line_bytes=args.max_line_bytes,
        sentences_per_language=args.sentences_per_language,
        character_coverage=args.character_coverage,
        text_field=args.text_field,
        pair_text_fields=args.pair_text_fields,
        beam_options=rest if args.beam else None,
    )
    if manifest is None:
        print(f"{args.out}: pieces of other jobs are still missing; the last job writes the "
              "manifest")  # fmt: skip
        return
    for kind in (store_lib.MONO, store_lib.PARALLEL):
        for key, entry in manifest.get(kind, {}).items():
            skipped = sum(entry["skipped"].values())
            print(f"{kind} {key}: {entry['lines']} lines, {entry['tokens']} tokens, "
                  f"{skipped} skipped, {len(entry['shards'])} shards")  # fmt: skip
    print(f"store: {os.path.abspath(args.out)} (--config.data.store={args.out})")


def _verify(store: str, workers: int) -> None:
    """Each shard that differs from the manifest on a line, and what repairs the store."""
    checked, resized, changed = store_lib.verify_store(store, workers)
    for problem in (*resized, *changed):
        print(problem)
    if not (resized or changed):
        print(f"{os.path.abspath(store)}: all {checked} shards match the manifest")
        return
    repair = "run the same prepare command again: it redoes just their pieces"
    if changed:  # a run checks sizes only: it would keep a shard whose bytes changed in place
        repair = f"delete the {len(changed)} whose SHA-256 differs, then {repair}"
    differ = f"{len(resized) + len(changed)} of {checked} shards differ from the manifest"
    programs.exit_with(f"{differ} ({os.path.abspath(store)}): {repair}", programs.FAILED)


if __name__ == "__main__":
    programs.run(main)
