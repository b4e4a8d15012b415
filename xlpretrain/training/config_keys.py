"""Checking a config's keys against its defaults: every program that reads a config (pre-training,
fine-tuning) refuses an unknown key, a value of the wrong type or one out of range the same
way, naming the key and the nearest valid names."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import ml_collections

from xlpretrain.core.errors import ConfigError, check
from xlpretrain.core.settings import Ranges


def positive(v: Any) -> bool:
    return v > 0


def non_negative(v: Any) -> bool:
    return v >= 0


def probability(v: Any) -> bool:
    return 0.0 <= v <= 1.0


def one_of(*choices: str) -> Callable[[Any], bool]:
    return lambda v: v in choices


def _leaves(cfg: ml_collections.ConfigDict, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in cfg.items():
        path = f"{prefix}{key}"
        if isinstance(value, ml_collections.ConfigDict):
            yield from _leaves(value, path + ".")
        else:
            yield path, value


def type_ok(value: Any, default: Any) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, (tuple, list)):
        return isinstance(value, (tuple, list))
    return isinstance(value, type(default))


def unknown_key(config: ml_collections.ConfigDict, path: str) -> str | None:
    """Why `path` names no key of `config`, with the closest keys there, or None if it does:
    `config key 'optim.learnin_rate': unknown key; did you mean 'optim.learning_rate'?`"""
    node, walked = config, []
    for part in path.split("."):
        if isinstance(node, ml_collections.ConfigDict) and part in node:
            node, walked = node[part], [*walked, part]
            continue
        where = ".".join(walked)
        if not isinstance(node, ml_collections.ConfigDict):
            return f"config key '{where}' is a value, it has no key '{part}'"
        prefix = f"{where}." if where else ""
        close = difflib.get_close_matches(part, list(node.keys()), n=3, cutoff=0.6)
        if close:
            return (
                f"config key '{prefix}{part}': unknown key; did you mean "
                + " or ".join(f"'{prefix}{c}'" for c in close)
                + "?"
            )
        of = f" of '{where}'" if where else ""
        return f"config key '{prefix}{part}': unknown key; known keys{of}: {', '.join(node)}"
    return None


def check_keys(
    cfg: ml_collections.ConfigDict,
    defaults: ml_collections.ConfigDict,
    ranges: Ranges,
    *,
    own_checks: Mapping[str, Callable[[str, Any], None]] | None = None,
) -> None:
    """Raises `ConfigError` naming the first key of `cfg` that `defaults` lacks, whose value is
    not of its default's type, or that fails its `ranges` predicate. Every program (pre-training,
    fine-tuning) validates through this, so a typo is refused the same way everywhere.

    `own_checks` maps a path prefix ("objectives.", "schedule") to the check of each leaf under
    it, called as `check(path, value)` in place of the above: for free-form keys that no
    default lists.
    """
    own_checks = own_checks or {}
    sections = set(defaults.keys())
    for section in cfg.keys():
        check(section in sections, section, f"unknown section; known: {sorted(sections)}")
    default_leaves = dict(_leaves(defaults))
    for path, value in _leaves(cfg):
        prefix = next((p for p in own_checks if path.startswith(p)), None)
        if prefix is not None:
            own_checks[prefix](path, value)
            continue
        if path not in default_leaves:
            raise ConfigError(unknown_key(defaults, path) or f"config key '{path}': unknown key")
        default = default_leaves[path]
        check(
            type_ok(value, default),
            path,
            f"expected {type(default).__name__}, got {type(value).__name__} ({value!r})",
        )
        if path in ranges:
            predicate, description = ranges[path]
            check(predicate(value), path, f"{description}, got {value!r}")
