"""XTREME, zero-shot from English: `python -m xlpretrain.eval.xtreme run --config
configs/xtreme.py[:base|large|demo] --init WORKDIR --data XTREME_DIR --out OUT [--tasks ...]`.

Every key is in `xlpretrain.training.task_config.default_config()`. `base` (the default) is
XTREME's own baseline for XLM-R base, per task (google-research/xtreme `scripts/train_*.sh`: 32
rows a step, 2e-5 for 5 epochs on XNLI and PAWS-X, 10 on PAN-X and UD-POS; 3e-5 for 3 epochs of
SQuAD at 384 tokens, 128 apart, for XQuAD, MLQA and TyDiQA-GoldP), checkpoint selected on English
dev; BUCC and Tatoeba are not fine-tuned, their sentence embeddings are the state after the 8th
layer (`run_bucc2018.sh`: the first token's, `run_tatoeba.sh`: the mean). `large` is the same
scripts' XLM-R large (3e-5 on XNLI; Tatoeba after the 14th of 24 layers, BUCC still the 8th).
`demo` fine-tunes the 2-layer model of `configs/demo.py` on the benchmark `python -m
xlpretrain.data.demo_corpus --out DIR --xtreme XDIR` writes (pawsx, panx, xquad, and tatoeba at
the middle layer, as the pre-training's retrieval evaluation) in minutes on a CPU.
"""

import ml_collections

from xlpretrain.training.task_config import default_config

PRESETS = ("base", "large", "demo")
DEMO_TASKS = ("pawsx", "panx", "xquad", "tatoeba")
FINE_TUNED_DEMO_TASKS = DEMO_TASKS[:3]


def get_config(arg: str = "base") -> ml_collections.ConfigDict:
    preset = arg or "base"
    if preset not in PRESETS:
        raise ValueError(f"configs/xtreme.py: unknown preset {preset!r}; choose one of {PRESETS}")
    cfg = default_config()
    if preset == "large":
        cfg.xnli.learning_rate = 3e-5
        cfg.tatoeba.layer = 14  # run_tatoeba.sh's LAYER=13 of the last 24 states
    if preset == "demo":
        cfg.tasks = ",".join(DEMO_TASKS)
        cfg.model.dropout_rate = cfg.model.attention_dropout_rate = 0.0  # as configs/demo.py
        cfg.train.update(log_every=50, checkpoint_every=200)
        cfg.qa.update(doc_stride=64, max_answer_length=16)
        cfg.tatoeba.layer = 1
        for task in FINE_TUNED_DEMO_TASKS:
            cfg[task].update(learning_rate=5e-4, max_length=128, warmup_fraction=0.1)
        cfg.pawsx.update(epochs=15.0, max_length=64)
        cfg.panx.update(epochs=30.0, max_length=64)
        cfg.xquad.update(epochs=15.0)
    return cfg
