"""Command-line training: `python -m xlpretrain.train --config configs/X.py --workdir DIR`.

Resumes from DIR's latest checkpoint if there is one. Writes `DIR/checkpoints/` (Orbax),
`DIR/metrics.jsonl`, TensorBoard events in `DIR/tb/`, the tokenizer (`DIR/tokenizer.model`, or
`DIR/tokenizer.json` with its `tokenizer_config.json`), the language list
(`DIR/languages.json`) and the resolved config (`DIR/config.json`), so a workdir is
self-contained. The training itself is `xlpretrain.training.trainer`.
"""

from __future__ import annotations

import os

from absl import flags
from ml_collections import config_flags

from xlpretrain.core import programs
from xlpretrain.parallel import distributed
from xlpretrain.training import cli
from xlpretrain.training.plan import RunPlan, resolve
from xlpretrain.training.trainer import Trainer, build, finished, run


def main(argv: list[str]) -> None:
    del argv
    programs.setup_logging()
    if FLAGS.distributed:
        distributed.initialize()
    cfg, workdir = FLAGS.config, os.path.abspath(FLAGS.workdir)

    def start(plan: RunPlan) -> Trainer | None:
        if (done := finished(plan, workdir)) is not None:
            cli.log.info("%s", done)
            return None
        return build(plan, workdir)

    def train(trainer: Trainer | None) -> None:
        if trainer is not None:
            run(trainer)

    cli.run_task(workdir, lambda: resolve(cfg), start, train, "train.log")


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
        "Join a multi-process run first (xlpretrain.parallel.distributed: the "
        "JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID environment, else TPU "
        "pod, SLURM or GKE "
        "auto-detection).",
    )
    flags.mark_flags_as_required(["config", "workdir"])


FLAGS = flags.FLAGS

if __name__ == "__main__":
    define_flags()
    cli.run(main)
