"""Sentence-pair classification fine-tuning (XNLI, PAWS-X) with cross-lingual transfer.

`python -m xlpretrain.eval.finetune --config configs/finetune_pairs.py --workdir DIR
[--config.a.b=v]`

Trains a `PairClassifier` head on a pre-trained encoder (`init.path`: a training workdir or a
checkpoint folder) with the pairs of one language (`data.train_language`) and measures accuracy
on every evaluation language (zero-shot transfer). Runs on pre-training's loop
(`xlpretrain.finetuning`): running the same command again resumes from DIR's latest checkpoint.
Writes `DIR/results.json`, the logged steps to `DIR/metrics.jsonl` (and TensorBoard), the
checkpoints to `DIR/checkpoints/` and the config to `DIR/config.json`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from absl import app, flags
from ml_collections import config_flags

from xlpretrain import finetuning
from xlpretrain.checkpoint import CheckpointError
from xlpretrain.data.sources import DataError
from xlpretrain.errors import ConfigError

log = logging.getLogger("xlpretrain")


def main(argv: Sequence[str]) -> None:
    del argv
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout
    )
    logging.getLogger("absl").setLevel(logging.WARNING)
    try:
        finetuning.run(finetuning.build(FLAGS.config, FLAGS.workdir))
    except (
        ConfigError,
        CheckpointError,
        DataError,
        FileNotFoundError,
        FloatingPointError,
        ValueError,
    ) as error:
        log.error("%s: %s", type(error).__name__, error)
        sys.exit(1)


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
    app.run(main)
