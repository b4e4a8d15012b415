"""Sentence-pair classification fine-tuning (XNLI, PAWS-X) with cross-lingual transfer.

`python -m xlpretrain.eval.finetune --config configs/finetune_pairs.py --workdir DIR
[--config.a.b=v]`

Trains a `PairClassifier` head on a pre-trained encoder (`init.path`: a training workdir or a
checkpoint folder) with the pairs of one language (`data.train_language`) and measures accuracy
on every evaluation language (zero-shot transfer). Runs on pre-training's loop
(`xlpretrain.training.finetuning`): running the same command again resumes from DIR's latest
checkpoint.
Writes `DIR/results.json`, the logged steps to `DIR/metrics.jsonl` (and TensorBoard), the
checkpoints to `DIR/checkpoints/`, the log to `DIR/finetune.log` and the config to
`DIR/config.json`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from absl import flags
from ml_collections import config_flags

from xlpretrain.core import programs
from xlpretrain.training import cli, finetuning
from xlpretrain.training.finetune_plan import resolve_finetuning


def main(argv: Sequence[str]) -> None:
    del argv
    programs.setup_logging()
    cfg, workdir = FLAGS.config, os.path.abspath(FLAGS.workdir)
    cli.run_task(
        workdir,
        lambda: resolve_finetuning(cfg),
        lambda plan: finetuning.build(plan, workdir),
        finetuning.run,
        "finetune.log",
    )


def define_flags() -> None:
    """The CLI's flags, defined only when run as a program (importing defines none)."""
    config_flags.DEFINE_config_file(
        "config", None, "Config file (configs/finetune_pairs.py[:ARG]).", lock_config=True
    )
    flags.DEFINE_string(
        "workdir", None, "Output folder: results.json, metrics.jsonl, checkpoints/, config.json."
    )
    flags.mark_flags_as_required(["config", "workdir"])


FLAGS = flags.FLAGS

if __name__ == "__main__":
    define_flags()
    cli.run(main)
