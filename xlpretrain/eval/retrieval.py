"""Cross-lingual sentence retrieval (Tatoeba style): accuracy@1 in both directions.

`python -m xlpretrain.eval.retrieval --workdir DIR --data PATH [--layer N] [--pooling P] [--json]`

Each `<l1>-<l2>.tsv` file is a list of aligned pairs. Both columns are embedded with
`Model.encode`, L2-normalised, and every sentence retrieves its cosine nearest neighbour in the
other column; accuracy@1 is the share that retrieve their own translation (l1→l2 and l2→l1).
The default layer is the middle one (`num_layers // 2`), mean-pooled, as VECO and ERNIE-M
evaluate: without fine-tuning the middle layers align languages best, the top ones are
specialised for the MLM head.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

import xlpretrain  # light: `xlpretrain.load` imports JAX on first use
from xlpretrain.data.sources import DataError, ParallelSource

if TYPE_CHECKING:
    from xlpretrain.api import Model

_SIMILARITY_ROWS = 1024  # rows of the similarity matrix held at once


def default_layer(num_layers: int) -> int:
    """The middle layer's output (state index; 0 is the embeddings)."""
    return num_layers // 2


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


def nearest_neighbour_accuracy(queries: np.ndarray, keys: np.ndarray) -> float:
    """Share of rows i whose cosine nearest neighbour among `keys` is row i (ties: first)."""
    queries = _normalise(queries)
    keys = _normalise(keys)
    hits = 0
    for start in range(0, len(queries), _SIMILARITY_ROWS):
        similarity = queries[start : start + _SIMILARITY_ROWS] @ keys.T
        nearest = similarity.argmax(axis=1)
        hits += int((nearest == np.arange(start, start + len(nearest))).sum())
    return hits / len(queries)


def _normalise(x: np.ndarray) -> np.ndarray:
    # float64: identical sentences must win over merely close ones, whatever the rounding.
    x = np.asarray(x, np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def retrieval_accuracy(
    model: Model,
    source: ParallelSource,
    *,
    layer: int | None = None,
    pooling: str = "mean",
    max_lines: int | None = None,
) -> dict:
    """Accuracy@1 per pair file of `source` and averaged, for an `xlpretrain.api.Model`.

    Returns `{"pairs": {stem: {"l1_to_l2", "l2_to_l1", "mean", "n", "skipped"}}, "average":
    {"l1_to_l2", "l2_to_l1", "mean"}, "layer", "pooling"}`, the average taken over pairs.
    Language codes go to `encode` only for models with language embeddings, which need them.
    """
    if max_lines is not None and max_lines < 1:
        raise ValueError(f"max_lines must be >= 1, got {max_lines}")
    layer = default_layer(model.config.num_layers) if layer is None else layer
    pairs = {}
    for pair in source.pairs:
        count = source.num_lines(pair)
        count = count if max_lines is None else min(count, max_lines)
        columns = list(zip(*(source.line(pair, i) for i in range(count)), strict=True))
        embeddings = [
            model.encode(
                list(texts),
                langs=lang if model.config.num_languages else None,
                layer=layer,
                pooling=pooling,
            )
            for texts, lang in zip(columns, pair, strict=True)
        ]
        forward = nearest_neighbour_accuracy(*embeddings)
        backward = nearest_neighbour_accuracy(*embeddings[::-1])
        pairs[f"{pair[0]}-{pair[1]}"] = {
            "l1_to_l2": forward,
            "l2_to_l1": backward,
            "mean": (forward + backward) / 2,
            "n": count,
            "skipped": source.stats[pair].skipped,
        }
    average = {
        key: float(np.mean([scores[key] for scores in pairs.values()]))
        for key in ("l1_to_l2", "l2_to_l1", "mean")
    }
    return {"pairs": pairs, "average": average, "layer": layer, "pooling": pooling}


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
    parser = argparse.ArgumentParser(
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
    try:
        source = ParallelSource.from_dir(
            parallel_dir(args.data), pairs=args.pairs.split(",") if args.pairs else None
        )
        model = xlpretrain.load(args.workdir, batch_size=args.batch_size)
        results = retrieval_accuracy(
            model, source, layer=args.layer, pooling=args.pooling, max_lines=args.max_lines
        )
    except (DataError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    for line in source.summary():  # bad lines: skipped and counted, never silently
        print(f"data: {line}", file=sys.stderr)
    print(json.dumps(results, indent=2) if args.json else format_table(results))


if __name__ == "__main__":
    main()
