"""Sentence-pair classification fine-tuning (XNLI, PAWS-X): `configs/finetune_pairs.py[:SIZE]`.

Every key is in `xlpretrain.finetuning.default_config()`; set at least `init.path` (a
pre-training workdir or checkpoint folder), `data.dir` (`<lang>/{train,test}.tsv` files) and
`data.train_language`. SIZE sets the layer-wise learning-rate decay ERNIE-M fine-tuned with:
0.8 for `base` (the default), 0.9 for `large`, whose deeper stack needs its lower layers moved
less sharply.
"""

import ml_collections

from xlpretrain.finetuning import default_config

LAYER_DECAY = {"base": 0.8, "large": 0.9}


def get_config(arg: str = "base") -> ml_collections.ConfigDict:
    size = arg or "base"
    if size not in LAYER_DECAY:
        raise ValueError(
            f"configs/finetune_pairs.py: unknown size {size!r}; choose one of {sorted(LAYER_DECAY)}"
        )
    cfg = default_config()
    cfg.optim.layer_decay = LAYER_DECAY[size]
    return cfg
