"""ERNIE-M (Ouyang et al., 2021): `configs/ernie_m.py:{tiny,base,large}`.

Stage 1 trains MMLM + TLM + CAMLM; stage 2 adds BTMLM. base/large are the paper's Table 10:
12/24 layers, hidden 768/1024, FFN 3072/4096, 12/16 heads, dropout 0.1, 150k/200k steps,
batch 2048, lr 2e-4/1e-4 with 10k warm-up and linear decay, Adam ε 1e-6, β (0.98, 0.999) as
printed, weight decay 0.01, length 512, α 0.1, 250k vocabulary. ERNIE-M starts from XLM-R: set
`init.checkpoint` to an XLM-R checkpoint converted by `python -m xlpretrain.convert from-hf`.

Batch: every step draws the paper's 2048 sequences in all, split between the objectives of its
stage (the paper does not print a split; this one is ours): half monolingual, half parallel.
Stage 1: MMLM 1024 + TLM 512 + CAMLM 512; stage 2: MMLM 512 + BTMLM 512 + TLM 512 + CAMLM 512,
the monolingual half now shared by MMLM and BTMLM. `tiny` keeps the split at 32 rows a step.
Each stage's `batch_size` says it (docs/configs.md: how batch sizes combine).

The paper does not print when stage 2 starts either: it starts at half of `train.steps`.
Placeholders get their target language by language embedding.

`tiny` runs on a CPU in about a minute, on the demo corpus unless pointed at folders with
`--config.data.mono_dir=DIR/mono --config.data.parallel_dir=DIR/parallel`.
"""

import ml_collections

from xlpretrain.training.config import default_config

SIZES = {
    # name: (layers, hidden, heads, ffn, steps, learning rate)
    "base": (12, 768, 12, 3072, 150_000, 2e-4),
    "large": (24, 1024, 16, 4096, 200_000, 1e-4),
}


def get_config(arg: str = "base") -> ml_collections.ConfigDict:
    size = arg or "base"
    if size not in (*SIZES, "tiny"):
        raise ValueError(f"configs/ernie_m.py: unknown size {size!r}; choose tiny, base or large")
    cfg = default_config()
    cfg.model.language_embeddings = True
    cfg.data.mono_alpha = cfg.data.parallel_alpha = 0.1
    cfg.optim.b1, cfg.optim.b2, cfg.optim.eps = 0.98, 0.999, 1e-6
    cfg.optim.weight_decay = 0.01
    if size == "tiny":
        cfg.train.steps = 200
        cfg.train.log_every = 10
        cfg.train.checkpoint_every = 100
        cfg.data.max_length = 64
        cfg.model.vocab_size = 4002
        cfg.model.hidden_size, cfg.model.num_layers, cfg.model.num_heads = 64, 2, 4
        cfg.model.mlp_dim = 256
        cfg.model.dropout_rate = cfg.model.attention_dropout_rate = 0.0
        cfg.optim.learning_rate, cfg.optim.warmup_steps = 3e-3, 20
        cfg.tokenizer.sentences_per_language = 300
    else:
        layers, hidden, heads, ffn, steps, lr = SIZES[size]
        cfg.model.num_layers, cfg.model.hidden_size = layers, hidden
        cfg.model.num_heads, cfg.model.mlp_dim = heads, ffn
        cfg.model.vocab_size = 250002
        cfg.model.dropout_rate = cfg.model.attention_dropout_rate = 0.1
        cfg.model.dtype = "bfloat16"
        # Without remat, XLA:TPU needs 212 GB per chip for large on a v5p-64 at grad_accum 4
        # (python -m xlpretrain.aot --topology v5p:4x4x2); launch/README.md has the table.
        cfg.model.remat = "full" if size == "large" else "none"
        cfg.train.steps = steps
        cfg.data.max_length = 512
        cfg.optim.learning_rate, cfg.optim.warmup_steps = lr, 10_000
    global_batch = 32 if size == "tiny" else 2048
    quarter = global_batch // 4
    cfg.data.batch_size = quarter  # any objective a stage does not size
    stage_1 = {"mmlm": 1.0, "tlm": 1.0, "camlm": 1.0}
    cfg.objectives.mmlm = 0.0  # the schedule gives the weights
    cfg.schedule = (
        {
            "start_step": 0,
            "objectives": stage_1,
            "batch_size": {"mmlm": 2 * quarter, "tlm": quarter, "camlm": quarter},
        },
        {
            "start_step": 0.5,  # half of train.steps
            "objectives": {**stage_1, "btmlm": 1.0},
            "batch_size": {name: quarter for name in (*stage_1, "btmlm")},
        },
    )
    return cfg
