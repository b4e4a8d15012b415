"""XTREME, zero-shot from English: `python -m xlpretrain.finetune run --config
configs/xtreme.py[:PRESET] --init WORKDIR --data XTREME_DIR --out OUT [--tasks ...]`.

Every key is in `xlpretrain.finetune.schema.default_config()`. The presets:

- `base` (the default): XTREME's own baseline for XLM-R base, per task (google-research/xtreme
  `scripts/train_*.sh`: 32 rows a step, 2e-5 for 5 epochs on XNLI and PAWS-X, 10 on PAN-X and
  UD-POS; 3e-5 for 3 epochs of SQuAD at 384 tokens, 128 apart, for XQuAD, MLQA and
  TyDiQA-GoldP); English dev scored every `--save_steps` (XNLI 100, PAWS-X 200, PAN-X 1,000,
  UD-POS 500 steps), the best kept and compared with the final model (`select`
  `best_then_final`); QA (`--save_steps -1`) predicts with the final model (`select` `none`);
  seed 1 for tagging, 42 otherwise; QA's 500 warm-up steps never capped (TyDiQA's ~351 steps
  only warm up); an epoch's steps counted as the scripts count them (`loader_batch_size`: 8-row
  loader batches, 4 a step; QA 4 × 8), PAN-X's and UD-POS's scheduler stepped before the
  optimizer (`scheduler_first`, run_tag.py's order); BUCC and Tatoeba are not fine-tuned,
  their sentence embeddings are the state after the 8th layer (`run_bucc2018.sh`: the first
  token's, `run_tatoeba.sh`: the mean).
- `large`: the same scripts' XLM-R large (3e-5 on XNLI; 2-row loader batches, 16 a step, but for
  QA; the same cadence, selection and seeds;
  Tatoeba after the 14th of 24 layers, `run_tatoeba.sh`'s `--num_layers 24 --specific_layer
  13`; BUCC after the 20th: `run_bucc2018.sh` passes `--specific_layer 7` and no
  `--num_layers`, so `evaluate_retrieval.py` takes state 7 of the last 12 of 25).
- `ernie_m`, `ernie_m_large`: ERNIE-M's published scripts (PaddlePaddle/ERNIE, branch `repro`,
  `ernie-m/scripts/{base,large}/`), which exist for XNLI and MLQA only, so those are the tasks
  (`--tasks` adds others at `base`'s settings): 16 rows a GPU on 2 GPUs, 10 % warm-up, no weight
  decay; XNLI 5 epochs at 5e-5, 256 tokens, layer-wise decay 0.8; MLQA 2 epochs of SQuAD at
  384 tokens, 128 apart, 3e-4 with decay 0.8 (large: 8e-5, 0.9).
- `veco_large`: VECO's published scripts (alibaba/AliceMind `VECO/NLU/scripts/`), for XNLI,
  XQuAD and Tatoeba only: XNLI 2 epochs at 2e-5, 64 rows a step, 128 tokens, no warm-up or
  weight decay; XQuAD 2 epochs of SQuAD at 2e-5, 16 rows, 384 tokens 64 apart, 500 warm-up
  steps, weight decay 1e-4; Tatoeba the mean of the state after the 18th of 24 layers.
- `demo`: fine-tunes the 2-layer model of `configs/demo.py` on the benchmark `python -m
  xlpretrain.data.demo_corpus --out DIR --xtreme XDIR` writes (pawsx, panx, xquad, and tatoeba
  at the middle layer, as the pre-training's retrieval evaluation) in minutes on a CPU.

`ernie_m`, `ernie_m_large`, `veco_large` and `demo` score dev once an epoch, keep the best
(`best_then_final`) and seed 0 on every task (`ALONE`): their scripts' cadence is not read here.
"""

import ml_collections

from xlpretrain.finetune import registry
from xlpretrain.finetune.schema import default_config, xtreme_tasks

PRESETS = ("base", "large", "ernie_m", "ernie_m_large", "veco_large", "demo")
DEMO_TASKS = ("pawsx", "panx", "xquad", "tatoeba")
FINE_TUNED_DEMO_TASKS = DEMO_TASKS[:3]
# The presets not of XTREME's scripts: dev once an epoch, the best kept, seed 0, on every task;
# their steps ⌈rows / batch_size⌉ an epoch, each update at its own step's rate.
FINE_TUNED = tuple(task for task in xtreme_tasks() if registry.get(task).fine_tuned)
ALONE = dict(
    eval_every_steps=0, select="best_then_final", seed=0, loader_batch_size=0,
    scheduler_first=False,
)  # fmt: skip


def get_config(arg: str = "base") -> ml_collections.ConfigDict:
    preset = arg or "base"
    if preset not in PRESETS:
        raise ValueError(f"configs/xtreme.py: unknown preset {preset!r}; choose one of {PRESETS}")
    cfg = default_config()
    if preset == "large":
        cfg.xnli.learning_rate = 3e-5
        for task in ("xnli", "pawsx", "panx", "udpos"):
            cfg[task].loader_batch_size = 2  # BATCH_SIZE=2, GRAD_ACC=16
        cfg.tatoeba.layer = 14  # run_tatoeba.sh's LAYER=13 of the last 24 states
        cfg.bucc2018.layer = 20  # run_bucc2018.sh's 7 of the last 12 (its default) states
    if preset not in ("base", "large"):
        for task in FINE_TUNED:
            cfg[task].update(ALONE)
    if preset in ("ernie_m", "ernie_m_large"):
        cfg.tasks = "xnli,mlqa"
        shared = dict(
            batch_size=32, warmup_fraction=0.1, warmup_steps=0, weight_decay=0.0, layer_decay=0.8
        )
        cfg.xnli.update(epochs=5.0, learning_rate=5e-5, max_length=256, **shared)
        cfg.mlqa.update(epochs=2.0, learning_rate=3e-4, max_length=384, **shared)
        if preset == "ernie_m_large":
            cfg.mlqa.update(learning_rate=8e-5, layer_decay=0.9)
    if preset == "veco_large":
        cfg.tasks = "xnli,xquad,tatoeba"
        cfg.xnli.update(epochs=2.0, learning_rate=2e-5, batch_size=64, max_length=128)
        cfg.xquad.update(
            epochs=2.0, learning_rate=2e-5, batch_size=16, max_length=384,
            warmup_steps=500, weight_decay=1e-4,
        )  # fmt: skip
        cfg.qa.doc_stride = 64
        cfg.tatoeba.layer = 18
    if preset == "demo":
        cfg.tasks = ",".join(DEMO_TASKS)
        cfg.model.dropout_rate = cfg.model.attention_dropout_rate = 0.0  # as configs/demo.py
        cfg.train.update(log_every=50, checkpoint_every=200)
        cfg.qa.update(doc_stride=64, max_answer_length=16)
        cfg.tatoeba.layer = 1
        for task in FINE_TUNED_DEMO_TASKS:
            cfg[task].update(
                learning_rate=5e-4, max_length=128, warmup_fraction=0.1, warmup_steps=0
            )
        cfg.pawsx.update(epochs=15.0, max_length=64)
        cfg.panx.update(epochs=30.0, max_length=64)
        cfg.xquad.update(epochs=15.0)
    return cfg
