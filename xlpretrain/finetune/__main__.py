"""`python -m xlpretrain.finetune COMMAND [flags]`: fine-tuning, every task and data layout.

`run --config CONFIG[:PRESET] --init WORKDIR --data DIR --out OUT [--tasks a,b,...]
[--labels DIR]` fine-tunes a pre-trained model on each task of the config (`configs/xtreme.py`:
XTREME's, DIR its download folder; `configs/finetune_pairs.py`: a user's folder of `<lang>/`
task files), each in `OUT/<task>/` (a workdir that resumes; a finished task is not redone),
writes every test language's predictions in XTREME's submission layout (`OUT/predictions/`) and
scores them: XTREME's tasks as its evaluate.py does, into `OUT/dev_results.json` (every
language's dev set, and the dev score each task selected on) and, where test labels are found
(`--labels`), `OUT/results.json`, `OUT/results.md` and `OUT/results.png`; a user's task beside
chance in `OUT/<task>/results.json` (`xlpretrain.finetune.suite`). It prints which table is
which and where the test predictions go.

`score --predictions DIR --labels DIR --output FILE [--version xtreme|xtreme-r]` scores the
prediction files of any model against the gold labels and writes the JSON that
google-research/xtreme's evaluate.py writes (`xlpretrain.eval.xtreme.score`), then prints a
table. Each command is an entry of `COMMANDS`: the first argument picks it, its flags follow.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

from absl import flags

from xlpretrain.core import programs
from xlpretrain.eval.xtreme import report

PROGRAM = "python -m xlpretrain.finetune"
FLAGS = flags.FLAGS


# --- run ------------------------------------------------------------------------------------


def define_run_flags() -> None:
    from ml_collections import config_flags

    config_flags.DEFINE_config_file(
        "config",
        None,
        "Config file (configs/xtreme.py[:PRESET], configs/finetune_pairs.py[:PRESET]).",
        lock_config=True,
    )
    flags.DEFINE_string("init", None, "The pre-trained model: a training workdir or checkpoint.")
    flags.DEFINE_string(
        "data", None, "XTREME's folder as its download script leaves it, or a user's task folder."
    )
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
    """What `run` prints: each user task's scores beside chance, the dev table, the dev score
    each task selected on, then the test table, or where the test predictions go without test
    labels."""
    from xlpretrain.eval.xtreme import tables
    from xlpretrain.finetune import suite

    lines = suite.user_lines(finished)
    if finished.dev is not None:
        title = "dev (every language's dev set where XTREME ships one):"
        lines += [title, report.format_table(finished.dev)]
    if finished.selected:
        lines += ["", "selected on dev:", tables.selection_markdown(finished.selected).rstrip()]
    if finished.test is not None:
        lines += ["", f"test (against {finished.labels}):", report.format_table(finished.test)]
    elif finished.xtreme:
        lines += ["", f"test: {tables.NO_TEST}"]
    tables_written = ", results.md, results.png" if finished.xtreme else ""
    lines += [
        "",
        f"test predictions: {os.path.join(out, 'predictions')}",
        f"wrote {os.path.join(out, 'results.json') + ', ' if finished.test else ''}"
        f"{os.path.join(out, 'dev_results.json')}{tables_written}",
    ]
    return "\n".join(lines)


def run_main(argv: Sequence[str]) -> None:
    from xlpretrain.finetune import suite
    from xlpretrain.finetune.plan import resolve
    from xlpretrain.training import cli

    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {' '.join(argv[1:])}")
    programs.setup_logging()
    out = os.path.abspath(FLAGS.out)
    cfg = FLAGS.config.unlock()
    cfg.init.path, cfg.data.dir = FLAGS.init, FLAGS.data
    if FLAGS.labels:
        cfg.data.labels_dir = os.path.abspath(FLAGS.labels)

    def run(plan) -> None:
        finished = suite.run(plan, out)
        if finished is None:
            return
        suite.write_tables(finished, out, model=plan.init_path)
        print(summary(finished, out))

    cli.run_task(out, lambda: resolve(cfg, FLAGS.tasks), lambda plan: plan, run, "finetune.log")


# --- The commands ------------------------------------------------------------------------------


def run_command() -> None:
    """`run`: its flags parsed as every training program's (a config error names the key)."""
    from xlpretrain.training import cli

    define_run_flags()
    cli.run(run_main)


COMMANDS: dict[str, Callable[[], None]] = {
    "run": run_command,
    "score": lambda: programs.run_absl(report.define_score_flags, report.score_main),
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
