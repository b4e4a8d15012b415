"""evaluate.py's scores as a text table for a terminal, and the `score` command (of `python -m
xlpretrain.finetune` and `python -m xlpretrain.eval.xtreme`): score a prediction folder against
a label folder and write the JSON evaluate.py writes."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from absl import flags

from xlpretrain.core import programs
from xlpretrain.eval.xtreme import score


def format_table(report: score.Report) -> str:
    """Each task's languages, `avg_metric` and averages, then the group scores, then what was
    left out."""
    results, lines = report.results, []
    tasks = {name: s for name, s in results.items() if isinstance(s, dict)}
    width = max([len("task"), *(len(name) for name in results)])
    lines.append(f"{'task':<{width}}  {'langs':>5}  {'metric':>6}  averages")
    for name, scores in tasks.items():
        averages = ", ".join(
            f"{key[4:]} {value:.2f}"
            for key, value in scores.items()
            if key.startswith("avg_") and key != "avg_metric"
        )
        languages = len(next((v for v in scores.values() if isinstance(v, dict)), {}))
        metric = f"{scores['avg_metric']:.2f}" if "avg_metric" in scores else "-"
        lines.append(f"{name:<{width}}  {languages:>5}  {metric:>6}  {averages}")
    for name, value in results.items():
        if name not in tasks:
            lines.append(f"{name:<{width}}  {'':>5}  {value:6.2f}")
    for task, absent in report.missing.items():
        lines.append(f"incomplete: {task} lacks {', '.join(absent)} (not in the group scores)")
    lines += [f"ignored: {what}" for what in report.ignored]
    return "\n".join(lines)


def score_to_file(predictions: str, labels: str, output: str, version: str) -> str:
    """Scores `predictions` against `labels` (`score.score`), writes evaluate.py's JSON to
    `output` and returns what to print: the table and where it went."""
    report = score.score(Path(predictions), Path(labels), version)
    path = Path(output)
    if path.parent != Path():
        os.makedirs(path.parent, exist_ok=True)
    with open(path, "w") as file:
        json.dump(report.results, file, indent=2)
    return f"{format_table(report)}\nwrote {path}"


def define_score_flags() -> None:
    """The `score` command's flags."""
    flags.DEFINE_string(
        "predictions", None, "Folder of <task>/test-<lang>.<tsv|json|jsonl> prediction files."
    )
    flags.DEFINE_string("labels", None, "Folder of the gold labels, laid out as --predictions.")
    flags.DEFINE_string("output", None, "JSON file to write, as evaluate.py's --output_file.")
    flags.DEFINE_enum("version", "xtreme", list(score.VERSIONS), "Which benchmark's tasks.")
    flags.mark_flags_as_required(["predictions", "labels", "output"])


def score_main(argv: Sequence[str]) -> None:
    """The `score` command, its flags parsed."""
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {' '.join(argv[1:])}")
    programs.setup_logging()
    given = flags.FLAGS
    print(score_to_file(given.predictions, given.labels, given.output, given.version))
