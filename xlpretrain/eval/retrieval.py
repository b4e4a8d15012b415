"""`python -m xlpretrain.eval.retrieval --workdir DIR --data PATH [--format tsv|tatoeba|bucc]
[--layer N] [--pooling P] [--json]`: cross-lingual sentence retrieval of a checkpoint.

- `tsv` (default): accuracy@1 both ways on a folder of `<l1>-<l2>.tsv` files;
- `tatoeba`: the same on Tatoeba's `tatoeba.<l1>-<l2>.<l1>` / `.<l2>` file pairs;
- `bucc`: precision, recall and F1 of margin-based bitext mining on BUCC-style sets.

The measures themselves: `xlpretrain.eval.alignment` and `xlpretrain.eval.mining`; the
benchmark files: `xlpretrain.eval.benchmarks`. The format is named, not guessed: a folder may
hold more than one layout, and a wrong guess would score something else without a word.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

import xlpretrain  # light: `xlpretrain.load` imports JAX on first use
from xlpretrain.core import programs
from xlpretrain.data.folders import ParallelSource
from xlpretrain.data.sources import DataError
from xlpretrain.eval.alignment import retrieval_accuracy
from xlpretrain.eval.benchmarks import TatoebaSource, read_mining_sets
from xlpretrain.eval.mining import mining_f1

FORMATS = ("tsv", "tatoeba", "bucc")


def parallel_dir(path: str | os.PathLike[str]) -> str:
    """The folder of pair files: `PATH/parallel` if there is one, else PATH itself."""
    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise DataError(f"data path {path} does not exist")
    nested = os.path.join(path, "parallel")
    if os.path.isdir(nested):
        return nested
    if not os.path.isdir(path) or not any(name.endswith(".tsv") for name in os.listdir(path)):
        raise DataError(
            f"{path} holds neither a parallel/ folder nor <l1>-<l2>.tsv files: --data takes a "
            "corpus folder with parallel/<l1>-<l2>.tsv, or that parallel/ folder itself (for "
            "Tatoeba or BUCC files, pass --format tatoeba or --format bucc)"
        )
    return path


def format_table(results: dict) -> str:
    """The results as a fixed-width table, one pair per line, then the average."""
    width = max(len("average"), *(len(stem) for stem in results["pairs"]))
    lines = [
        f"retrieval accuracy@1, layer {results['layer']}, {results['pooling']} pooling",
        f"{'pair':<{width}}  {'l1->l2':>7}  {'l2->l1':>7}  {'mean':>7}  {'n':>6}  {'skipped':>7}",
    ]
    for stem, s in results["pairs"].items():
        lines.append(
            f"{stem:<{width}}  {s['l1_to_l2']:7.4f}  {s['l2_to_l1']:7.4f}  {s['mean']:7.4f}  "
            f"{s['n']:6d}  {s['skipped']:7d}"
        )
    a = results["average"]
    lines.append(
        f"{'average':<{width}}  {a['l1_to_l2']:7.4f}  {a['l2_to_l1']:7.4f}  {a['mean']:7.4f}"
    )
    return "\n".join(lines)


def format_mining_table(results: dict) -> str:
    """BUCC-style results as a fixed-width table, one set per line."""
    width = max(len("set"), *(len(name) for name in results["sets"]))
    rule = "best on each set's gold" if results["threshold_from"] == "gold" else "given"
    lines = [
        f"bitext mining, layer {results['layer']}, {results['pooling']} pooling, ratio margin "
        f"k={results['margin_neighbours']}, threshold {rule}",
        f"{'set':<{width}}  {'precision':>9}  {'recall':>7}  {'f1':>7}  {'threshold':>9}  "
        f"{'mined':>7}  {'gold':>7}  {'n_l1':>7}  {'n_l2':>7}",
    ]
    for name, s in results["sets"].items():
        threshold = "-" if s["threshold"] is None else f"{s['threshold']:.4f}"
        lines.append(
            f"{name:<{width}}  {s['precision']:9.4f}  {s['recall']:7.4f}  {s['f1']:7.4f}  "
            f"{threshold:>9}  {s['mined']:7d}  {s['gold']:7d}  {s['n_l1']:7d}  {s['n_l2']:7d}"
        )
    return "\n".join(lines)


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
