"""`python -m xlpretrain.eval.xtreme COMMAND [flags]`: the XTREME benchmark.

`run --config configs/xtreme.py[:PRESET] --init WORKDIR --data XTREME_DIR --out OUT
[--tasks xnli,panx,...] [--labels DIR]` fine-tunes a pre-trained model on each task, zero-shot
from English, into `OUT/<task>/` (each a workdir that resumes; a finished task is not redone),
writes every test language's predictions in XTREME's submission layout (`OUT/predictions/`) and
every language's dev set's (`OUT/dev_predictions/`), scores them into `OUT/dev_results.json`
(evaluate.py's JSON of dev, and the dev score each task selected on) and, where test labels are
found (`--labels`), `OUT/results.json` (evaluate.py's JSON of test), `OUT/results.md` and
`OUT/results.png` (`xlpretrain.training.xtreme_run`), and prints which
table is which and where the test predictions go.

`score --predictions DIR --labels DIR --output FILE [--version xtreme|xtreme-r]` scores the
prediction files of any model against the gold labels and writes the JSON that
google-research/xtreme's evaluate.py writes (`xlpretrain.eval.xtreme.score`), then prints a
table. Each command is an entry of `COMMANDS`: the first argument picks it, its flags follow.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from absl import app, flags

from xlpretrain.core import programs
from xlpretrain.eval.xtreme import score

PROGRAM = "python -m xlpretrain.eval.xtreme"
FLAGS = flags.FLAGS


def _parse_flags(argv: list[str]) -> list[str]:
    """absl's flags from `argv`; a flag error ends the program in one line, exit status 2."""
    try:
        return FLAGS(argv)
    except flags.Error as error:
        programs.exit_with(str(error))


def _absl_program(define: Callable[[], None], main: Callable[[Sequence[str]], None]) -> None:
    """Defines a command's flags and runs `main` with them parsed from `sys.argv`, its user
    errors reported in one line."""
    define()

    def reporting(argv: Sequence[str]) -> None:
        with programs.reported():
            main(argv)

    app.run(reporting, flags_parser=_parse_flags)


# --- score ----------------------------------------------------------------------------------


def define_score_flags() -> None:
    flags.DEFINE_string(
        "predictions", None, "Folder of <task>/test-<lang>.<tsv|json|jsonl> prediction files."
    )
    flags.DEFINE_string("labels", None, "Folder of the gold labels, laid out as --predictions.")
    flags.DEFINE_string("output", None, "JSON file to write, as evaluate.py's --output_file.")
    flags.DEFINE_enum("version", "xtreme", list(score.VERSIONS), "Which benchmark's tasks.")
    flags.mark_flags_as_required(["predictions", "labels", "output"])


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


def score_main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {' '.join(argv[1:])}")
    programs.setup_logging()
    report = score.score(Path(FLAGS.predictions), Path(FLAGS.labels), FLAGS.version)
    output = Path(FLAGS.output)
    if output.parent != Path():
        os.makedirs(output.parent, exist_ok=True)
    with open(output, "w") as file:
        json.dump(report.results, file, indent=2)
    print(format_table(report))
    print(f"wrote {output}")


# --- run ------------------------------------------------------------------------------------


def define_run_flags() -> None:
    from ml_collections import config_flags

    config_flags.DEFINE_config_file(
        "config", None, "Config file (configs/xtreme.py[:PRESET]).", lock_config=True
    )
    flags.DEFINE_string("init", None, "The pre-trained model: a training workdir or checkpoint.")
    flags.DEFINE_string("data", None, "XTREME's folder, as its download script leaves it.")
    flags.DEFINE_string("out", None, "Output folder: <task>/, predictions/, results.*")
    flags.DEFINE_string("tasks", "", "Comma-separated tasks to run (default: the config's).")
    flags.DEFINE_string(
        "labels",
        "",
        "The test answers, laid out as evaluate.py's --label_folder (<task>/test-<lang>.*): "
        "scored into the test table (default: data.labels_dir, else XTREME_DIR/labels).",
    )
    flags.mark_flags_as_required(["config", "init", "data", "out"])


def summary(finished, out: str) -> str:
    """What `run` prints: the dev table, the dev score each task selected on, then the test
    table, or where the test predictions go without test labels."""
    from xlpretrain.eval.xtreme import tables

    lines = []
    if finished.dev is not None:
        title = "dev (every language's dev set where XTREME ships one):"
        lines += [title, format_table(finished.dev)]
    if finished.selected:
        lines += ["", "selected on dev:", tables.selection_markdown(finished.selected).rstrip()]
    if finished.test is None:
        lines += ["", f"test: {tables.NO_TEST}"]
    else:
        lines += ["", f"test (against {finished.labels}):", format_table(finished.test)]
    lines += [
        "",
        f"test predictions: {os.path.join(out, 'predictions')}",
        f"wrote {os.path.join(out, 'results.json') + ', ' if finished.test else ''}"
        f"{os.path.join(out, 'dev_results.json')}, results.md, results.png",
    ]
    return "\n".join(lines)


def run_main(argv: Sequence[str]) -> None:
    from xlpretrain.training import cli, xtreme_run
    from xlpretrain.training.task_plan import resolve_xtreme

    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {' '.join(argv[1:])}")
    programs.setup_logging()
    out = os.path.abspath(FLAGS.out)
    cfg = FLAGS.config.unlock()
    cfg.init.path, cfg.data.dir = FLAGS.init, FLAGS.data
    if FLAGS.labels:
        cfg.data.labels_dir = os.path.abspath(FLAGS.labels)

    def run(plan) -> None:
        finished = xtreme_run.run(plan, out)
        if finished is None:
            return
        xtreme_run.write_tables(finished, out, model=plan.init_path)
        print(summary(finished, out))

    cli.run_task(
        out, lambda: resolve_xtreme(cfg, FLAGS.tasks), lambda plan: plan, run, "xtreme.log"
    )


# --- The commands ------------------------------------------------------------------------------

COMMANDS: dict[str, Callable[[], None]] = {
    "run": lambda: _absl_program(define_run_flags, run_main),
    "score": lambda: _absl_program(define_score_flags, score_main),
}


def main(argv: Sequence[str]) -> None:
    """Runs the command `argv[1]` with the flags after it."""
    if len(argv) < 2 or argv[1] not in COMMANDS:
        given = f"unknown command {argv[1]!r}" if len(argv) > 1 else "no command"
        programs.exit_with(f"{given}: expected one of {', '.join(COMMANDS)} ({PROGRAM} COMMAND)")
    sys.argv = [f"{argv[0]} {argv[1]}", *argv[2:]]  # absl reads the flags from sys.argv
    COMMANDS[argv[1]]()


if __name__ == "__main__":
    main(sys.argv)
