"""The training loop end to end: sharded = unsharded, exact resume, accumulation, bad input."""

import dataclasses
import pathlib
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl import flags

from tests.tiny import STEPS, workdir_at_step
from xlpretrain.data.tokenizer import Tokenizer
from xlpretrain.training import trainer as trainer_lib
from xlpretrain.training.checkpoint import CheckpointError, CheckpointMismatchError
from xlpretrain.training.config import ConfigError, default_config
from xlpretrain.training.divergence import DivergenceError
from xlpretrain.training.metrics import read_metrics
from xlpretrain.training.plan import resolve


def losses(workdir):
    return {r["step"]: (r["loss"], r["loss/mmlm"], r["loss/tlm"]) for r in read_metrics(workdir)}


def run(cfg, workdir, devices=None):
    trainer = trainer_lib.build(resolve(cfg), str(workdir), devices)
    try:
        return trainer_lib.run(trainer)
    finally:
        trainer.checkpointer.close()


@pytest.fixture(scope="module")
def reference_run(udhr_run_config, tmp_path_factory):
    """STEPS steps straight through on one device, checkpointing every 2 steps (keeping 2) and
    profiling steps 2-3."""
    workdir = tmp_path_factory.mktemp("reference")
    cfg = udhr_run_config(
        train__checkpoint_every=2,
        train__keep_checkpoints=2,
        train__profile_steps="2:4",
    )
    run(cfg, workdir, jax.devices()[:1])
    return workdir


@pytest.fixture(scope="module")
def reference(reference_run):
    return losses(reference_run)


def test_reference_run_keeps_n_checkpoints_and_writes_a_profile(reference_run):
    assert sorted(p.name for p in (reference_run / "checkpoints").iterdir()) == ["6", "8"]
    assert any(p.is_file() for p in (reference_run / "profile").rglob("*"))
    assert any((reference_run / "tb").iterdir())
    record = read_metrics(reference_run)[0]
    for key in (
        "loss",
        "loss/mmlm",
        "loss/tlm",
        "accuracy/mmlm",
        "count/tlm",
        "learning_rate",
        "grad_norm",
        "tokens_per_s",
    ):
        assert np.isfinite(record[key]), key
    assert record["learning_rate"] == 0.0 and read_metrics(reference_run)[2]["learning_rate"] > 0


def test_worker_processes_give_the_same_stream_and_resume_exactly(
    reference, udhr_run_config, tmp_path
):
    flags.FLAGS.mark_as_parsed()  # grain's worker options are absl flags (parsed by the CLI)
    devices = jax.devices()[:1]
    run(udhr_run_config(data__num_workers=2, train__stop_at=3), tmp_path, devices)
    run(udhr_run_config(data__num_workers=2), tmp_path, devices)
    got = losses(tmp_path)
    for step in range(1, STEPS + 1):
        np.testing.assert_allclose(got[step], reference[step], rtol=1e-5, atol=1e-5)


def test_sharded_equals_one_device_and_restores_onto_another_mesh(
    reference, udhr_run_config, tmp_path
):
    """data=2 × fsdp=4 for half the run, stopped, then resumed (a) on the same mesh and (b) on
    data=2 × fsdp=2 × tensor=2: both log the losses of one device straight through."""
    assert sorted(reference) == list(range(1, STEPS + 1))
    half = STEPS // 2
    first, second = tmp_path / "same_mesh", tmp_path / "other_mesh"
    cfg = udhr_run_config(mesh__data=2, mesh__fsdp=4, train__stop_at=half)
    run(cfg, first)
    assert sorted(losses(first)) == list(range(1, half + 1))
    assert (first / "checkpoints" / str(half)).is_dir()
    shutil.copytree(first, second)
    run(udhr_run_config(mesh__data=2, mesh__fsdp=4), first)
    run(udhr_run_config(mesh__data=2, mesh__fsdp=2, mesh__tensor=2), second)
    same, other = losses(first), losses(second)
    assert sorted(same) == sorted(other) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        np.testing.assert_allclose(
            same[step], reference[step], rtol=1e-5, atol=1e-5, err_msg=f"step {step}"
        )
        # Tensor parallelism splits the matmul reductions, so float32 rounding differs a little
        # and grows with training; the restore itself is exact (steps 1-4 are the same run).
        np.testing.assert_allclose(
            other[step], reference[step], rtol=1e-4, atol=1e-4, err_msg=f"step {step}"
        )


def test_stop_and_resume_on_the_same_mesh_is_exact(reference, udhr_run_config, tmp_path, caplog):
    """A `train.stop_at` run says where it stopped and how to go on; the resumed run logs the
    losses of an uninterrupted one; run again once finished, the command answers "nothing to
    do" from the checkpoint folder alone, without reading the corpus."""
    devices = jax.devices()[:1]
    with caplog.at_level("INFO", logger="xlpretrain"):
        run(udhr_run_config(train__stop_at=3), tmp_path, devices)
    assert f"stopped after steps 1-3 of {STEPS} in " in caplog.text
    assert f"step 3/{STEPS} (stopping at 3) | loss " in caplog.text  # not "step 3/3"
    assert f"to continue to step {STEPS}: run the same command again, without" in caplog.text
    assert "next: python -m xlpretrain.convert" not in caplog.text
    assert f"train.stop_at=3; to continue to step {STEPS}: run" in trainer_lib.finished(
        resolve(udhr_run_config(train__stop_at=3)), str(tmp_path)
    )
    assert trainer_lib.finished(resolve(udhr_run_config()), str(tmp_path)) is None
    run(udhr_run_config(), tmp_path, devices)
    got = losses(tmp_path)
    for step in range(1, STEPS + 1):
        np.testing.assert_allclose(got[step], reference[step], rtol=1e-5, atol=1e-5)

    saved, config = tmp_path / "config.json", tmp_path / "saved_config.py"
    config.write_text(
        "import json, ml_collections\n"
        "def get_config():\n"
        f"    return ml_collections.ConfigDict(json.loads(open({str(saved)!r}).read()))\n"
    )
    again = subprocess.run(
        [sys.executable, "-m", "xlpretrain.train", f"--config={config}", f"--workdir={tmp_path}",
         "--config.data.mono_dir=/no/corpus/here", "--config.data.parallel_dir=/no/pairs"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert (
        f"nothing to do: the latest checkpoint, {tmp_path / 'checkpoints' / str(STEPS)}, is at "
        f"step {STEPS}, the last of train.steps={STEPS}" in again.stdout
    )


def test_dropout_from_rbg_resumes_exactly_and_sharded_equals_one_device(
    reference, udhr_run_config, tmp_path
):
    """`train.prng_impl=rbg` draws other dropout masks than threefry (the losses differ from the
    reference's), and its run resumed halfway on data=2 × fsdp=4 logs the losses of one device
    straight through (XLA:CPU generates a sharded RngBitGenerator's bits whole;
    docs/performance.md says what a GPU does). An unknown implementation is a config error.
    The halfway checkpoint is the straight run's own (its later one removed): a run stopped
    there would have computed the same first half again."""
    rbg = dict(train__prng_impl="rbg", train__checkpoint_every=STEPS // 2)
    run(udhr_run_config(**rbg), tmp_path / "straight", jax.devices()[:1])
    workdir_at_step(tmp_path / "straight", tmp_path / "resumed", STEPS // 2)
    run(udhr_run_config(mesh__data=2, mesh__fsdp=4, **rbg), tmp_path / "resumed")
    assert (tmp_path / "resumed" / "checkpoints" / str(STEPS)).is_dir()  # it trained 5-8
    straight, resumed = losses(tmp_path / "straight"), losses(tmp_path / "resumed")
    assert not np.allclose(straight[1], reference[1], rtol=1e-4)
    for step in range(1, STEPS + 1):
        np.testing.assert_allclose(resumed[step], straight[step], rtol=1e-5, atol=1e-5)
    with pytest.raises(ConfigError, match="train.prng_impl"):
        resolve(udhr_run_config(train__prng_impl="philox4x32"))


def test_gradient_accumulation_matches_the_full_batch(udhr_run_config, tmp_path):
    options = dict(model__dropout_rate=0.0, model__attention_dropout_rate=0.0, train__steps=3)
    devices = jax.devices()[:2]
    run(udhr_run_config(**options), tmp_path / "a", devices)
    run(udhr_run_config(train__grad_accum=4, **options), tmp_path / "b", devices)
    a, b = losses(tmp_path / "a"), losses(tmp_path / "b")
    for step in a:
        np.testing.assert_allclose(a[step], b[step], rtol=1e-5, atol=1e-5)


def test_corrupt_latest_checkpoint_falls_back_to_the_previous_one(
    reference_run, reference, udhr_run_config, tmp_path, caplog
):
    """The reference keeps steps 6 and 8. Step 8's files damaged: the run names it, moves it
    to checkpoints/unreadable/, resumes from 6 and logs the reference's losses for 7-8. With
    every checkpoint damaged it stops (no silent fresh start) unless train.allow_fresh_start."""
    shutil.copytree(reference_run, tmp_path / "run")
    workdir = tmp_path / "run"
    for path in (workdir / "checkpoints" / "8" / "state").rglob("*"):
        if path.is_file():
            path.write_bytes(b"garbage")
    devices = jax.devices()[:1]
    with caplog.at_level("WARNING", logger="xlpretrain"):
        run(udhr_run_config(train__checkpoint_every=2), workdir, devices)
    assert f"cannot restore the checkpoint at {workdir / 'checkpoints' / '8'}" in caplog.text
    assert "falling back to an earlier checkpoint" in caplog.text
    assert [p.name.split("-")[0] for p in (workdir / "checkpoints" / "unreadable").iterdir()] == [
        "8"
    ]
    got = losses(workdir)
    assert sorted(got) == list(range(1, STEPS + 1))  # 7-8 rewritten once, not appended twice
    for step in (7, 8):
        np.testing.assert_allclose(got[step], reference[step], rtol=1e-5, atol=1e-5)

    for step in (6, 8):
        for path in (workdir / "checkpoints" / str(step) / "data").rglob("*"):
            if path.is_file():
                path.write_bytes(b"\xff")
    cfg = udhr_run_config(train__steps=2 * STEPS, train__resume_with_changes=True)
    with pytest.raises(CheckpointError, match="none of the 2 checkpoint.*allow_fresh_start"):
        run(cfg, workdir, devices)
    assert not (workdir / "checkpoints" / "8").exists()  # both set aside, nothing deleted
    assert len(list((workdir / "checkpoints" / "unreadable").iterdir())) == 3
    cfg = udhr_run_config(train__allow_fresh_start=True)  # the reference's step: compiled
    run(cfg, tmp_path / "fresh", devices)  # an empty workdir is no reason to stop


def test_checkpoint_of_another_model_names_the_parameter_and_both_shapes(
    reference_run, udhr_run_config, tmp_path
):
    """Not taken for damage (no fall back to an older step of the same wrong model). The
    config check refuses the change first; accepted, the checkpoint is still checked."""
    shutil.copytree(reference_run, tmp_path / "run")
    cfg = udhr_run_config(model__mlp_dim=48)
    with pytest.raises(ConfigError, match="model.mlp_dim 64 → 48"):
        run(cfg, tmp_path / "run", jax.devices()[:1])
    cfg = udhr_run_config(model__mlp_dim=48, train__resume_with_changes=True)
    with pytest.raises(
        CheckpointMismatchError,
        match=r"checkpoints/8 is of another model: params/encoder/layers/mlp/wi/bias has "
        r"shape \(2, 64\) there but \(2, 48\) in this config",
    ):
        run(cfg, tmp_path / "run", jax.devices()[:1])
    assert (tmp_path / "run" / "checkpoints" / "8").is_dir()


def test_nan_loss_halts_without_corrupting_the_state(udhr_run_config, tmp_path, monkeypatch):
    from xlpretrain import objectives

    real = objectives.REGISTRY["mmlm"]

    def poisoned(context):
        loss_fn = real.loss(context)

        def nan_loss(params, batch, rng, model):
            loss, metrics = loss_fn(params, batch, rng, model)
            return loss * np.nan, metrics

        return nan_loss

    monkeypatch.setitem(objectives.REGISTRY, "mmlm", dataclasses.replace(real, loss=poisoned))
    cfg = udhr_run_config(
        train__log_every=5,
        train__checkpoint_every=3,
        train__max_bad_steps=3,
    )
    trainer = trainer_lib.build(resolve(cfg), str(tmp_path), jax.devices()[:1])
    with pytest.raises(DivergenceError, match=r"not finite in 3 consecutive steps \(1-3"):
        trainer_lib.run(trainer)
    trainer.checkpointer.close()
    assert not (tmp_path / "checkpoints" / "3").exists()  # the run ended before saving it

    # train.max_bad_steps=0: every update is skipped, counted, and the state stays as it was
    # (stopped at 4 of the first run's 8 steps: its step, compiled, is in the cache)
    cfg = udhr_run_config(train__log_every=2, train__stop_at=4, train__max_bad_steps=0)
    trainer = trainer_lib.build(resolve(cfg), str(tmp_path / "going_on"), jax.devices()[:1])
    initial = jax.device_get(trainer.training.state.params)
    state = trainer_lib.run(trainer)
    trainer.checkpointer.close()
    assert [r["skipped_steps"] for r in read_metrics(tmp_path / "going_on")] == [2, 4]
    jax.tree.map(np.testing.assert_array_equal, initial, jax.device_get(state.params))


def test_unknown_objective_weight_key_and_language_mismatch(udhr, udhr_run_config, tmp_path):
    cfg = udhr_run_config(train__steps=1, objectives__tlm=0.0)
    cfg.data.mono_dir = str(udhr / "mono")
    run(cfg, tmp_path, jax.devices()[:1])
    small = tmp_path.parent / (tmp_path.name + "_mono")
    small.mkdir()
    (small / "xx.txt").write_text("one line\n")
    cfg.data.mono_dir = str(small)
    cfg.train.resume_with_changes = True  # past the config check: the languages are checked
    with pytest.raises(ValueError, match="languages differ"):
        trainer_lib.build(resolve(cfg), str(tmp_path), jax.devices()[:1])


def test_ernie_m_stages_switch_objectives(udhr_run_config, tmp_path, caplog):
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "configs"))
    import ernie_m

    cfg = ernie_m.get_config("tiny")
    small = udhr_run_config(train__steps=6, train__log_every=1)
    for section in ("data", "tokenizer", "train"):
        cfg[section] = small[section]
    cfg.model.vocab_size, cfg.model.hidden_size, cfg.model.mlp_dim = 1002, 32, 64
    with caplog.at_level("INFO", logger="xlpretrain"):
        run(cfg, tmp_path, jax.devices()[:1])
    records = read_metrics(tmp_path)
    assert [r["stage"] for r in records] == [0, 0, 1, 1, 1, 1]  # stage 2 from step 3 = 0.5 · 6
    announced = [m for m in caplog.messages if "`loss` sums these" in m]
    assert announced == [
        "step 1: stage 1/2: mmlm 1, tlm 1, camlm 1; `loss` sums these",
        "step 3: stage 2/2: mmlm 1, tlm 1, camlm 1, btmlm 1; new: btmlm; `loss` sums these; "
        "rows × tokens: mmlm 8 × 32 (was 16 × 32): new shapes, its step compiles",
    ]
    for r in records:
        assert {"loss/mmlm", "loss/tlm", "loss/camlm"} <= set(r)
        assert ("loss/btmlm" in r) == (r["stage"] == 1)
        assert ("pseudo_distinct_ratio/btmlm" in r) == (r["stage"] == 1)


@pytest.mark.parametrize("variant", ["acl", "iclr"])
def test_veco_trains_both_streams_and_tlm(udhr_run_config, tmp_path, variant):
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "configs"))
    import veco

    cfg = veco.get_config("tiny")
    small = udhr_run_config(train__steps=6, train__log_every=1)
    for section in ("tokenizer", "train"):
        cfg[section] = small[section]
    cfg.data.mono_dir, cfg.data.parallel_dir = small.data.mono_dir, small.data.parallel_dir
    cfg.data.max_length, cfg.data.batch_size = 32, 4
    cfg.data.per_objective.veco_mono.max_length = 48
    cfg.data.per_objective.veco_mono.batch_size = 2
    cfg.model.vocab_size, cfg.model.hidden_size, cfg.model.mlp_dim = 1002, 32, 64
    cfg.veco.variant = variant
    run(cfg, tmp_path, jax.devices()[:2])
    records = read_metrics(tmp_path)
    assert [r["stage"] for r in records] == [0] + [1] * 5  # phase 2 from step round(0.25 · 6)
    for key in (
        "loss/veco_self",
        "loss/veco_cross",
        "loss/veco_mono_self",
        "loss/veco_mono_cross",
        "loss/tlm",
    ):
        assert all(np.isfinite(r[key]) for r in records), key


def test_xlm_e_trains_generator_and_discriminator(udhr_run_config, tmp_path):
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "configs"))
    import xlm_e

    cfg = xlm_e.get_config("tiny")
    small = udhr_run_config(train__steps=3, train__log_every=1)
    for section in ("data", "tokenizer", "train"):
        cfg[section] = small[section]
    cfg.model.vocab_size, cfg.model.hidden_size, cfg.model.mlp_dim = 1002, 32, 64
    run(cfg, tmp_path, jax.devices()[:2])
    records = read_metrics(tmp_path)
    for key in (
        "loss/gen_mlm",
        "loss/gen_tlm",
        "loss/mrtd",
        "loss/trtd",
        "accuracy/mrtd",
        "accuracy/trtd_replaced",
        "accuracy/mrtd_original",
        "replaced_rate/trtd",
    ):
        assert all(np.isfinite(r[key]) for r in records), key
    first = records[0]
    expected = (
        first["loss/gen_mlm"]
        + first["loss/gen_tlm"]
        + 50 * (first["loss/mrtd"] + first["loss/trtd"])
    )
    np.testing.assert_allclose(first["loss"], expected, rtol=1e-5)  # L_G + λ·L_D per task


def test_warm_start_from_a_converted_checkpoint(
    udhr_tokenizer_path, udhr_run_config, tmp_path, caplog
):
    import flax.linen as nn

    from xlpretrain.convert import folder
    from xlpretrain.model import init_params
    from xlpretrain.training import warm_start
    from xlpretrain.training.warm_start import WarmStartError

    cfg = udhr_run_config(train__steps=1)
    config = resolve(cfg).model
    pretrained = jax.device_get(nn.unbox(init_params(config, jax.random.key(7))))
    tokenizer = Tokenizer.load(udhr_tokenizer_path)
    folder.write(folder.Pretrained(config, pretrained, tokenizer), tmp_path / "xlmr")
    cfg.init.checkpoint = str(tmp_path / "xlmr")
    cfg.tokenizer.path = ""  # the checkpoint's tokenizer comes with it
    cfg.model.language_embeddings = True  # a parameter XLM-R does not have
    with caplog.at_level("INFO", logger="xlpretrain"):
        trainer = trainer_lib.build(resolve(cfg), str(tmp_path / "run"), jax.devices()[:1])
    trainer.checkpointer.close()
    params = jax.device_get(trainer.training.state.params)
    np.testing.assert_array_equal(
        params["encoder"]["layers"]["mlp"]["wi"]["kernel"],
        pretrained["encoder"]["layers"]["mlp"]["wi"]["kernel"],
    )
    assert "language_embeddings" in params["embeddings"]
    assert "freshly initialised: embeddings/language_embeddings/embedding" in caplog.text
    assert (tmp_path / "run" / "tokenizer.model").read_bytes() == (
        tmp_path / "xlmr" / "tokenizer.model"
    ).read_bytes()

    cfg.model.language_embeddings = False
    cfg.model.vocab_size = 2002  # the checkpoint's tokenizer has 1002 ids
    with pytest.raises(ConfigError, match="model.vocab_size"):
        trainer_lib.build(resolve(cfg), str(tmp_path / "other"), jax.devices()[:1])
    bigger = resolve(cfg).model
    with pytest.raises(WarmStartError, match="vocabulary of 1002 ids"):
        warm_start.check_model(bigger, config, "xlmr")
    cfg.init.checkpoint = str(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="init.checkpoint"):
        trainer_lib.build(resolve(cfg), str(tmp_path / "third"), jax.devices()[:1])


def test_first_update_after_unfreezing_is_a_fresh_adam_step():
    """VECO's stages: some parameters alone for a long while, then everything. Adam's count is
    shared, so without a restart a newly trainable weight's first update is bias-corrected as
    if its moments were old: (1 - b1) / sqrt(1 - b2) ≈ 3 times a fresh step for b2 = 0.999.
    With `restart_moments` it is exactly a fresh run's first update."""
    import optax

    from xlpretrain.training.optim import adamw_from, restart_moments

    cfg = default_config()
    cfg.train.steps, cfg.optim.warmup_steps = 5000, 0
    cfg.optim.b2, cfg.optim.weight_decay, cfg.optim.clip_norm = 0.999, 0.0, 0.0
    params = {"cross": jnp.ones((4,)), "body": jnp.ones((4,))}
    grads = {"cross": jnp.full((4,), 0.3), "body": jnp.full((4,), -0.2)}
    first, joint = adamw_from(resolve(cfg).optim, "cross"), adamw_from(resolve(cfg).optim, "")

    @jax.jit
    def phase_one(state):
        return jax.lax.fori_loop(0, 1000, lambda _, s: first.update(grads, s, params)[1], state)

    old = phase_one(first.init(params))
    stale, _ = joint.update(grads, old, params)
    restarted, _ = joint.update(grads, restart_moments(old), params)
    fresh, _ = adamw_from(resolve(cfg).optim, "").update(grads, joint.init(params), params)
    rate = optax.tree.norm(fresh["body"]) / 2  # |update| = lr per element, 4 elements
    np.testing.assert_allclose(restarted["body"], fresh["body"] * _lr_ratio(cfg, 1000), rtol=1e-5)
    assert np.abs(restarted["body"]).max() <= rate * (1 + 1e-5)
    assert np.abs(stale["body"]).max() > 2 * np.abs(restarted["body"]).max()  # the bug


def _lr_ratio(cfg, step: int) -> float:

    schedule = resolve(cfg).optim.learning_rates()
    return float(schedule(step) / schedule(0))


def test_training_restarts_adam_where_a_stage_unfreezes_parameters(udhr_run_config, tmp_path):
    """The loop applies the restart once, at the first step of a stage whose `trainable`
    differs, and keeps the learning-rate schedule's count (no second warm-up)."""
    import optax

    cfg = udhr_run_config(train__stop_at=4)
    cfg.objectives = {}
    cfg.schedule = (
        {"start_step": 0, "objectives": {"mmlm": 1.0}, "trainable": "lm_head"},
        {"start_step": 3, "objectives": {"mmlm": 1.0}, "trainable": ""},
    )
    trainer = trainer_lib.build(resolve(cfg), str(tmp_path), jax.devices()[:1])
    try:
        state = trainer_lib.run(trainer)
    finally:
        trainer.checkpointer.close()

    def counts(kind):
        nodes = jax.tree.leaves(state.opt_state, is_leaf=lambda n: isinstance(n, kind))
        return [int(n.count) for n in nodes if isinstance(n, kind)]

    assert counts(optax.ScaleByAdamState) == [2]  # restarted before step 3, then steps 3-4
    assert counts(optax.ScaleByScheduleState) == [4]
