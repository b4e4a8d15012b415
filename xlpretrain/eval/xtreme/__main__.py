"""`python -m xlpretrain.eval.xtreme score --predictions DIR --labels DIR --output FILE
[--version xtreme|xtreme-r]`: scores the prediction files of any model against the gold labels
and writes the JSON that google-research/xtreme's evaluate.py writes
(`xlpretrain.eval.xtreme.score`), then prints a table. The same as `python -m
xlpretrain.finetune score`; fine-tuning (`run`) is `python -m xlpretrain.finetune run`, and
`run` here says so in one line.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from absl import app, flags

from xlpretrain.core import programs
from xlpretrain.eval.xtreme import report, score

PROGRAM = "python -m xlpretrain.eval.xtreme"
MOVED = (
    "fine-tuning moved: python -m xlpretrain.finetune run --config configs/xtreme.py[:PRESET] "
    "--init WORKDIR --data XTREME_DIR --out OUT (the same flags; the same OUT resumes)"
)
FLAGS = flags.FLAGS


def _parse_flags(argv: list[str]) -> list[str]:
    """absl's flags from `argv`; a flag error ends the program in one line, exit status 2."""
    try:
        return FLAGS(argv)
    except flags.Error as error:
        programs.exit_with(str(error))


def define_score_flags() -> None:
    flags.DEFINE_string(
        "predictions", None, "Folder of <task>/test-<lang>.<tsv|json|jsonl> prediction files."
    )
    flags.DEFINE_string("labels", None, "Folder of the gold labels, laid out as --predictions.")
    flags.DEFINE_string("output", None, "JSON file to write, as evaluate.py's --output_file.")
    flags.DEFINE_enum("version", "xtreme", list(score.VERSIONS), "Which benchmark's tasks.")
    flags.mark_flags_as_required(["predictions", "labels", "output"])


def score_main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {' '.join(argv[1:])}")
    programs.setup_logging()
    print(report.score_to_file(FLAGS.predictions, FLAGS.labels, FLAGS.output, FLAGS.version))


def main(argv: Sequence[str]) -> None:
    """Runs `score` with the flags after it; `run` is refused, naming its new program."""
    if len(argv) > 1 and argv[1] == "run":
        programs.exit_with(MOVED)
    if len(argv) < 2 or argv[1] != "score":
        given = f"unknown command {argv[1]!r}" if len(argv) > 1 else "no command"
        programs.exit_with(f"{given}: expected score ({PROGRAM} score; {MOVED})")
    sys.argv = [f"{argv[0]} score", *argv[2:]]  # absl reads the flags from sys.argv
    define_score_flags()

    def reporting(args: Sequence[str]) -> None:
        with programs.reported():
            score_main(args)

    app.run(reporting, flags_parser=_parse_flags)


if __name__ == "__main__":
    main(sys.argv)
