"""Command-line training: `python -m xlpretrain.train --config configs/X.py --workdir DIR`.

Resumes from DIR's latest checkpoint if there is one. Writes `DIR/checkpoints/` (Orbax),
`DIR/metrics.jsonl`, TensorBoard events in `DIR/tb/`, the tokenizer (`DIR/tokenizer.model`),
the language list (`DIR/languages.json`) and the resolved config (`DIR/config.json`), so a
workdir is self-contained. The training itself is `xlpretrain.trainer`.
"""

from __future__ import annotations

import logging
import os
import sys

import jax
from absl import app, flags
from ml_collections import config_flags

from xlpretrain import distributed
from xlpretrain.checkpoint import CheckpointError
from xlpretrain.errors import ConfigError
from xlpretrain.trainer import WorkdirError, build, check_workdir, run

log = logging.getLogger("xlpretrain")


def main(argv: list[str]) -> None:
    del argv
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout
    )
    logging.getLogger("absl").setLevel(logging.WARNING)
    if FLAGS.distributed:
        distributed.initialize()
    cfg = FLAGS.config
    workdir = os.path.abspath(FLAGS.workdir)
    try:
        check_workdir(workdir)
    except WorkdirError as error:
        log.error("%s", error)
        sys.exit(1)
    if jax.process_index() == 0:  # one log per run; other processes report only problems
        handler = logging.FileHandler(os.path.join(workdir, "train.log"))
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
    else:
        log.setLevel(logging.WARNING)
    try:
        trainer = build(cfg, workdir)
        run(trainer)
    except (
        ConfigError,
        CheckpointError,
        FileNotFoundError,
        ValueError,
        FloatingPointError,
        WorkdirError,
    ) as error:
        log.error("%s: %s", type(error).__name__, error)
        sys.exit(1)


def define_flags() -> None:
    """The CLI's flags, defined only when run as a program (so importing this module, e.g.
    next to `xlpretrain.bench`, defines none)."""
    config_flags.DEFINE_config_file(
        "config", None, "Config file (configs/NAME.py[:ARG]).", lock_config=True
    )
    flags.DEFINE_string("workdir", None, "Run directory (checkpoints, metrics, logs).")
    flags.DEFINE_bool(
        "distributed",
        False,
        "Join a multi-process run first (xlpretrain.distributed: the JAX_COORDINATOR_ADDRESS / "
        "JAX_NUM_PROCESSES / JAX_PROCESS_ID environment, else TPU pod, SLURM or GKE "
        "auto-detection).",
    )
    flags.mark_flags_as_required(["config", "workdir"])


FLAGS = flags.FLAGS

if __name__ == "__main__":
    define_flags()
    app.run(main)
