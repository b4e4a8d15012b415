"""Cross-lingual sentence retrieval and bitext mining of a checkpoint, as `python -m
xlpretrain.eval.retrieval` (`__main__`) runs them: the formats it reads, where a folder's pair
files are, and the tables it prints.

- `tsv`: accuracy@1 both ways on a folder of `<l1>-<l2>.tsv` files;
- `tatoeba`: the same on Tatoeba's `tatoeba.<l1>-<l2>.<l1>` / `.<l2>` file pairs;
- `bucc`: precision, recall and F1 of margin-based bitext mining on BUCC-style sets.

The measures themselves: `xlpretrain.eval.alignment` and `xlpretrain.eval.mining`; the
benchmark files: `xlpretrain.eval.benchmarks`. The format is named, not guessed: a folder may
hold more than one layout, and a wrong guess would score something else without a word.
"""

from __future__ import annotations

import os

from xlpretrain.data.corpora.sources import DataError

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
