"""A small MMLM + TLM run on the built-in demo corpus (CLDR text shipped with the package) that
shows it learned: about a minute on two CPU cores, no download.
`python -m xlpretrain.train --config configs/demo.py --workdir DIR`.

`configs/demo.py:xlco` adds the sentence-level contrastive objective (`xlco`: each pair's
translation against the other pairs of the batch) to MMLM + TLM, on 8 rows of up to 2 pairs a
step, so held-out retrieval learns what token-level objectives alone do not teach a model this
small.

It trains on nine tenths of the corpus and evaluates on the held-out tenth at steps 300 and 600
(the demo corpus's `held_out/`, used when no corpus and no eval folders are named); the summary
sets the held-out accuracy beside a unigram model's and retrieval beside chance. Pointed at a
corpus of your own (`data.mono_dir`, `data.parallel_dir`, `data.store`), it holds out
`eval.held_out_fraction` (5%) of each language's lines instead, or reads held-out folders named
by `eval.mono_dir` and `eval.parallel_dir`.
"""

from xlpretrain.training.config import default_config


def get_config(arg: str = ""):
    if arg not in ("", "xlco"):
        raise ValueError(f"configs/demo.py: unknown variant {arg!r}; choose '' or 'xlco'")
    cfg = default_config()
    cfg.train.steps = 600
    cfg.train.log_every = 50
    cfg.train.checkpoint_every = 300
    cfg.data.max_length = 64
    cfg.data.batch_size = 16
    cfg.model.vocab_size = 2002
    cfg.model.hidden_size = 128
    cfg.model.num_layers = 2
    cfg.model.num_heads = 4
    cfg.model.mlp_dim = 512
    cfg.model.dropout_rate = 0.0
    cfg.model.attention_dropout_rate = 0.0
    cfg.optim.learning_rate = 2e-3
    cfg.optim.warmup_steps = 60
    cfg.tokenizer.sentences_per_language = 1000
    cfg.objectives.tlm = 1.0
    cfg.eval.every_steps = 300
    cfg.eval.batches = 8
    cfg.eval.retrieval_lines = 100
    if arg == "xlco":
        cfg.objectives.xlco = 1.0
        cfg.data.per_objective = {"xlco": {"batch_size": 8}}
    return cfg
