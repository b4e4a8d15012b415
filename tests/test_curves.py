"""`WORKDIR/curves.png`: the training loss per objective and the held-out figures beside their
references, drawn from the whole `metrics.jsonl` when a run ends, however it ends."""

import logging
import struct

import jax

from tests.tiny import STEPS, udhr_subset
from xlpretrain.training import curves as curves_lib
from xlpretrain.training import trainer as trainer_lib
from xlpretrain.training.curves import curves_figure
from xlpretrain.training.plan import resolve

PNG = b"\x89PNG\r\n\x1a\n"


def records() -> list[dict]:
    """Logged steps 1-4 of mmlm + xlco, evaluated at steps 2 and 4."""
    logged = []
    for step in range(1, 5):
        record = {"step": step, "loss": 9.0 - step, "loss/mmlm": 6.0 - step, "loss/xlco": 3.0}
        record["accuracy/mmlm"] = 0.1 * step  # training accuracy: not drawn
        if step % 2 == 0:
            record.update({
                "eval/loss/mmlm": 5.0, "eval/accuracy/mmlm": 0.2, "eval/loss/xlco": 1.0,
                "eval/accuracy/xlco": 0.6, "eval/retrieval": 0.4,
                "eval/retrieval/across_scripts": 0.1, "eval/retrieval/within_latin": 0.7,
                "eval/retrieval/en-de": 0.8, "eval/retrieval/en-ru": 0.1,
            })  # fmt: skip
        logged.append(record)
    return logged


BASELINES = {
    "eval/loss/mmlm": {"unigram": 5.9},
    "eval/accuracy/mmlm": {"unigram": 0.1},
    "eval/loss/xlco": {"chance": 2.1},
    "eval/accuracy/xlco": {"chance": 0.125},
    "eval/retrieval": {"step 0": 0.37, "chance": 0.01},
    "eval/retrieval/across_scripts": {"step 0": 0.03, "chance": 0.01},
    "eval/retrieval/within_latin": {"step 0": 0.6, "chance": 0.01},
}


def labels(ax) -> list[str]:
    return [line.get_label() for line in ax.get_lines()]


def test_the_picture_draws_each_objective_and_each_reference():
    figure = curves_figure(records(), BASELINES, title="demo")
    axes = {ax.get_title(): ax for ax in figure.axes}
    assert list(axes) == [
        "training loss", "held-out loss", "held-out accuracy", "held-out retrieval@1",
    ]  # fmt: skip
    training = axes["training loss"]
    assert labels(training) == ["mmlm", "xlco"]  # one line per objective, not the total
    assert list(training.get_lines()[0].get_xdata()) == [1, 2, 3, 4]
    assert labels(axes["held-out loss"]) == ["mmlm", "mmlm: unigram", "xlco", "xlco: chance"]
    assert labels(axes["held-out accuracy"]) == [
        "mmlm", "mmlm: unigram", "xlco", "xlco: chance",
    ]  # fmt: skip
    # The average and each pair group, each with its references; not each pair file.
    assert labels(axes["held-out retrieval@1"]) == [
        "all pairs", "all pairs: step 0", "all pairs: chance",
        "across scripts", "across scripts: step 0", "across scripts: chance",
        "within Latin", "within Latin: step 0", "within Latin: chance",
    ]  # fmt: skip
    across = axes["held-out retrieval@1"].get_lines()[3:5]
    assert list(across[0].get_xdata()) == [2, 4] and list(across[0].get_ydata()) == [0.1, 0.1]
    assert list(across[1].get_ydata()) == [0.03, 0.03]  # the step-0 reference, level
    for ax in figure.axes:  # legible: every panel says what it shows
        assert ax.get_ylabel() and ax.get_legend() is not None
    assert figure.axes[-1].get_xlabel() == "step"
    # A run without evaluation: the training loss alone.
    plain = [{k: v for k, v in r.items() if not k.startswith("eval/")} for r in records()]
    assert [ax.get_title() for ax in curves_figure(plain, {}).axes] == ["training loss"]


def test_a_stopped_then_resumed_run_draws_every_step(
    udhr, udhr_run_config, tmp_path, caplog, monkeypatch
):
    """`train.stop_at` ends the run with the picture, named in the summary; the resumed run's
    picture covers the steps of both (metrics.jsonl read whole)."""
    held_out = udhr_subset(udhr, tmp_path / "held_out", ("007", "008"))
    workdir = tmp_path / "run"
    drawn = []
    real = curves_lib.curves_figure
    monkeypatch.setattr(
        curves_lib,
        "curves_figure",
        lambda logged, *args, **kwargs: (
            drawn.append([r["step"] for r in logged]) or real(logged, *args, **kwargs)
        ),
    )
    for stop_at in (STEPS // 2, STEPS):
        cfg = udhr_run_config(
            train__stop_at=stop_at,
            eval__every_steps=STEPS // 2,
            eval__mono_dir=str(held_out / "mono"),
            eval__parallel_dir=str(held_out / "parallel"),
            eval__batches=1,
            eval__retrieval_lines=8,
        )
        trainer = trainer_lib.build(resolve(cfg), str(workdir), jax.devices()[:1])
        caplog.clear()
        try:
            with caplog.at_level(logging.INFO, logger="xlpretrain"):
                trainer_lib.run(trainer)
        finally:
            trainer.checkpointer.close()
        png = workdir / "curves.png"
        assert f"curves: {png}" in caplog.messages
        data = png.read_bytes()  # a PNG of four panels of 10 × 3 inches at 100 dpi
        assert data.startswith(PNG) and data[12:16] == b"IHDR" and len(data) > 20_000
        assert struct.unpack(">II", data[16:24]) == (1000, 1300)
    assert drawn == [list(range(1, STEPS // 2 + 1)), list(range(1, STEPS + 1))]
