"""Fine-tuning's config: every key a run may set, with its default, and the values each may take.

`configs/finetune_pairs.py` starts from `default_config()`; the plan
(`xlpretrain.training.finetune_plan.resolve_finetuning`) checks a config against it and `RANGES`
through pre-training's `check_keys`, so a typo is refused the same way in both programs. The
`train` and `mesh` sections are pre-training's (`config.loop_section`, `config.mesh_section`):
the shared loop reads them.
"""

from __future__ import annotations

import ml_collections

from xlpretrain.model.config import ATTENTION_IMPLS
from xlpretrain.training.config import LOOP_RANGES, MESH_RANGES, loop_section, mesh_section
from xlpretrain.training.config_keys import Ranges

PLUG_IN = ("auto", "in", "out")


def default_config() -> ml_collections.ConfigDict:
    """Every key a fine-tuning run may set; `configs/finetune_pairs.py` starts from this."""
    cfg = ml_collections.ConfigDict()
    cfg.init = ml_collections.ConfigDict()
    cfg.init.path = ""  # a pre-training workdir or an xlpretrain checkpoint folder (required)

    cfg.data = ml_collections.ConfigDict()
    cfg.data.dir = ""  # folder of <lang>/<split>.tsv files (required)
    cfg.data.train_language = "en"
    cfg.data.train_split = "train"
    cfg.data.eval_split = "test"
    cfg.data.eval_languages = ()  # empty: every <lang> folder with an <eval_split>.tsv
    cfg.data.labels = ()  # label strings in id order; empty: the training labels, sorted
    cfg.data.max_length = 128  # tokens per pair, special tokens included
    cfg.data.batch_size = 32  # global rows per step (and per evaluation batch)
    cfg.data.num_workers = 0  # grain worker processes (0: build batches in the main process)
    cfg.data.prefetch = 2  # batches built ahead of the step

    cfg.model = ml_collections.ConfigDict()
    cfg.model.plug_in = "auto"  # VECO's cross-attention: in | out | auto (in if the model has it)
    cfg.model.dropout_rate = 0.1
    cfg.model.attention_dropout_rate = 0.1
    cfg.model.dtype = "float32"  # compute dtype; parameters stay float32
    cfg.model.attention = "xla"  # as pre-training's model.attention

    cfg.optim = ml_collections.ConfigDict()
    cfg.optim.learning_rate = 2e-5
    cfg.optim.layer_decay = 0.8  # 1.0: every layer at the full rate
    cfg.optim.warmup_fraction = 0.1
    cfg.optim.b1 = 0.9
    cfg.optim.b2 = 0.999
    cfg.optim.eps = 1e-8
    cfg.optim.weight_decay = 0.01
    cfg.optim.clip_norm = 1.0  # global-norm clipping; 0 disables

    cfg.train = loop_section(steps=10_000, log_every=100, checkpoint_every=1000, keep=2)

    # Accuracy on every evaluation language (dropout off) each `every_steps` steps, logged as
    # eval/accuracy/<lang> with that step's metrics; 0: only at the end.
    cfg.eval = ml_collections.ConfigDict()
    cfg.eval.every_steps = 0

    cfg.mesh = mesh_section()
    return cfg


RANGES: Ranges = {
    "init.path": (bool, "required: a pre-training workdir or checkpoint folder"),
    "data.dir": (bool, "required: a folder of <lang>/<split>.tsv files"),
    "data.train_language": (bool, "required"),
    "data.max_length": (lambda v: v >= 8, "must be >= 8"),
    "data.batch_size": (lambda v: v > 0, "must be > 0"),
    "data.num_workers": (lambda v: v >= 0, "must be >= 0"),
    "data.prefetch": (lambda v: v >= 0, "must be >= 0"),
    "model.plug_in": (lambda v: v in PLUG_IN, f"must be one of {PLUG_IN}"),
    "model.dropout_rate": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
    "model.attention_dropout_rate": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
    "model.dtype": (lambda v: v in ("float32", "bfloat16"), "must be 'float32' or 'bfloat16'"),
    "model.attention": (lambda v: v in ATTENTION_IMPLS, f"must be one of {ATTENTION_IMPLS}"),
    "optim.learning_rate": (lambda v: v > 0, "must be > 0"),
    "optim.layer_decay": (lambda v: 0.0 < v <= 1.0, "must be in (0, 1]"),
    "optim.warmup_fraction": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
    "optim.clip_norm": (lambda v: v >= 0, "must be >= 0 (0 disables clipping)"),
    "eval.every_steps": (lambda v: v >= 0, "must be >= 0"),
    **LOOP_RANGES,
    **MESH_RANGES,
}
