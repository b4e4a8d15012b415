"""xlpretrain: cross-lingual language-model pre-training in JAX/Flax."""

from setuptools import find_packages, setup

setup(
    name="xlpretrain",
    version="0.1.0",
    description="Cross-lingual encoder pre-training (XLM-R, ERNIE-M, VECO, XLM-E) in JAX/Flax",
    python_requires=">=3.10",
    # The shipped configs (configs/) install as the package xlpretrain.configs, so that
    # `--config xlmr:tiny` works without a clone.
    packages=[*find_packages(include=["xlpretrain", "xlpretrain.*"]), "xlpretrain.configs"],
    package_dir={"xlpretrain.configs": "configs"},
    # The demo corpus ships as a snapshot, the same bytes whatever Babel is installed.
    package_data={"xlpretrain.data.demo_corpus": ["demo_corpus_v2.tar.xz"]},
    install_requires=[
        "jax>=0.4.35",
        "flax>=0.10",
        "optax>=0.2.4",
        "orbax-checkpoint>=0.11",
        "grain>=0.2.10",
        "ml-collections>=1.0",
        "sentencepiece>=0.2",
        "tokenizers>=0.15",  # a Hugging Face tokenizer.json (mmBERT's, ModernBERT's)
        "chex>=0.1.87",
        "absl-py>=2.0",
        "babel>=2.14",  # only to build a demo corpus anew (demo_corpus --from-babel)
        "tensorboardX>=2.6",
        "numpy>=1.26",
        "matplotlib>=3.8",  # python -m xlpretrain.masks --png, WORKDIR/curves.png
        "fonttools>=4.22",  # the Unicode script of held-out text (matplotlib needs it too)
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-xdist>=3.8",  # the suite's files over the cores (pyproject's addopts)
            "ruff>=0.6",
            "tensorflow-datasets>=4.9",
            "array-record>=0.5",
            "importlib-resources",
            # Hugging Face parity tests; this torch has a CPU wheel, other versions pull CUDA.
            "torch==2.13.0",
            "transformers>=4.40",
            "safetensors>=0.4",
            # The docs site is built with --strict and the Colab notebook executed by the tests.
            "mkdocs-material>=9.5",
            "nbclient>=0.10",
            "nbformat>=5.10",
            "ipykernel>=6.29",
            "wandb>=0.17",  # train.wandb_project, tested offline
            "seqeval>=1.2",  # the xtreme extra
            # Not apache-beam (the `beam` extra): it pins protobuf < 7, under which
            # transformers cannot convert our SentencePiece model (tests/test_convert.py);
            # .ci/run gives tests/test_store.py an environment with Beam (XLPRETRAIN_BEAM_PYTHON).
        ],
        "docs": ["mkdocs-material>=9.5"],
        "wandb": ["wandb>=0.17"],  # train.wandb_project
        # python -m xlpretrain.finetune (score and run): PAN-X's and UD-POS's span F1. 1.x, whose
        # chunking evaluate.py's numbers today come from (UD-POS differs under 0.0.x).
        "xtreme": ["seqeval>=1.2"],
        "beam": ["apache-beam>=2.50"],  # python -m xlpretrain.data.prepare --beam
        # python -m xlpretrain.convert: safetensors reads model.safetensors and writes every
        # export; transformers (which runs without torch) reads an export's config and tokenizer.
        # No torch: pip would pull its CUDA build (gigabytes) even on a CPU machine; reading a
        # pytorch_model.bin or loading an export in PyTorch names the CPU wheel (docs/convert.md).
        "hf": ["safetensors>=0.4", "transformers>=4.40"],
        "gpu": ["jax[cuda12]"],
        # Compile for GPUs without one (tests/test_kernels_sm90.py, aot --topology h100:8): XLA:GPU
        # through the CUDA plugin, whose version must equal jax's, and ptxas; no CUDA libraries.
        # cuDNN only for its attention (`model.attention=cudnn`, the census's reference), which
        # jax checks the library for when it traces the call, even for a deviceless compile.
        "gpu-compile": [
            "jax-cuda12-plugin",
            "nvidia-cuda-nvcc-cu12",
            "nvidia-cudnn-cu12>=9.8,<10",
        ],
        "tpu": ["jax[tpu]"],
        # importlib-resources: TFDS imports it but declares it for Python < 3.9 only
        # (tensorflow/datasets#11212); building a dataset fails without it.
        "tfds": ["tensorflow-datasets>=4.9", "array-record>=0.5", "importlib-resources"],
    },
)
