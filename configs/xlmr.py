"""XLM-R sizes with MMLM and α = 0.3 (Conneau et al., 2020): `configs/xlmr.py:{tiny,base,large}`.

base/large follow the paper: 250k vocabulary, length 512, Adam β (0.9, 0.98), ε 1e-6,
linear schedule. Point `data.mono_dir` at a corpus and `tokenizer.path` at XLM-R's
`sentencepiece.bpe.model` to reproduce; `tiny` trains its own tokenizer on UDHR-sized data.
"""

from xlpretrain.training.config import default_config

SIZES = {
    # name: (layers, hidden, heads, mlp, vocabulary)
    "tiny": (2, 128, 4, 512, 8002),
    "base": (12, 768, 12, 3072, 250002),
    "large": (24, 1024, 16, 4096, 250002),
}


def get_config(arg: str = "base"):
    size = arg or "base"
    if size not in SIZES:
        raise ValueError(f"configs/xlmr.py: unknown size {size!r}; choose one of {sorted(SIZES)}")
    layers, hidden, heads, mlp, vocab = SIZES[size]
    cfg = default_config()
    cfg.model.num_layers = layers
    cfg.model.hidden_size = hidden
    cfg.model.num_heads = heads
    cfg.model.mlp_dim = mlp
    cfg.model.vocab_size = vocab
    cfg.data.mono_alpha = 0.3
    cfg.data.parallel_alpha = 0.3
    cfg.optim.b1, cfg.optim.b2, cfg.optim.eps = 0.9, 0.98, 1e-6
    cfg.optim.weight_decay = 0.01
    cfg.objectives.mmlm = 1.0
    if size == "tiny":
        cfg.train.steps = 300
        cfg.data.max_length = 128
        cfg.data.batch_size = 16
        cfg.optim.learning_rate = 1e-3
        cfg.optim.warmup_steps = 30
    else:
        cfg.train.steps = 1_500_000  # the paper: 1.5M updates of 8192 sequences
        cfg.data.max_length = 512
        cfg.data.batch_size = 8192
        # The XLM-R paper does not print its learning rates; these are RoBERTa's (Table 9).
        cfg.optim.learning_rate = 6e-4 if size == "base" else 4e-4
        cfg.optim.warmup_steps = 24_000 if size == "base" else 30_000
        cfg.model.dtype = "bfloat16"
        cfg.model.remat = "full" if size == "large" else "none"
    return cfg
