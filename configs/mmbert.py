"""mmBERT (Marone, Weller et al., 2025): ModernBERT's architecture trained on 1,833 languages in
three phases. `configs/mmbert.py:{tiny,small,base}`.

The architecture (`model.architecture = "modernbert"`, xlpretrain/model/modern.py): 22 pre-norm
layers without biases, GeGLU (intermediate 1,152), rotary positions (θ 160,000 on the global
layers, 10,000 on the local ones), every third layer global and the others within 128 tokens.
small is 384 wide (140 M parameters), base 768 (307 M); both read Gemma 2's ~256 k-id
vocabulary.

The recipe in one run (the three phases are `data.anneal` points at their boundaries): 3 T
tokens, of which pre-training 2.3 T (60 languages, 30 % masked, sampling α 0.7), mid-training
0.6 T (110 languages, 15 %, α 0.5) and the decay phase 0.1 T (every language, 5 %, α 0.3), on
a warm-up–stable–decay learning rate whose decay is the decay phase (ModernBERT's 1-sqrt shape).
Mid-training extends the context from 1,024 to 8,192 tokens: from its first step the rows are
8 times longer and 8 times fewer (the same tokens a step), a second stage of the `schedule`
whose new shapes compile its step once, announced in the log. The merge of the decay phase's
checkpoints is a separate command, `python -m xlpretrain.convert merge WORKDIR --steps
N1,N2,... --out DIR` (docs/modern.md). The learning rate, batch and warm-up are ours: the facts
above do not give them.

tiny trains on the demo corpus on 2 CPU cores in about a minute and a half (884 k tokens),
with TLM and CAMLM beside MMLM (the cross-lingual objectives on the modern backbone), its phases
scaled to its 300 steps, its 40 languages joining 10 → 20 → 40 and its context extended from
128 to 256 tokens.
"""

from xlpretrain.training.config import default_config

SIZES = {
    # name: (layers, hidden, heads, intermediate, vocabulary, local window)
    "tiny": (4, 64, 4, 96, 8002, 32),
    "small": (22, 384, 6, 1152, 256_000, 128),
    "base": (22, 768, 12, 1152, 256_000, 128),
}
# Where each phase starts, as a share of the run: pre-training 2.3 T of 3 T tokens, then
# mid-training 0.6 T, then the decay phase 0.1 T.
MID, DECAY = 2.3 / 3.0, 2.9 / 3.0


def phases(languages: tuple[int, int, int]) -> tuple[dict, ...]:
    """`data.anneal`: each phase's mask rate, α and languages, held through the phase (two
    points at one step are a jump)."""
    settings = [
        {"mono_mask_rate": rate, "parallel_mask_rate": rate, "mono_alpha": alpha}
        for rate, alpha in ((0.30, 0.7), (0.15, 0.5), (0.05, 0.3))
    ]
    points = [{"step": 0, **settings[0], "mono_languages": languages[0]}]
    for phase, start in ((1, MID), (2, DECAY)):
        points.append({"step": start, **settings[phase - 1]})
        points.append({"step": start, **settings[phase], "mono_languages": languages[phase]})
    return tuple(points)


def context_extension(
    objectives: dict[str, float], rows: int, length: int, factor: int
) -> tuple[dict, ...]:
    """`schedule`: the objectives train on `rows` rows of `length` tokens each until
    mid-training, then on rows `factor` times as long and `factor` times fewer."""
    longer = {
        "batch_size": dict.fromkeys(objectives, rows // factor),
        "max_length": dict.fromkeys(objectives, length * factor),
    }
    return (
        {"start_step": 0, "objectives": objectives},
        {"start_step": MID, "objectives": objectives, **longer},
    )


def get_config(arg: str = "base"):
    size = arg or "base"
    if size not in SIZES:
        raise ValueError(f"configs/mmbert.py: unknown size {size!r}; choose one of {sorted(SIZES)}")
    layers, hidden, heads, intermediate, vocab, window = SIZES[size]
    cfg = default_config()
    cfg.model.update(
        architecture="modernbert",
        absolute_positions=False,
        num_layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        mlp_dim=intermediate,
        vocab_size=vocab,
        local_window=window,
        global_every=3,
        rope_theta=160_000.0,
        local_rope_theta=10_000.0,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
    )
    cfg.optim.update(schedule="wsd", decay_shape="1-sqrt", b1=0.9, b2=0.98, eps=1e-6)
    cfg.optim.weight_decay = 0.01
    if size == "tiny":
        cfg.train.steps = 300
        cfg.train.log_every = 50
        cfg.data.update(max_length=128, batch_size=8, mono_alpha=0.7, parallel_alpha=0.5)
        cfg.model.max_positions = 256
        cfg.optim.update(learning_rate=2e-3, warmup_steps=30)
        objectives, factor = {"mmlm": 1.0, "tlm": 0.5, "camlm": 0.5}, 2
        cfg.data.anneal = phases((10, 20, 40))
        cfg.eval.every_steps = 150
    else:
        # 3 T tokens a step of 4 M tokens (4,096 rows of 1,024, then 512 of 8,192): 715 k steps.
        cfg.data.update(max_length=1024, batch_size=4096, mono_alpha=0.7)
        # The fused kernels on GPUs and TPUs skip the tiles outside a local layer's window, and
        # XLA's attention would hold 8,192² scores a layer (docs/performance.md).
        cfg.model.update(max_positions=8192, dtype="bfloat16", attention="auto")
        cfg.train.steps = round(3e12 / (1024 * 4096))
        cfg.optim.update(learning_rate=8e-4 if size == "small" else 5e-4, warmup_steps=2_000)
        objectives, factor = {"mmlm": 1.0}, 8
        cfg.data.anneal = phases((60, 110, 1833))
    cfg.objectives.mmlm = 0.0  # the schedule sets them
    cfg.schedule = context_extension(objectives, cfg.data.batch_size, cfg.data.max_length, factor)
    # The learning rate's decay is the decay phase, at any --config.train.steps.
    cfg.optim.decay_fraction = 1.0 - DECAY
    return cfg
