"""`python -m xlpretrain.eval.retrieval --workdir DIR --data PATH [--layer N] [--pooling P]
[--json]`: cross-lingual sentence retrieval accuracy@1 of a checkpoint on a folder of
`<l1>-<l2>.tsv` files (the measure itself: `xlpretrain.eval.alignment`).
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
            "corpus folder with parallel/<l1>-<l2>.tsv, or that parallel/ folder itself"
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


def main(argv: Sequence[str] | None = None) -> None:
    parser = programs.ArgumentParser(
        prog="python -m xlpretrain.eval.retrieval",
        description="Cross-lingual sentence retrieval accuracy@1, both directions, per pair.",
    )
    parser.add_argument(
        "--workdir", required=True, help="a training workdir or an xlpretrain checkpoint folder"
    )
    parser.add_argument(
        "--data", required=True, help="a folder with parallel/<l1>-<l2>.tsv, or that folder"
    )
    parser.add_argument(
        "--layer", type=int, help="hidden state to pool (0 = embeddings; default num_layers // 2)"
    )
    parser.add_argument("--pooling", choices=("mean", "cls"), default="mean")
    parser.add_argument("--pairs", help="comma-separated subset, e.g. eng-deu,eng-fra")
    parser.add_argument("--max-lines", type=int, help="use the first N usable lines of each file")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per forward pass")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    programs.quiet_libraries()
    source = ParallelSource.from_dir(
        parallel_dir(args.data), pairs=args.pairs.split(",") if args.pairs else None
    )
    model = xlpretrain.load(args.workdir, batch_size=args.batch_size)
    results = retrieval_accuracy(
        model, source, layer=args.layer, pooling=args.pooling, max_lines=args.max_lines
    )
    for line in source.summary():  # bad lines: skipped and counted, never silently
        print(f"data: {line}", file=sys.stderr)
    print(json.dumps(results, indent=2) if args.json else format_table(results))


if __name__ == "__main__":
    programs.run(main)
