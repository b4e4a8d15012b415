"""Fault injection end to end: a corpus with every kind of broken line, and files with no usable
line, trains; the log counts what was skipped, per file; strict mode stops at the first bad line."""

import json
import logging
import pathlib
import random
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests.tiny import run_config
from xlpretrain.training import trainer as trainer_lib
from xlpretrain.training.metrics import read_metrics
from xlpretrain.training.plan import resolve

REPO = pathlib.Path(__file__).resolve().parents[1]
MAX_LINE_BYTES = 300
WORDS = {
    "en": "the cat sees a small house near green water and runs home".split(),
    "de": "die Katze sieht ein kleines Haus am grünen Wasser und läuft heim".split(),
    "fr": "le chat voit une petite maison près de l'eau verte et rentre".split(),
}


def sentences(lang: str, count: int) -> list[bytes]:
    rng = random.Random(lang)
    return [" ".join(rng.choices(WORDS[lang], k=rng.randint(4, 12))).encode() for _ in range(count)]


def with_bad_lines(good: list[bytes], bad: dict[int, bytes]) -> list[bytes]:
    """`good` with each `bad[n]` at 1-based line number n."""
    lines = list(good)
    for number in sorted(bad):
        lines.insert(number - 1, bad[number])
    return lines


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> pathlib.Path:
    """Three languages, mono and parallel, broken in every way the sources count."""
    root = tmp_path_factory.mktemp("bad_corpus")
    mono, parallel = root / "mono", root / "parallel"
    mono.mkdir()
    parallel.mkdir()
    en, de, fr = (sentences(lang, 40) for lang in ("en", "de", "fr"))
    en_lines = with_bad_lines(
        en,
        {10: b"", 20: b" \t \xe3\x80\x80", 30: b"bad \xff byte", 40: b"x" * (MAX_LINE_BYTES + 1)},
    )
    (mono / "en.txt").write_bytes(b"\r\n".join(en_lines) + b"\r\n")  # CRLF: not a problem
    (mono / "de.txt").write_bytes(b"\n".join(de) + b"\ncut \xc3")  # no final newline either
    (mono / "fr.txt").write_bytes(b"\n".join(fr) + b"\n")
    (mono / "zz.txt").write_bytes(b"")
    pairs = [a + b"\t" + b for a, b in zip(en, de, strict=True)]
    broken = {5: b"one field", 6: b"a\tb\tc", 7: b"blank\t ", 8: b"", 9: b"\xff\tx"}
    (parallel / "en-de.tsv").write_bytes(b"\n".join(with_bad_lines(pairs, broken)) + b"\n")
    pairs = [a + b"\t" + b for a, b in zip(en, fr, strict=True)]
    (parallel / "en-fr.tsv").write_bytes(b"\n".join(pairs) + b"\n")
    (parallel / "en-zz.tsv").write_bytes(b"no tab\n\nno tab either\n")
    return root


def tiny_config(corpus: pathlib.Path):
    """Two steps on `corpus`, whose reads (the tokenizer's training too: no tokenizer given)
    go through the sources; a 1-layer model 16 wide without dropout: fewer ops to compile."""
    return run_config(
        corpus,
        train__steps=2,
        data__max_line_bytes=MAX_LINE_BYTES,
        data__batch_size=4,
        model__vocab_size=64,
        model__hidden_size=16,
        model__num_layers=1,
        model__num_heads=2,
        model__mlp_dim=32,
        model__dropout_rate=0.0,
        model__attention_dropout_rate=0.0,
        objectives={"mmlm": 1.0, "tlm": 1.0},
    )


def test_broken_corpus_trains_and_the_log_counts_skipped_lines_per_file(corpus, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="xlpretrain")
    trainer = trainer_lib.build(resolve(tiny_config(corpus)), str(tmp_path), jax.devices()[:1])
    try:
        trainer_lib.run(trainer)
    finally:
        trainer.checkpointer.close()

    metrics = read_metrics(tmp_path)
    assert [r["step"] for r in metrics] == [1, 2]
    assert all(np.isfinite(r["loss"]) for r in metrics)
    # The files with no usable line are left out, so "zz" is no language of the run.
    assert json.loads((tmp_path / "languages.json").read_text()) == ["de", "en", "fr"]

    mono, parallel = corpus / "mono", corpus / "parallel"
    assert [m for m in caplog.messages if m.startswith("mono data: ")] == [
        f"mono data: {mono / 'de.txt'}: skipped 1 of 41 lines: 1 invalid UTF-8 (line 41)",
        f"mono data: {mono / 'en.txt'}: skipped 4 of 44 lines: 1 too long (line 40), "
        "1 invalid UTF-8 (line 30), 2 empty (lines 10, 20)",
        f"mono data: {mono / 'zz.txt'}: no usable lines, file left out (the file is empty)",
        "mono data: 4 files: 120 of 125 lines used; skipped 1 too long, 2 invalid UTF-8, "
        "2 empty; 1 file with no usable lines left out",
    ]
    assert [m for m in caplog.messages if m.startswith("parallel data: ")] == [
        f"parallel data: {parallel / 'en-de.tsv'}: skipped 5 of 45 lines: "
        "1 invalid UTF-8 (line 9), 1 empty (line 8), 3 bad fields (lines 5, 6, 7)",
        f"parallel data: {parallel / 'en-zz.tsv'}: no usable lines, file left out "
        "(1 empty (line 2), 2 bad fields (lines 1, 3))",
        "parallel data: 3 files: 80 of 88 lines used; skipped 1 invalid UTF-8, 2 empty, "
        "5 bad fields; 1 file with no usable lines left out",
    ]


def test_strict_mode_stops_at_the_first_bad_line_naming_file_and_line(corpus, tmp_path):
    command = [
        sys.executable,
        "-m",
        "xlpretrain.train",
        "--config",
        "configs/demo.py",
        "--workdir",
        str(tmp_path),
        f"--config.data.mono_dir={corpus / 'mono'}",
        f"--config.data.parallel_dir={corpus / 'parallel'}",
        "--config.data.strict=True",
        "--config.eval.every_steps=0",  # no held-out folders for this corpus
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 2, result.stdout + result.stderr
    message = f"error: {corpus / 'mono' / 'de.txt'}:41: invalid UTF-8 (strict mode)"
    assert result.stderr.rstrip().endswith(message), result.stderr
    assert list(tmp_path.iterdir()) == []  # the run never started: it left nothing
