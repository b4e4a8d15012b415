"""The README's first command, run as written (600 steps): what its summary claims holds.
tests/test_demo_xlco.py runs the README's second; each in a file of its own, so that the two
longest runs of the suite start first, on different workers (tests/conftest.py)."""

import contextlib
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest

from xlpretrain.training.metrics import read_metrics


def train_as_the_readme_does(
    config: str, workdir: pathlib.Path, cpu: int = 0
) -> subprocess.CompletedProcess:
    """`python -m xlpretrain.train --config CONFIG --workdir WORKDIR` from the repository's
    root, as the README gives it, in a user's environment (one CPU device, XLA's defaults: not
    conftest's `XLA_FLAGS`); it must succeed. Where the OS lets a process choose its cores
    (Linux), it runs on one, the `cpu`-th this process may use, as on a one-core machine: the
    suite keeps every core busy, and XLA's thread pool spread over a core another worker also
    uses costs CPU (the two demos side by side, 200 steps each: 183 and 198 CPU-s spread, 165
    pinned)."""
    repo = pathlib.Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    with one_core(cpu):
        result = subprocess.run(
            [sys.executable, "-m", "xlpretrain.train", "--config", config,
             "--workdir", str(workdir)],
            capture_output=True, text=True, timeout=900, cwd=repo, env=env,
        )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@contextlib.contextmanager
def one_core(cpu: int) -> Iterator[None]:
    """Processes started inside run on the `cpu`-th core (modulo) this thread may use: a child
    inherits the affinity of the thread that starts it. Nothing changes where the OS has no
    `sched_setaffinity` (macOS, Windows)."""
    if not hasattr(os, "sched_setaffinity"):
        yield
        return
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {allowed[cpu % len(allowed)]})
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


# The demo corpus's pairs whose other language is not written in Latin script.
ACROSS_SCRIPTS = {
    "ar", "bn", "el", "fa", "he", "hi", "ja", "ka", "ko", "lo", "mk", "ru", "sr", "ta", "th",
    "yue", "zh",
}  # fmt: skip


def retrieval_by_script(held_out: str, last: dict) -> dict[str, tuple[float, float]]:
    """The summary's retrieval@1 across scripts and within Latin script: `{key: (figure, step
    0)}`, each checked against metrics.jsonl, where it is the mean over the demo's 17 pair
    files whose other language is not in Latin script, or over the 22 others."""
    figures = {}
    for label, key in (("across scripts", "across_scripts"), ("within Latin", "within_latin")):
        value, start, chance = map(float, re.search(
            rf"{label} ([\d.]+) \(step 0 ([\d.]+), chance ([\d.]+)\)", held_out
        ).groups())  # fmt: skip
        across = key == "across_scripts"
        others = [k.removeprefix("eval/retrieval/en-") for k in last if "/en-" in k]
        pairs = [last[f"eval/retrieval/en-{o}"] for o in others if (o in ACROSS_SCRIPTS) == across]
        assert len(pairs) == (17 if across else 22)
        assert last[f"eval/retrieval/{key}"] == pytest.approx(np.mean(pairs))
        assert value == pytest.approx(last[f"eval/retrieval/{key}"], abs=1e-3)
        assert 0 < chance < 0.02 and 0 <= start <= 1
        figures[key] = value, start
    return figures


def test_the_demo_learns_what_a_unigram_model_cannot(tmp_path):
    """The README's first command, as written: it trains, evaluates on the demo corpus's
    held-out tenth, and its held-out masked-token accuracy and loss beat a model that ignores
    context (the training text's unigram model)."""
    result = train_as_the_readme_does("configs/demo.py", tmp_path)
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == list(range(50, 601, 50))
    for key in ("loss", "loss/mmlm", "loss/tlm", "accuracy/mmlm", "count/tlm", "learning_rate",
                "tokens_per_s", "grad_norm"):  # fmt: skip
        assert key in records[0], key
    assert [r["step"] for r in records if "eval/accuracy/mmlm" in r] == [300, 600]
    assert records[-1]["loss"] < records[0]["loss"] - 2.0
    assert (tmp_path / "tokenizer.model").exists() and (tmp_path / "tb").is_dir()
    assert (tmp_path / "checkpoints" / "600").is_dir()
    # The console: accuracy, learning rate and gradient norm on every line, a summary at the
    # end, and none of JAX's start-up chatter about a TPU nobody asked for.
    console = result.stdout
    assert "step 600/600 | loss " in console and "| acc mmlm " in console and "| lr " in console
    assert "| grad " in console and "Unable to initialize backend" not in console
    assert "finished steps 1-600 of 600 in " in console and "final loss " in console
    assert f"checkpoint: {tmp_path / 'checkpoints' / '600'}" in console
    assert f"next: python -m xlpretrain.convert to-hf {tmp_path} " in console
    # What it learned: the summary's held-out figures, each beside what needs no learning.
    held_out = re.search(r"held-out at step 600: (.*)", console).group(1)
    for name in ("mmlm", "tlm"):
        loss, unigram_loss, accuracy, unigram_accuracy = map(float, re.search(
            rf"{name} loss ([\d.]+) \(unigram ([\d.]+)\) accuracy ([\d.]+) \(unigram ([\d.]+)\)",
            held_out,
        ).groups())  # fmt: skip
        assert accuracy > unigram_accuracy + 0.04 and loss < unigram_loss - 1.0, held_out
        assert accuracy == pytest.approx(records[-1][f"eval/accuracy/{name}"], abs=1e-3)
    # Retrieval is shown beside the parameters the run started from and chance, not claimed as
    # learned: identical strings embed identically before any training.
    retrieval, start, chance = map(float, re.search(
        r"retrieval@1 ([\d.]+) \(step 0 ([\d.]+), chance ([\d.]+)\)", held_out
    ).groups())  # fmt: skip
    assert retrieval == pytest.approx(records[-1]["eval/retrieval"], abs=1e-3)
    assert 0 < chance < 0.02 and 0 <= start <= 1
    # Token-level objectives do not align languages: across scripts it stays near chance.
    across, _ = retrieval_by_script(held_out, records[-1])["across_scripts"]
    assert across < 0.1, held_out
    # The picture of the run, named in the summary.
    assert f"curves: {tmp_path / 'curves.png'}" in console
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
