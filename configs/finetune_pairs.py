"""Fine-tuning on your own sentence pairs (XNLI- or PAWS-X-style), zero-shot to every language:
`python -m xlpretrain.finetune run --config configs/finetune_pairs.py[:base|large|demo] --init
WORKDIR --data DIR --out OUT [--config.pairs.train_language=LANG]`.

The `pairs` task on a folder of `<lang>/` or `<l1>-<l2>/` folders of `{train,dev,test}.tsv`
(`xlpretrain.finetune.folder_source`); `--tasks tagging` or `--tasks extractive_qa` runs a
folder of tagged sentences or SQuAD JSON the same way. Every key is in
`xlpretrain.finetune.schema.default_config()`. `base` (the default) and `large` set the
layer-wise learning-rate decay ERNIE-M fine-tuned with: 0.8, and 0.9 for the deeper stack, whose
lower layers need moving less sharply; 10,000 steps of 32 pairs. `demo` fine-tunes the 2-layer
model of `configs/demo.py` on the demo corpus's translation-or-not pairs (`python -m
xlpretrain.data.demo_corpus --out DIR --pairs PAIRS`, trained on `en-de`) in a minute or two on a
CPU; with dropout 0.1 and layer decay 0.9 that model was still near chance after 600 steps at
rates from 1e-4 to 1e-3.
"""

import ml_collections

from xlpretrain.finetune.schema import default_config

LAYER_DECAY = {"base": 0.8, "large": 0.9}
PRESETS = (*LAYER_DECAY, "demo")
FOLDER_TASKS = ("pairs", "tagging", "extractive_qa")


def get_config(arg: str = "base") -> ml_collections.ConfigDict:
    preset = arg or "base"
    if preset not in PRESETS:
        raise ValueError(
            f"configs/finetune_pairs.py: unknown preset {preset!r}; choose one of {PRESETS}"
        )
    cfg = default_config()
    cfg.tasks = "pairs"
    cfg.train.keep_checkpoints = 2
    if preset == "demo":
        cfg.model.dropout_rate = cfg.model.attention_dropout_rate = 0.0  # as configs/demo.py
        cfg.train.update(steps=600, log_every=100, checkpoint_every=600)
        cfg.pairs.update(
            train_language="en-de",
            max_length=64,
            learning_rate=5e-4,
            layer_decay=1.0,  # two layers: nothing to spare
        )
    else:
        cfg.train.steps = 10_000
        for task in FOLDER_TASKS:
            cfg[task].layer_decay = LAYER_DECAY[preset]
    return cfg
