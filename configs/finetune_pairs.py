"""Sentence-pair classification fine-tuning (XNLI, PAWS-X):
`configs/finetune_pairs.py[:base|large|demo]`.

Every key is in `xlpretrain.training.finetune_config.default_config()`; set at least
`init.path` (a pre-training workdir or checkpoint folder), `data.dir` (`<lang>/` or
`<l1>-<l2>/` folders of `{train,test}.tsv`) and `data.train_language`. `base` (the default) and
`large` set the layer-wise learning-rate decay ERNIE-M fine-tuned with: 0.8, and 0.9 for the
deeper stack, whose lower layers need moving less sharply. `demo` fine-tunes the 2-layer model of
`configs/demo.py` on the demo corpus's translation-or-not pairs (`python -m
xlpretrain.data.demo_corpus --out DIR --pairs PAIRS`) in a minute or two on a CPU; with dropout
0.1 and layer decay 0.9 that model was still near chance after 600 steps at rates from 1e-4 to
1e-3.
"""

import ml_collections

from xlpretrain.training.finetune_config import default_config

LAYER_DECAY = {"base": 0.8, "large": 0.9}
PRESETS = (*LAYER_DECAY, "demo")


def get_config(arg: str = "base") -> ml_collections.ConfigDict:
    preset = arg or "base"
    if preset not in PRESETS:
        raise ValueError(
            f"configs/finetune_pairs.py: unknown preset {preset!r}; choose one of {PRESETS}"
        )
    cfg = default_config()
    if preset == "demo":
        cfg.data.max_length = 64
        cfg.model.dropout_rate = cfg.model.attention_dropout_rate = 0.0  # as configs/demo.py
        cfg.optim.learning_rate = 5e-4
        cfg.optim.layer_decay = 1.0  # two layers: nothing to spare
        cfg.train.update(steps=600, log_every=100, checkpoint_every=600)
    else:
        cfg.optim.layer_decay = LAYER_DECAY[preset]
    return cfg
