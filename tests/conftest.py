"""Test session set-up: 8 fake CPU devices so sharded and unsharded runs can be compared, cheap
XLA compiles, and the longest test files handed out first."""

import os

from tests.compile_flags import FAST_COMPILE

# Cheap compiles (tests/compile_flags.py): a test's tiny model runs a few steps, so compiling is
# most of its time. Inherited by the commands tests run; the demo runs set a user's environment.
# Deviceless GPU compiles keep XLA's level (`gpu_compile.compile_with_report`).
os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count=8 {FAST_COMPILE}")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import functools  # noqa: E402
import pathlib  # noqa: E402

import pytest  # noqa: E402

# Identical train steps compiled by several tests (resume, sharding) compile once.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", "/tmp/xlpretrain-test-jax-cache")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

REPO = pathlib.Path(__file__).resolve().parents[1]
# pytest-xdist (`--dist loadfile`) hands files to workers in collection order, so a long file
# collected last runs alone at the end while the other workers idle: these, the longest (most
# CPU-seconds on 2 cores), are collected first, longest first.
LONGEST_FIRST = (
    "test_docs.py",
    "test_demo_runs.py",
    "test_demo_xlco.py",
    "test_train.py",
    "test_xtreme_run.py",
    "test_bert.py",
    "test_modern_encoder.py",
    "test_kernels_sm90.py",
    "test_reliability.py",
    "test_task_heads.py",
    "test_finetune.py",
)
UDHR = REPO.parent / "shared" / "data" / "udhr"
# Set by .ci/run: CI has ../shared, so its absence there is a failure, never ~20 silent skips.
REQUIRE_SHARED = "XLPRETRAIN_REQUIRE_SHARED"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`LONGEST_FIRST`'s files first, in its order; the rest keep theirs."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session", autouse=True)
def empty_cache(tmp_path_factory) -> pathlib.Path:
    """Nothing cached before the session hides a change: the demo corpus is unpacked afresh into
    an empty folder of this session's, which every command a test runs inherits."""
    folder = tmp_path_factory.mktemp("xlpretrain_cache") / "demo_corpus"
    os.environ["XLPRETRAIN_CACHE"] = str(folder)
    return folder


@pytest.fixture(scope="session")
def udhr() -> pathlib.Path:
    """The UDHR corpus (528 languages) that CI places beside the clone as ../shared: a user's
    clone without it skips the tests that read it, CI (`XLPRETRAIN_REQUIRE_SHARED=1`) fails."""
    missing = [p for p in (UDHR / "mono", UDHR / "parallel") if not p.is_dir()]
    if missing:
        message = f"UDHR corpus not found: no folder {missing[0]}"
        if os.environ.get(REQUIRE_SHARED) == "1":
            pytest.fail(f"{message} ({REQUIRE_SHARED}=1: CI must have ../shared)")
        pytest.skip(message)
    return UDHR


@pytest.fixture(scope="session")
def udhr_tokenizer_path(udhr, tmp_path_factory) -> pathlib.Path:
    """A small SentencePiece model trained once per session on a UDHR sample."""
    from xlpretrain.data.corpora.folders import MonolingualSource
    from xlpretrain.data.tokenizer import train_tokenizer

    mono = MonolingualSource.from_dir(udhr / "mono")
    texts = {lang: [mono.line(lang, i) for i in range(5)] for lang in mono.languages[:150]}
    path = tmp_path_factory.mktemp("tokenizer") / "udhr.model"
    train_tokenizer(texts, path, 1002, character_coverage=0.99)
    return path


@pytest.fixture(scope="session")
def demo_json_tokenizer_path(tmp_path_factory) -> pathlib.Path:
    """A Hugging Face `tokenizer.json` of 2002 ids (`configs/demo.py`'s vocabulary) trained
    once per session on the demo corpus by `tokenizers`' own trainer, its special tokens at the
    end of the vocabulary as ModernBERT's are (`tests.tiny.train_json_tokenizer`)."""
    from tests.tiny import train_json_tokenizer
    from xlpretrain.data import demo_corpus

    folders = demo_corpus.build_demo_corpus(demo_corpus.default_demo_cache_dir())
    texts = [line for path in sorted(folders.mono.glob("*.txt")) for line in path.open()]
    return train_json_tokenizer(texts, tmp_path_factory.mktemp("tokenizer_json"), 2002)


@pytest.fixture(scope="session")
def tiny_xlmr(demo_json_tokenizer_path, tmp_path_factory) -> pathlib.Path:
    """A randomly initialised 2-layer XLM-R with the demo corpus's tokenizer, as a checkpoint
    folder: what the fine-tuning tests start from, where the plumbing, not transfer, is under
    test (docs/xtreme.md and docs/finetune.md report the demo model's figures)."""
    import flax.linen as nn
    import jax
    import numpy as np

    from xlpretrain.convert import folder
    from xlpretrain.data.tokenizer import Tokenizer
    from xlpretrain.families import XLMR
    from xlpretrain.model import init_params

    config = XLMR.config(vocab_size=2002, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)
    params = jax.tree.map(np.asarray, nn.unbox(init_params(config, jax.random.key(0))))
    path = tmp_path_factory.mktemp("tiny_xlmr") / "model"
    tokenizer = Tokenizer.load(demo_json_tokenizer_path)
    folder.write(folder.Pretrained(config, params, tokenizer), path)
    return path


@pytest.fixture(scope="session")
def udhr_run_config(udhr, udhr_tokenizer_path):
    """`tests.tiny.run_config` on the UDHR corpus and tokenizer: `udhr_run_config(**overrides)`."""
    from tests.tiny import run_config

    return functools.partial(run_config, udhr, udhr_tokenizer_path)
