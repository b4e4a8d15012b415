"""A tiny MMLM + TLM run on the built-in demo corpus (CLDR text from Babel): about a minute on
two CPU cores, no download. `python -m xlpretrain.train --config configs/demo.py --workdir DIR`.
"""

from xlpretrain.config import default_config


def get_config(arg: str = ""):
    del arg
    cfg = default_config()
    cfg.train.steps = 200
    cfg.train.log_every = 10
    cfg.train.checkpoint_every = 100
    cfg.data.max_length = 64
    cfg.data.batch_size = 16
    cfg.model.vocab_size = 4002
    cfg.model.hidden_size = 64
    cfg.model.num_layers = 2
    cfg.model.num_heads = 4
    cfg.model.mlp_dim = 256
    cfg.model.dropout_rate = 0.0
    cfg.model.attention_dropout_rate = 0.0
    cfg.optim.learning_rate = 3e-3
    cfg.optim.warmup_steps = 20
    cfg.tokenizer.sentences_per_language = 1000
    cfg.objectives.tlm = 1.0
    return cfg
