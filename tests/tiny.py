"""Tiny settings and hand-made inputs shared by the tests.

`run_config` is a pre-training run that trains a few steps on CPU in seconds (the fixture
`udhr_run_config` in conftest.py binds it to the UDHR corpus and tokenizer), `model_config` the
small encoder that model and objective unit tests build directly, `token_batch` writes token
metadata rows by hand, `mask_tokens` masks one row as the pipeline does, and
`step_batch_builder` is the input pipeline over given streams without the grain plumbing, and
`train_json_tokenizer` makes a `tokenizer.json` with `tokenizers`' own trainer, and
`workdir_at_step` copies a finished run's workdir as a stop at a step leaves it. A test that needs
another setting passes it as an override.
"""

from __future__ import annotations

import json
import pathlib
import shutil
from collections.abc import Iterable, Mapping, Sequence

import jax
import ml_collections
import numpy as np
import pytest

from xlpretrain.data import prepare as prepare_lib
from xlpretrain.data.pretraining.examples import FIRST_POSITION, PAD_POSITION
from xlpretrain.data.pretraining.masking import BERT_CORRUPTION, mask_row
from xlpretrain.data.pretraining.pipeline import Corpus, StepBatchBuilder
from xlpretrain.data.pretraining.streams import Phase, StreamSpec
from xlpretrain.data.tokenizer import SentencePieceTokenizer, Tokenizer
from xlpretrain.model.config import ModelConfig
from xlpretrain.objectives.declaration import Context
from xlpretrain.training.config import default_config
from xlpretrain.training.plan import resolve

STEPS = 8  # run_config's train.steps
PAD_ID = SentencePieceTokenizer.layout(vocab_size=40).pad  # `token_batch`'s padding


def run_config(
    corpus: pathlib.Path | None = None,
    tokenizer: pathlib.Path | None = None,
    **overrides,
) -> ml_collections.ConfigDict:
    """A tiny pre-training run, checked by resolving its plan: `STEPS` steps of 8 rows × 32
    tokens, MMLM + TLM at 0.5, a 2-layer encoder 32 wide (4 heads, FFN 64, dropout 0.1) over
    the 1002 ids of the tests' UDHR tokenizer, learning rate 1e-3 after 2 warm-up steps,
    metrics every step and synchronous checkpoints (every 100 steps: none unless asked for).

    `corpus`: a folder with `mono/` and `parallel/` (default: the built-in demo corpus);
    `tokenizer`: a SentencePiece model (default: one trained on the corpus at start-up).
    `overrides`: `section__key=value`, or `section=value` to replace a whole section
    (`objectives={"mmlm": 1.0}`).
    """
    cfg = default_config()
    cfg.train.update(steps=STEPS, log_every=1, checkpoint_every=100, async_checkpointing=False)
    if corpus is not None:
        cfg.data.update(mono_dir=str(corpus / "mono"), parallel_dir=str(corpus / "parallel"))
    cfg.data.update(max_length=32, batch_size=8)
    if tokenizer is not None:
        cfg.tokenizer.path = str(tokenizer)
    cfg.model.update(vocab_size=1002, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)
    cfg.model.update(dropout_rate=0.1, attention_dropout_rate=0.1)
    cfg.optim.update(learning_rate=1e-3, warmup_steps=2)
    cfg.objectives = {"mmlm": 1.0, "tlm": 0.5}
    for key, value in overrides.items():
        section, _, name = key.partition("__")
        if name:
            cfg[section][name] = value
        else:
            cfg[section] = value
    resolve(cfg)  # refused here as a run would refuse it
    return cfg


def objective_context(name: str) -> Context:
    """Objective `name`'s typed settings as the default config resolves them: the objective
    alone in a run, on a model with what any objective requires (cross-attention, language
    embeddings)."""
    cfg = default_config()
    cfg.objectives.mmlm, cfg.objectives[name] = 0.0, 1.0
    cfg.model.update(cross_attention=True, language_embeddings=True)
    return resolve(cfg).contexts[name]


def model_config(**overrides) -> ModelConfig:
    """The encoder of the model and objective unit tests: 40 ids, 2 layers 16 wide (2 heads,
    FFN 32), 32 positions and no dropout, so outputs and gradients are deterministic."""
    settings = dict(
        vocab_size=40,
        hidden_size=16,
        num_layers=2,
        num_heads=2,
        mlp_dim=32,
        max_positions=32,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
    )
    return ModelConfig(**{**settings, **overrides})


def token_batch(
    *rows: Sequence[tuple[int, ...]], length: int | None = None, **fields: np.ndarray
) -> dict[str, np.ndarray]:
    """Token metadata written by hand: one `[len(rows), length]` int32 array per field.

    A row lists its tokens as `(id, segment[, side[, masked]])`, side and masked 0 unless
    given, segment 0 for padding; rows are padded to `length` (default: the longest row)
    with `<pad>` tokens (a SentencePiece vocabulary's, `PAD_ID`). As in the
    pipeline's rows, positions count from `FIRST_POSITION` within each segment
    (`PAD_POSITION` on padding), and pair_ids equal segment_ids. `fields` add or replace arrays
    (lang_ids, labels, pred_positions, …).
    """
    length = length or max(len(row) for row in rows)
    padding = (PAD_ID, 0, 0, 0)
    table = np.array(
        [[(*t, *padding[len(t) :]) for t in row] + [padding] * (length - len(row)) for row in rows],
        np.int32,
    )
    ids, segment, side, masked = (np.ascontiguousarray(table[..., i]) for i in range(4))
    positions = np.full_like(segment, PAD_POSITION)
    for b, row_segments in enumerate(segment):
        for s in np.unique(row_segments[row_segments > 0]):
            where = np.flatnonzero(row_segments == s)
            positions[b, where] = FIRST_POSITION + np.arange(len(where))
    batch = {
        "input_ids": ids,
        "segment_ids": segment,
        "pair_ids": segment.copy(),
        "side": side,
        "is_masked": masked,
        "positions": positions,
    }
    return {**batch, **fields}


def mask_tokens(
    row: dict[str, np.ndarray],
    rng: np.random.Generator,
    tokenizer,
    *,
    rate: float,
    num_slots: int,
    corruption: tuple[float, float, float] = BERT_CORRUPTION,
) -> dict[str, np.ndarray]:
    """`mask_row` as the pipeline calls it: `tokenizer`'s special ids, `<mask>` and vocabulary
    size."""
    return mask_row(
        row,
        rng,
        rate=rate,
        num_slots=num_slots,
        special_ids=tokenizer.special_ids(),
        mask_id=tokenizer.mask_id,
        vocab_size=tokenizer.vocab_size,
        corruption=corruption,
    )


def step_batch_builder(
    corpus: Corpus,
    tokenizer: Tokenizer,
    streams: Mapping[str, StreamSpec],
    rows: Mapping[str, int] | int,
    **options,
) -> StepBatchBuilder:
    """A builder drawing `rows` global rows of each stream every step (an int: of every one);
    `max_length` (default 64) is the row length of streams that do not set their own;
    `options` override the pipeline settings (seed 0, α 0.3, packed)."""
    rows = dict.fromkeys(streams, rows) if isinstance(rows, int) else dict(rows)
    max_length = options.pop("max_length", 64)
    streams = {n: s if s.max_length else s.at_length(max_length) for n, s in streams.items()}
    settings = dict(
        phases=[Phase(0, rows, streams)],
        seed=0,
        mono_alpha=0.3,
        parallel_alpha=0.3,
        pack=True,
        reset_positions=False,
    )
    return StepBatchBuilder(corpus, tokenizer, **{**settings, **options})


def udhr_subset(udhr: pathlib.Path, root: pathlib.Path, languages: Sequence[str]) -> pathlib.Path:
    """`root` holding a few UDHR languages as a corpus folder: `mono/<lang>.txt` of each and
    `parallel/eng-<lang>.tsv` of each but English."""
    for kind in ("mono", "parallel"):
        (root / kind).mkdir(parents=True, exist_ok=True)
    for lang in languages:
        shutil.copy(udhr / "mono" / f"{lang}.txt", root / "mono")
        if lang != "eng":
            shutil.copy(udhr / "parallel" / f"eng-{lang}.tsv", root / "parallel")
    return root


def prepare_store(
    corpus: pathlib.Path, out: pathlib.Path, tokenizer: pathlib.Path, **options
) -> dict | None:
    """`python -m xlpretrain.data.prepare` of a corpus folder (`mono/`, `parallel/`) into
    `out` with `tokenizer`; `options` are `prepare`'s."""
    return prepare_lib.prepare(
        out=str(out),
        mono_dir=str(corpus / "mono"),
        parallel_dir=str(corpus / "parallel"),
        tokenizer=str(tokenizer),
        **options,
    )


# ModernBERT's special tokens, in the order ModernBERT numbers them (50280-50284).
JSON_SPECIALS = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")


def train_json_tokenizer(
    texts: Iterable[str], folder: pathlib.Path, vocab_size: int, *, config: bool = False
) -> pathlib.Path:
    """`folder/tokenizer.json`: a byte-level BPE of `vocab_size` ids trained offline by
    `tokenizers`' own trainer, whose special tokens (`JSON_SPECIALS`) come after every piece, at
    ids `vocab_size - 5` … `vocab_size - 1` as ModernBERT's do, so that an id assumed at
    XLM-R's 0–3 shows. Its post-processor adds `[CLS] … [SEP]`; `config` also writes a
    `tokenizer_config.json` naming each role (as a Hugging Face folder has)."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(JSON_SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    assert tokenizer.get_vocab_size() == vocab_size - len(JSON_SPECIALS), "too little text"
    tokenizer.add_special_tokens(list(JSON_SPECIALS))
    cls, sep = (tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]"))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    if config:
        roles = ("unk_token", "cls_token", "sep_token", "pad_token", "mask_token")
        named = dict(zip(roles, JSON_SPECIALS, strict=True))
        (folder / "tokenizer_config.json").write_text(json.dumps(named))
    return folder / "tokenizer.json"


def one_device_and_a_mesh(plan, rows: int = 8, seed: int = 3) -> list[tuple[dict, dict]]:
    """(metrics, updated parameters) of one step of `plan`'s first stage on the same synthetic
    batch (`rows` rows per objective), on one device and on data 2 × fsdp 2 × tensor 2: what
    a sharded-equals-one-device test compares."""
    from xlpretrain import objectives
    from xlpretrain.bench.step import synthetic_batch
    from xlpretrain.parallel.sharding import make_mesh
    from xlpretrain.training.step import setup_training

    model, init = objectives.build_model(plan.model_config(4), plan.objectives, plan.contexts)
    rng = np.random.default_rng(seed)
    streams = plan.stage_streams[0]
    batch = {n: synthetic_batch(rows, streams[n], plan.model.vocab_size, rng) for n in streams}
    results = []
    for mesh in (make_mesh(1, 1, 1, jax.devices()[:1]), make_mesh(2, 2, 2, jax.devices()[:8])):
        training = setup_training(plan, model, init, mesh)
        placed = jax.device_put(batch, training.batch_sharding)
        state, metrics = training.step_fns[0](training.state, placed)
        results.append((jax.device_get(metrics), jax.device_get(state.params)))
    return results


def workdir_at_step(finished: pathlib.Path, copy: pathlib.Path, step: int) -> pathlib.Path:
    """A copy of the finished run's workdir as a run stopped after `step` leaves it (its
    checkpoints after `step` removed), for a resume without recomputing the first steps."""
    shutil.copytree(finished, copy)
    for checkpoint in (copy / "checkpoints").iterdir():
        if checkpoint.name.isdigit() and int(checkpoint.name) > step:
            shutil.rmtree(checkpoint)
    return copy


def trains_alone(plan, name: str) -> None:
    """Two steps of objective `name`, alone in `plan`, on synthetic rows and one device: its
    losses are finite and the parameters move (the first step's learning rate is 0: warm-up).
    What "every objective trains on this backbone" asserts."""
    from xlpretrain import objectives
    from xlpretrain.bench.step import synthetic_batch
    from xlpretrain.parallel.sharding import make_mesh
    from xlpretrain.training.step import setup_training

    model, init = objectives.build_model(plan.model_config(4), plan.objectives, plan.contexts)
    training = setup_training(plan, model, init, make_mesh(1, 1, 1, jax.devices()[:1]))
    rng = np.random.default_rng(0)
    batch = {name: synthetic_batch(8, plan.stage_streams[0][name], plan.model.vocab_size, rng)}
    before = jax.device_get(training.state.params)
    state = training.state
    for _ in range(2):
        state, metrics = training.step_fns[0](state, batch)
        assert np.isfinite(float(metrics["loss"])), name
    moved = jax.tree.map(lambda a, b: bool(np.any(a != b)), before, jax.device_get(state.params))
    assert any(jax.tree.leaves(moved)), name


def assert_from_hf_refuses_architecture(
    hf_folder: pathlib.Path, tmp_path: pathlib.Path, architecture: str, message: str
) -> None:
    """A copy of the HF folder `hf_folder` whose `config.json` names `architecture` is refused
    by `from_hf` with an error matching `message`, and nothing is written."""
    from xlpretrain.convert import from_hf

    (tmp_path / "hf").mkdir()
    for file in hf_folder.iterdir():
        (tmp_path / "hf" / file.name).write_bytes(file.read_bytes())
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    config["architectures"] = [architecture]
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=message):
        from_hf(tmp_path / "hf", tmp_path / "ours")
    assert not (tmp_path / "ours").exists()
