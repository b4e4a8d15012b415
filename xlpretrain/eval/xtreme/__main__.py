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

from xlpretrain.core import programs
from xlpretrain.eval.xtreme import report

PROGRAM = "python -m xlpretrain.eval.xtreme"
MOVED = (
    "fine-tuning moved: python -m xlpretrain.finetune run --config configs/xtreme.py[:PRESET] "
    "--init WORKDIR --data XTREME_DIR --out OUT (the same flags; the same OUT resumes)"
)


def main(argv: Sequence[str]) -> None:
    """Runs `score` with the flags after it; `run` is refused, naming its new program."""
    if len(argv) > 1 and argv[1] == "run":
        programs.exit_with(MOVED)
    if len(argv) < 2 or argv[1] != "score":
        given = f"unknown command {argv[1]!r}" if len(argv) > 1 else "no command"
        programs.exit_with(f"{given}: expected score ({PROGRAM} score; {MOVED})")
    sys.argv = [f"{argv[0]} score", *argv[2:]]  # absl reads the flags from sys.argv
    programs.run_absl(report.define_score_flags, report.score_main)


if __name__ == "__main__":
    main(sys.argv)
