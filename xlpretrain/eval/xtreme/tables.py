"""An XTREME report as people read it: `results.md`, the table as the papers lay it out (one row
per model, a column per task with its headline metric, then the average), each task's languages
below it; and `results.png`, each task's score per language.

Both are drawn from evaluate.py's JSON (`score.Report.results`), nothing else, so they say what
`results.json` says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The metric a task's headline is, as the papers' tables name it.
HEADLINES = {"f1": "F1", "accuracy": "Acc.", "exact_match": "EM", "map@20": "MAP@20"}


def task_results(results: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The tasks of evaluate.py's JSON (its other keys are group scores)."""
    return {name: value for name, value in results.items() if isinstance(value, dict)}


def per_language(scores: Mapping[str, Any]) -> tuple[str, dict[str, float]]:
    """A task's headline metric (F1 where it has one, else accuracy, else its first) and its
    value in each language: evaluate.py's JSON holds each metric's languages."""
    metrics = [key for key, value in scores.items() if isinstance(value, dict)]
    metric = next(
        (key for key in ("f1", "accuracy") if key in metrics), metrics[0] if metrics else ""
    )
    return metric, {lang: float(v) for lang, v in scores.get(metric, {}).items()}


def headline(scores: Mapping[str, Any]) -> tuple[str, str]:
    """A task's column in the papers' table: its name and value, F1 / EM for QA (whose
    `avg_metric` is their mean), else its `avg_metric`."""
    if "avg_exact_match" in scores and "avg_f1" in scores:
        return "F1 / EM", f"{scores['avg_f1']:.1f} / {scores['avg_exact_match']:.1f}"
    metric, _ = per_language(scores)
    value = f"{scores['avg_metric']:.1f}" if "avg_metric" in scores else "–"
    return HEADLINES.get(metric, metric), value


def markdown(results: Mapping[str, Any], model: str) -> str:
    """The table of a model's results; `avg` is the mean of the tasks' `avg_metric`s, the
    figure evaluate.py averages (QA's the mean of F1 and EM)."""
    tasks = task_results(results)
    headlines = {name: headline(scores) for name, scores in tasks.items()}
    columns = [f"{name} ({label})" for name, (label, _) in headlines.items()]
    values = [value for _, value in headlines.values()]
    metrics = [s["avg_metric"] for s in tasks.values() if "avg_metric" in s]
    average = f"{sum(metrics) / len(metrics):.1f}" if metrics else "–"
    lines = [
        "| model | " + " | ".join(columns) + " | avg |",
        "|---|" + "---:|" * (len(columns) + 1),
        f"| {model} | " + " | ".join(values) + f" | {average} |",
    ]
    groups = {name: value for name, value in results.items() if name not in tasks}
    if groups:
        lines += ["", "| " + " | ".join(groups) + " |", "|" + "---:|" * len(groups)]
        lines.append("| " + " | ".join(f"{value:.1f}" for value in groups.values()) + " |")
    for name, task_scores in tasks.items():
        metric, scores = per_language(task_scores)
        lines += ["", f"**{name}** ({metric} per language)", ""]
        lines += ["| " + " | ".join(scores) + " |", "|" + "---:|" * len(scores)]
        lines.append("| " + " | ".join(f"{value:.1f}" for value in scores.values()) + " |")
    return "\n".join(lines) + "\n"


def plot(results: Mapping[str, Any], path: str, title: str) -> None:
    """`path` (PNG): a panel per task, its headline metric per language."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    tasks = task_results(results)
    figure = Figure(figsize=(12, 2.6 * max(1, len(tasks))), layout="constrained")
    figure.suptitle(title)
    for axes, (name, scores) in zip(
        figure.subplots(max(1, len(tasks)), 1, squeeze=False)[:, 0], tasks.items(), strict=False
    ):
        metric, values = per_language(scores)
        axes.bar(list(values), list(values.values()), color="tab:blue")
        if "avg_metric" in scores:
            axes.axhline(scores["avg_metric"], color="tab:red", linestyle="--", label="average")
            axes.legend(loc="upper right")
        axes.set_ylabel(HEADLINES.get(metric, metric))
        axes.set_title(name)
        axes.set_ylim(0, 100)
        axes.tick_params(axis="x", labelsize=7, rotation=90)
    FigureCanvasAgg(figure).print_png(path)
