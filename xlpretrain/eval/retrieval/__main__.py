"""`python -m xlpretrain.eval.retrieval --workdir DIR --data PATH [--format tsv|tatoeba|bucc]
[--layer N] [--pooling P] [--json]`: cross-lingual sentence retrieval of a checkpoint (`tsv`,
the default, and `tatoeba`) or bitext mining (`bucc`); the formats and tables are the package's
(`xlpretrain.eval.retrieval`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

import xlpretrain  # light: `xlpretrain.load` imports JAX on first use
from xlpretrain.core import programs
from xlpretrain.data.corpora.folders import ParallelSource
from xlpretrain.eval.alignment import retrieval_accuracy
from xlpretrain.eval.benchmarks import TatoebaSource, read_mining_sets
from xlpretrain.eval.mining import mining_f1
from xlpretrain.eval.retrieval import FORMATS, format_mining_table, format_table, parallel_dir


def main(argv: Sequence[str] | None = None) -> None:
    parser = programs.ArgumentParser(
        prog="python -m xlpretrain.eval.retrieval",
        description="Cross-lingual sentence retrieval accuracy@1, both directions, per pair; "
        "or bitext-mining F1 (--format bucc).",
    )
    parser.add_argument(
        "--workdir", required=True, help="a training workdir or an xlpretrain checkpoint folder"
    )
    parser.add_argument(
        "--data",
        required=True,
        help="tsv: a folder with parallel/<l1>-<l2>.tsv, or that folder; tatoeba, bucc: the "
        "folder of the benchmark's files",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="tsv",
        help="tsv: <l1>-<l2>.tsv pair files; tatoeba: tatoeba.<l1>-<l2>.<l1> and .<l2>; bucc: "
        "<l1>-<l2>.<split>.<l1>, .<l2> and .gold",
    )
    parser.add_argument(
        "--layer", type=int, help="hidden state to pool (0 = embeddings; default num_layers // 2)"
    )
    parser.add_argument("--pooling", choices=("mean", "cls"), default="mean")
    parser.add_argument("--pairs", help="comma-separated subset, e.g. eng-deu,eng-fra")
    parser.add_argument(
        "--max-lines",
        type=int,
        help="use the first N usable lines of each pair (bucc: of each side, and the gold "
        "pairs among them)",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        help="bucc: mine the pairs scoring at least this (e.g. the best threshold of another "
        "split) instead of each set's best threshold on its own gold",
    )
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per forward pass")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.format != "bucc" and args.threshold is not None:
        parser.error("--threshold applies to --format bucc only")

    programs.quiet_libraries()
    pairs = args.pairs.split(",") if args.pairs else None
    if args.format == "bucc":
        sets = read_mining_sets(args.data, pairs=pairs)
        model = xlpretrain.load(args.workdir, batch_size=args.batch_size)
        results = mining_f1(
            model,
            sets,
            layer=args.layer,
            pooling=args.pooling,
            threshold=args.threshold,
            max_lines=args.max_lines,
        )
        print(json.dumps(results, indent=2) if args.json else format_mining_table(results))
        return
    if args.format == "tatoeba":
        source = TatoebaSource.from_dir(args.data, pairs=pairs)
    else:
        source = ParallelSource.from_dir(parallel_dir(args.data), pairs=pairs)
    model = xlpretrain.load(args.workdir, batch_size=args.batch_size)
    results = retrieval_accuracy(
        model, source, layer=args.layer, pooling=args.pooling, max_lines=args.max_lines
    )
    for line in source.summary():  # bad lines: skipped and counted, never silently
        print(f"data: {line}", file=sys.stderr)
    print(json.dumps(results, indent=2) if args.json else format_table(results))


if __name__ == "__main__":
    programs.run(main)
