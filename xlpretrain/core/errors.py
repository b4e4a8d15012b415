"""Errors every layer may raise, defined below all of them."""

from __future__ import annotations

import importlib
from types import ModuleType

# How to install each optional package: its packages, named by the extra that brings them (a
# clone installs an extra with `pip install -e ".[EXTRA]"`). torch is in no extra: `pip install
# torch` pulls the CUDA build (gigabytes) even on a machine without a GPU.
INSTALL = {
    "safetensors": "pip install safetensors transformers (the hf extra)",
    "transformers": "pip install safetensors transformers (the hf extra)",
    "torch": "pip install torch --index-url https://download.pytorch.org/whl/cpu (the CPU "
    "build; plain pip install torch for CUDA)",
    "tensorflow_datasets": "pip install tensorflow-datasets array-record importlib-resources "
    "(the tfds extra)",
    "apache_beam": "pip install apache-beam (the beam extra)",
    "wandb": "pip install wandb (the wandb extra)",
    "pyarrow": "pip install pyarrow",
    "seqeval": "pip install seqeval (the xtreme extra)",
}


class ConfigError(ValueError):
    """A configuration value is unknown, mistyped or out of range."""


def check(cond: bool, key: str, message: str) -> None:
    """Raises `ConfigError` naming config key `key` with `message` unless `cond`."""
    if not cond:
        raise ConfigError(f"config key '{key}': {message}")


class MissingExtra(ImportError):
    """An optional package a feature needs is not installed; the message says how to get it."""


def require(module: str, why: str) -> ModuleType:
    """`import module`, or `MissingExtra`: "WHY needs PACKAGE, which is not installed: HOW" (the
    features that need an optional package import it through here, so all say it alike)."""
    package = module.partition(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name not in (package, module):  # installed, but something it imports is not
            raise
        raise MissingExtra(
            f"{why} needs {package}, which is not installed: {INSTALL[package]}"
        ) from None
