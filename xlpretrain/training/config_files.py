"""Config files: `configs/NAME.py[:ARG]` (a path) or a shipped config's `NAME[:ARG]` → the
`ConfigDict` its `get_config([ARG])` returns, with overrides. The command lines' `--config`
(`training.cli`) and the benchmarks that measure a shipped config (`bench.gpu_timings`) load
configs this one way; what a config means is then `plan.resolve`'s.
"""

from __future__ import annotations

import difflib
import importlib.resources
import importlib.util
import os
import re
from collections.abc import Mapping
from typing import Any

import ml_collections

from xlpretrain.core.errors import ConfigError
from xlpretrain.training.config_keys import unknown_key


def shipped_name(spec_path: str) -> bool:
    """Whether `--config` would look `spec_path` up among the shipped configs: a bare name
    (`xlmr`), not a path (`xlmr.py`, `configs/xlmr`)."""
    return re.fullmatch(r"\w+", spec_path) is not None


def shipped_config(name: str) -> str | None:
    """The file of the shipped config `name` (`xlmr`, as in `--config xlmr:tiny`), or None."""
    if not shipped_name(name):
        return None
    path = importlib.resources.files("xlpretrain.configs") / f"{name}.py"
    return str(path) if path.is_file() else None


def shipped_names() -> list[str]:
    """The names of the shipped configs."""
    files = importlib.resources.files("xlpretrain.configs").iterdir()
    return sorted(f.name[:-3] for f in files if f.name.endswith(".py") and f.name[0] != "_")


def config_file(spec: str) -> str:
    """`PATH[:ARG]` or `NAME[:ARG]` (a shipped config) as `PATH[:ARG]`; a spec that is neither
    is an error saying what was looked for and naming the closest file or shipped config."""
    path, colon, arg = spec.partition(":")
    if os.path.isfile(path):
        return spec
    shipped = shipped_config(path)
    if shipped is not None:
        return f"{shipped}{colon}{arg}"
    raise FileNotFoundError(_missing_file(spec))


def _missing_file(spec: str) -> str:
    """`--config SPEC` names no file and no shipped config: the file it looked for (from where
    the command ran, which a relative path depends on), the shipped names, and the nearest of
    either; the config files beside a path that names a folder."""
    path, colon, arg = spec.partition(":")
    folder = os.path.dirname(path)
    name = os.path.basename(path).removesuffix(".py")
    files = []
    if os.path.isdir(folder or "."):
        files = sorted(f for f in os.listdir(folder or ".") if f.endswith(".py") and f[0] != "_")
    shipped = shipped_names()
    near_file = difflib.get_close_matches(os.path.basename(path), files, n=1)
    near_name = difflib.get_close_matches(name, shipped, n=1)
    hint = ""
    if near_file:
        hint = f"; did you mean {os.path.join(folder, near_file[0])}?"
    elif near_name:
        hint = f"; did you mean {near_name[0]}{colon}{arg}?"
    elif folder and files:
        hint = f"; {folder} has {', '.join(files)}"
    looked_up = (
        f" and no shipped config {path!r}"
        if shipped_name(path)
        else ", and shipped configs are named without .py or a folder"
    )
    return (
        f"--config {spec}: no such file ({os.path.abspath(path)}){looked_up} "
        f"(shipped: {', '.join(shipped)}){hint}"
    )


def load_config(spec: str, overrides: Mapping[str, Any] | None = None) -> ml_collections.ConfigDict:
    """`configs/x.py[:ARG]` or a shipped config's `NAME[:ARG]` → its `get_config([ARG])`, as
    `--config` loads it, each dotted key of `overrides` set to its value as
    `--config.KEY=VALUE` would; a key the config lacks is a `ConfigError` naming the nearest."""
    path, _, arg = config_file(spec).partition(":")
    module_spec = importlib.util.spec_from_file_location("_xlpretrain_config", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    cfg = module.get_config(arg) if arg else module.get_config()
    for key, value in (overrides or {}).items():
        if why := unknown_key(cfg, key):
            raise ConfigError(why)
        *sections, name = key.split(".")
        node = cfg
        for section in sections:
            node = node[section]
        node[name] = value
    return cfg
