"""VECO (Luo et al., 2021): `configs/veco.py:{tiny,small,large}`.

Every layer gets the plug-in cross-attention (`model.cross_attention`). Objectives: `veco` on
bilingual pairs, `veco_mono` on adjacent monolingual segments, and TLM on the bilingual pairs.
small/large are the paper's Table 8: 6/24 layers, hidden 768/1024, 12/16 heads, FFN 3072/4096,
masking 15% monolingual / 25% bilingual, lr 3e-4/2e-4, 12k warm-up, Adam ε 1e-6, β1 0.9,
β2 0.999/0.98, length 512 monolingual / 128 bilingual, batch 1024 monolingual / 4096
bilingual, 240k steps, α 0.5, no language embeddings.

Training first updates only the cross-attention (the rest initialised from XLM-R: set
`init.checkpoint` to a checkpoint converted by `python -m xlpretrain.convert from-hf`), then
everything: stage 1 trains only the parameters matching "cross_attention". The paper does not
print when the second phase starts; here it starts at 10% of `train.steps` (25% for `tiny`).
`veco.variant=iclr` makes the s stream causal (CS-MLM).
"""

import ml_collections

from xlpretrain.training.config import default_config

SIZES = {
    # name: (layers, hidden, heads, ffn, learning rate, beta2)
    "small": (6, 768, 12, 3072, 3e-4, 0.999),
    "large": (24, 1024, 16, 4096, 2e-4, 0.98),
}
OBJECTIVES = {"veco_mono": 1.0, "veco": 1.0, "tlm": 1.0}


def get_config(arg: str = "large") -> ml_collections.ConfigDict:
    size = arg or "large"
    if size not in (*SIZES, "tiny"):
        raise ValueError(f"configs/veco.py: unknown size {size!r}; choose tiny, small or large")
    cfg = default_config()
    cfg.model.cross_attention = True
    cfg.model.language_embeddings = False
    cfg.data.mono_alpha = cfg.data.parallel_alpha = 0.5
    cfg.data.mono_mask_rate, cfg.data.parallel_mask_rate = 0.15, 0.25
    cfg.optim.b1, cfg.optim.eps = 0.9, 1e-6
    if size == "tiny":
        cfg.train.steps = 200
        cfg.train.log_every = 10
        cfg.train.checkpoint_every = 100
        cfg.data.max_length, cfg.data.batch_size = 64, 8
        mono_length, mono_batch = 96, 8
        cfg.model.vocab_size = 4002
        cfg.model.hidden_size, cfg.model.num_layers, cfg.model.num_heads = 64, 2, 4
        cfg.model.mlp_dim = 256
        cfg.model.dropout_rate = cfg.model.attention_dropout_rate = 0.0
        cfg.optim.learning_rate, cfg.optim.warmup_steps, cfg.optim.b2 = 3e-3, 20, 0.98
        cfg.tokenizer.sentences_per_language = 300
        second_phase = 0.25
    else:
        layers, hidden, heads, ffn, lr, b2 = SIZES[size]
        cfg.model.num_layers, cfg.model.hidden_size = layers, hidden
        cfg.model.num_heads, cfg.model.mlp_dim = heads, ffn
        cfg.model.vocab_size = 250002
        cfg.model.dropout_rate = cfg.model.attention_dropout_rate = 0.1
        cfg.model.dtype = "bfloat16"
        # Without remat, XLA:TPU needs 500+ GB per chip for large on a v5p-64 at grad_accum 4
        # (python -m xlpretrain.aot --topology v5p:4x4x2); launch/README.md has the table.
        cfg.model.remat = "full" if size == "large" else "none"
        cfg.train.steps = 240_000
        cfg.data.max_length, cfg.data.batch_size = 128, 4096  # bilingual
        mono_length, mono_batch = 512, 1024
        cfg.optim.learning_rate, cfg.optim.warmup_steps, cfg.optim.b2 = lr, 12_000, b2
        second_phase = 0.1
    cfg.data.per_objective = ml_collections.ConfigDict(
        {"veco_mono": {"max_length": mono_length, "batch_size": mono_batch}}
    )
    cfg.objectives.mmlm = 0.0  # the schedule gives the weights
    cfg.schedule = (
        {"start_step": 0, "objectives": OBJECTIVES, "trainable": "cross_attention"},
        {"start_step": second_phase, "objectives": OBJECTIVES, "trainable": ""},
    )
    return cfg
