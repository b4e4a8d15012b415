"""Training step for step against Hugging Face: an implementation nobody here wrote.

A tiny XLM-R-shaped MMLM run (one segment per row, so HF's padding mask expresses our
attention; no dropout; float32) trains with our trainer. Its step-0 parameters, exported with
our converter, train in `transformers.XLMRobertaForMaskedLM` on the same batches with
`torch.optim.AdamW`, HF's linear warm-up/decay schedule, `clip_grad_norm_` and the weight-decay
set of HF's own `get_parameter_names` (no decay on biases and LayerNorms). The settings make
every convention count: warm-up and decay both inside the run, clipping on every step, a weight
decay that moves LayerNorm scales visibly if it reached them. The losses and the gradient norms
(before clipping) agree at every step and every parameter after the last, and again with
`train.grad_accum=2` against torch's full batch: clipping on every step and Adam's indifference
to a uniform scale hide a gradient scaled wrong from the losses and the parameters, not from
the norms.
"""

import dataclasses

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers.models.xlm_roberta import modeling_xlm_roberta as xlm_roberta  # noqa: E402
from transformers.trainer_pt_utils import get_parameter_names  # noqa: E402

from xlpretrain.convert import xlmr  # noqa: E402
from xlpretrain.training import trainer as trainer_lib  # noqa: E402
from xlpretrain.training.metrics import read_metrics  # noqa: E402
from xlpretrain.training.plan import RunPlan, resolve  # noqa: E402

# What XLMRobertaEmbeddings computes from the ids (a module function before transformers 5).
HF_POSITIONS = getattr(
    xlm_roberta,
    "create_position_ids_from_input_ids",
    getattr(xlm_roberta.XLMRobertaEmbeddings, "create_position_ids_from_input_ids", None),
)
STEPS = 20
SETTINGS = dict(
    objectives={"mmlm": 1.0},
    data__pack=False,  # one segment per row: HF's attention mask is our MMLM mask
    model__dropout_rate=0.0,
    model__attention_dropout_rate=0.0,
    train__steps=STEPS,
    train__checkpoint_every=STEPS,
    optim__learning_rate=3e-3,
    optim__warmup_steps=4,
    optim__b1=0.9,
    optim__b2=0.98,
    optim__eps=1e-6,
    optim__weight_decay=0.5,
    optim__clip_norm=0.5,  # below the gradient norm at every step: clipping always acts
)
RTOL = 1e-5  # float32 in both; they agree to ~1e-7
# HF's copies of the word embeddings and the LM head's bias, which our export leaves out.
TIED = {"lm_head.decoder.weight", "lm_head.decoder.bias"}
PARAM_ATOL = 2e-6  # a step moves a parameter by up to 3e-3; they agree to ~3e-7


@dataclasses.dataclass
class Trained:
    """A run's loss and gradient norm (before clipping) at each step, and its parameters after
    the last step by Hugging Face name."""

    losses: list[float]
    norms: list[float]
    params: dict[str, np.ndarray]


def our_run(plan: RunPlan, workdir) -> tuple[Trained, dict, list[dict]]:
    """Our trainer's run, its step-0 parameters, and the batches it trained on (its own
    builder, step by step)."""
    trainer = trainer_lib.build(plan, str(workdir), jax.devices()[:1])
    initial = jax.device_get(trainer.training.state.params)  # before run() donates the state
    batches = [trainer.builder.map(step)["mmlm"] for step in range(STEPS)]
    try:
        final = jax.device_get(trainer_lib.run(trainer).params)
    finally:
        trainer.checkpointer.close()
    records = read_metrics(str(workdir))
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    config = plan.model
    trained = Trained(
        [r["loss"] for r in records], [r["grad_norm"] for r in records],
        xlmr.CONVERTER.params_to_hf(final, config),
    )  # fmt: skip
    return trained, initial, batches


def hf_inputs(batch: dict, pad_id: int) -> dict:
    """Our batch as HF reads it: ids, the padding mask, labels -100 off the prediction slots."""
    ids = torch.tensor(batch["input_ids"], dtype=torch.long)
    labels = np.full(batch["input_ids"].shape, -100)
    rows, slots = np.nonzero(batch["pred_weights"] > 0)
    labels[rows, batch["pred_positions"][rows, slots]] = batch["pred_labels"][rows, slots]
    real = batch["segment_ids"] > 0
    # HF derives positions from the ids: pad + 1 onwards over the real tokens, as ours are.
    hf_positions = HF_POSITIONS(ids, pad_id).numpy()
    np.testing.assert_array_equal(hf_positions[real], batch["positions"][real])
    assert (batch["segment_ids"] <= 1).all(), "one segment per row"
    return {
        "input_ids": ids,
        "attention_mask": torch.tensor(real, dtype=torch.long),
        "labels": torch.tensor(labels, dtype=torch.long),
    }


def hf_run(plan: RunPlan, params, batches) -> Trained:
    """`XLMRobertaForMaskedLM` from our exported step-0 parameters, trained as HF trains."""
    config = plan.model
    model = transformers.XLMRobertaForMaskedLM(
        transformers.XLMRobertaConfig(**xlmr.config_to_hf(config))
    )
    exported = xlmr.CONVERTER.params_to_hf(params, config)
    state = {name: torch.tensor(t) for name, t in exported.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= TIED
    assert model.lm_head.decoder.weight is model.roberta.embeddings.word_embeddings.weight
    model.train()

    decayed = set(get_parameter_names(model, [torch.nn.LayerNorm], ["bias"]))
    named = dict(model.named_parameters())  # tied tensors once
    o = plan.optim
    groups = [
        {"params": [p for n, p in named.items() if n in decayed], "weight_decay": o.weight_decay},
        {"params": [p for n, p in named.items() if n not in decayed], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(
        groups,
        lr=o.learning_rate,
        betas=(o.b1, o.b2),
        eps=o.eps,
    )
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, o.warmup_steps, STEPS)
    losses, norms = [], []
    for batch in batches:
        loss = model(**hf_inputs(batch, config.pad_token_id)).loss
        optimizer.zero_grad()
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), o.clip_norm)))
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
    buffers = {name for name, _ in model.named_buffers()} | TIED
    final = {n: t.detach().numpy() for n, t in model.state_dict().items() if n not in buffers}
    return Trained(losses, norms, final)


@pytest.fixture(scope="module")
def hugging_face(udhr_run_config, tmp_path_factory):
    """Our run with the full batch, and HF trained from its step-0 parameters on its batches."""
    cfg = udhr_run_config(**SETTINGS)
    plan = resolve(cfg)
    ours, params, batches = our_run(plan, tmp_path_factory.mktemp("full"))
    return cfg, batches, ours, hf_run(plan, params, batches)


def assert_same_training(ours: Trained, theirs: Trained) -> None:
    np.testing.assert_allclose(ours.norms, theirs.norms, rtol=RTOL)
    np.testing.assert_allclose(ours.losses, theirs.losses, rtol=RTOL)
    assert set(ours.params) == set(theirs.params)
    for name, value in theirs.params.items():
        np.testing.assert_allclose(ours.params[name], value, rtol=RTOL, atol=PARAM_ATOL,
                                   err_msg=name)  # fmt: skip


def test_training_matches_hugging_face_step_for_step(hugging_face):
    _, batches, ours, theirs = hugging_face
    assert min(theirs.norms) > SETTINGS["optim__clip_norm"]  # clipping acted on every step
    assert all(b["segment_ids"].max() == 1 for b in batches)  # one segment per row
    assert sum(int((b["segment_ids"] == 0).sum()) for b in batches) > 100  # padding present
    assert_same_training(ours, theirs)
    assert ours.losses[-1] < ours.losses[0] - 0.3  # it learned: the steps compared are updates


def test_accumulated_gradients_match_hugging_faces_full_batch(hugging_face, tmp_path):
    cfg, batches, _, theirs = hugging_face
    accumulated = cfg.copy_and_resolve_references()
    accumulated.train.grad_accum = 2
    ours, _, ours_batches = our_run(resolve(accumulated), tmp_path)
    for a, b in zip(batches, ours_batches, strict=True):  # the same rows, split in two
        np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
    assert_same_training(ours, theirs)
