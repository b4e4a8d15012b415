"""Multilingual BERT (Devlin et al., 2019), the first row of every XTREME table:
`configs/mbert.py:{tiny,base}`.

The architecture (`model.architecture = "bert"`): XLM-R's post-LN layers with two token-type
rows (type 0 on every token, as mBERT reads a single sentence) and learned positions from row 0,
LayerNorm ε 1e-12. base is mBERT's shape: 12 layers, 768 wide, 12 heads, FFN 3,072, 512
positions and its 119,547-id WordPiece vocabulary (178 M parameters); point `tokenizer.path` at
an mBERT folder's `tokenizer.json` to train with its ids, or start from mBERT itself
(`python -m xlpretrain.convert from-hf`, then `init.checkpoint`).

The recipe is BERT's (the paper's Appendix A.2; mBERT's release states no other): 1 M steps of
256 rows, 90 % of them 128 tokens long and the last 10 % 512 (a second `schedule` stage, whose
longer rows compile their own step), Adam (β 0.9, 0.999, ε 1e-6, weight decay 0.01) at 1e-4
after 10 k warm-up steps, decaying linearly; languages sampled with mBERT's exponential
smoothing, α 0.7. Masked LM only: BERT's next-sentence prediction is no xlpretrain objective.

tiny trains MMLM + TLM on the demo corpus on a CPU in well under a minute, with the SentencePiece
tokenizer a run trains when given none (exported by `to-hf` so that transformers reads it).
"""

from xlpretrain.training.config import default_config

SIZES = {
    # name: (layers, hidden, heads, mlp, vocabulary)
    "tiny": (2, 64, 4, 256, 2002),
    "base": (12, 768, 12, 3072, 119_547),
}
LONG_ROWS_FROM = 0.9  # the share of the run trained on 128-token rows


def get_config(arg: str = "base"):
    size = arg or "base"
    if size not in SIZES:
        raise ValueError(f"configs/mbert.py: unknown size {size!r}; choose one of {sorted(SIZES)}")
    layers, hidden, heads, mlp, vocab = SIZES[size]
    cfg = default_config()
    cfg.model.update(
        architecture="bert",
        num_layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        mlp_dim=mlp,
        vocab_size=vocab,
        max_positions=512,
        layer_norm_eps=1e-12,
    )
    cfg.data.update(mono_alpha=0.7, parallel_alpha=0.7)
    cfg.optim.update(b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01, schedule="linear")
    if size == "tiny":
        cfg.train.update(steps=150, log_every=50)
        cfg.data.update(max_length=64, batch_size=16)
        cfg.model.update(dropout_rate=0.0, attention_dropout_rate=0.0)
        cfg.optim.update(learning_rate=2e-3, warmup_steps=15)
        cfg.tokenizer.sentences_per_language = 1000
        cfg.objectives.tlm = 1.0
    else:
        cfg.train.steps = 1_000_000
        cfg.data.update(max_length=128, batch_size=256)
        cfg.model.dtype = "bfloat16"
        cfg.optim.update(learning_rate=1e-4, warmup_steps=10_000)
        cfg.objectives.mmlm = 0.0  # the schedule sets it
        mmlm = {"mmlm": 1.0}
        cfg.schedule = (
            {"start_step": 0, "objectives": mmlm},
            {"start_step": LONG_ROWS_FROM, "objectives": mmlm, "max_length": {"mmlm": 512}},
        )
    return cfg
