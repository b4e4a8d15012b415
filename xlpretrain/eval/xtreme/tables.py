"""An XTREME report as people read it: `results.md`, the table as the papers lay it out (one row
per model, a column per task with its headline metric, then the average), each task's languages
below it; and `results.png`, each task's score per language.

`markdown` draws one evaluate.py JSON (`score.Report.results`); `report_markdown` and `plot` a
run's tables (`finetune.suite.RunResults.json`): its test table where test labels were found
(`results.json`), its dev table (every language's dev set) and the dev score each task
selected on (`dev_results.json`), so they say what those files say.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The metric a task's headline is, as the papers' tables name it.
HEADLINES = {"f1": "F1", "accuracy": "Acc.", "exact_match": "EM", "map@20": "MAP@20"}
# Each table of a run's results.json, as results.md titles it, in the order it is drawn.
TABLES = {
    "test": "Test",
    "dev": "Dev: every language's dev set where XTREME ships one (zero-shot: the table papers "
    "print beside test)",
}
NO_TEST = (
    "No test labels (a download made by XTREME's scripts has none): submit the test "
    "predictions, `predictions/`, to the XTREME leaderboard as google-research/xtreme's README "
    "says (Leaderboard Submission), or score them with the original test answers: `run` again "
    "with `--labels DIR`, or `python -m xlpretrain.eval.xtreme score`."
)


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


def selection_markdown(selected: Mapping[str, Mapping[str, Any]]) -> str:
    """The dev score each task's checkpoint was selected on, by dev language (English for
    zero-shot; "–": no dev set, the last step predicts)."""
    lines = ["| task | dev language | step | score |", "|---|---|---:|---:|"]
    for task, languages in selected.items():
        for lang, chosen in languages.items():
            value = "–" if chosen["score"] is None else f"{chosen['score']:.1f}"
            lines.append(f"| {task} | {lang} | {chosen['step']} | {value} |")
    return "\n".join(lines) + "\n"


def report_markdown(report: Mapping[str, Any], model: str) -> str:
    """A run's `results.json` as markdown: test (or how to get it scored), dev, then what each
    task selected on."""
    parts = [f"# XTREME: {model}"]
    for name, title in TABLES.items():
        body = markdown(report[name], model) if name in report else None
        if name == "test" and body is None:
            body = NO_TEST + "\n"
        if body is not None:
            parts.append(f"## {title}\n\n{body}")
    if report.get("selected"):
        title = "## The dev score each task selected its checkpoint on"
        parts.append(f"{title}\n\n{selection_markdown(report['selected'])}")
    return "\n".join(parts)


def bars_average(scores: Mapping[str, Any], metric: str) -> float | None:
    """The average line of a task's panel: the metric its bars show, averaged as evaluate.py
    averages it (`avg_<metric>`, over the version's languages; QA's `avg_metric`, the mean of
    F1 and EM, is not what its F1 bars show). None where evaluate.py has no such average."""
    average = scores.get(f"avg_{metric}")
    return None if average is None else float(average)


def plot(report: Mapping[str, Any], path: str, title: str) -> None:
    """`path` (PNG): a panel per task, its headline metric per language, test and dev side by
    side where both are scored."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    drawn = {name: task_results(report[name]) for name in TABLES if name in report}
    names = list(dict.fromkeys(task for tasks in drawn.values() for task in tasks))
    figure = Figure(figsize=(12, 2.6 * max(1, len(names))), layout="constrained")
    figure.suptitle(title)
    panels = figure.subplots(max(1, len(names)), 1, squeeze=False)[:, 0]
    for axes, name in zip(panels, names, strict=False):
        panel(axes, name, {table: tasks[name] for table, tasks in drawn.items() if name in tasks})
    FigureCanvasAgg(figure).print_png(path)


def panel(axes: Any, name: str, scores: Mapping[str, Mapping[str, Any]]) -> None:
    """One task's bars per language, one colour per table (test, dev)."""
    values = {table: per_language(task_scores) for table, task_scores in scores.items()}
    languages = list(dict.fromkeys(lang for _, v in values.values() for lang in v))
    width = 0.8 / len(values)
    colours = {"test": "tab:blue", "dev": "tab:orange"}
    for offset, (table, (metric, by_language)) in enumerate(values.items()):
        x = [languages.index(lang) + offset * width for lang in by_language]
        axes.bar(x, list(by_language.values()), width, color=colours[table], label=table)
        average = bars_average(scores[table], metric)
        if average is not None:
            axes.axhline(average, color=colours[table], linestyle="--",
                         label=f"{table}: average over XTREME's languages")  # fmt: skip
        axes.set_ylabel(HEADLINES.get(metric, metric))
    axes.set_xticks([i + 0.4 - width / 2 for i in range(len(languages))], languages)
    axes.legend(loc="upper right")
    axes.set_title(name)
    axes.set_ylim(0, 100)
    axes.tick_params(axis="x", labelsize=7, rotation=90)
