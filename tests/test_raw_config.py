"""The raw config stops at the plan: a resolved plan holds its config only as a record
(`training.record.ConfigRecord`: the content of `config.json`, to be written and compared),
never as a mapping of its keys that training, `bench` or `aot` could read a setting from; the
record is what `config.json` holds, and resolving it again gives the same plan (how `bench`
hands a plan to another process, as a plan's objectives hold functions)."""

import dataclasses
import json

import pytest

from tests.test_plan import SHIPPED, shipped_config
from xlpretrain.finetune import schema as finetune_schema
from xlpretrain.finetune.plan import resolve as resolve_finetuning
from xlpretrain.training import config as pretraining
from xlpretrain.training.plan import resolve, resolve_record
from xlpretrain.training.workdir import CONFIG, save_config

DEFAULTS = (pretraining.default_config(), finetune_schema.default_config())
# The sections every task's config has, and each one's keys in either task: a mapping keyed by
# two names of one of these is a raw config or a section of one.
SECTIONS = set(DEFAULTS[0]) & set(DEFAULTS[1])
KEYS = [SECTIONS, *(set(config[section]) for config in DEFAULTS for section in SECTIONS)]
CASES = [("default", "", {}), *SHIPPED]


def config_mappings(value, where: str) -> list[str]:
    """Where in `value` (into tuples, lists and mappings) a mapping keyed by config keys (a
    dict, a `ConfigDict`) is held."""
    if hasattr(value, "keys"):
        own = [where] if any(len(names & set(value.keys())) > 1 for names in KEYS) else []
        return own + [
            found
            for key in value.keys()
            for found in config_mappings(value[key], f"{where}[{key!r}]")
        ]
    if isinstance(value, tuple | list):
        return [
            found
            for i, item in enumerate(value)
            for found in config_mappings(item, f"{where}[{i}]")
        ]
    return []


def raw_config_fields(plan) -> list[str]:
    """The fields of `plan` typed with `Any` values or holding a mapping of config keys."""
    found = []
    for field in dataclasses.fields(plan):
        if "Any" in str(field.type):
            found.append(f"{field.name}: {field.type}")
        found += config_mappings(getattr(plan, field.name), field.name)
    return found


def config(file: str, arg: str, data: dict):
    return pretraining.default_config() if file == "default" else shipped_config(file, arg, data)


def finetuning_config():
    cfg = finetune_schema.default_config()
    cfg.init.path, cfg.data.dir = "runs/pretrained", "data/xtreme"
    return cfg


@pytest.mark.parametrize("file, arg, data", CASES, ids=[f"{f}:{a}" for f, a, _ in CASES])
def test_a_plan_holds_no_mapping_of_config_keys(file, arg, data):
    plan = resolve(config(file, arg, data))
    assert not raw_config_fields(plan)
    assert not raw_config_fields(plan.with_vocab_size(1000))  # as a run sizes it


def test_a_finetuning_plan_holds_no_mapping_of_config_keys():
    """The run's plan and a task's (its steps counted on typed values, not a config built
    again)."""
    plan = resolve_finetuning(finetuning_config())
    assert not raw_config_fields(plan)
    assert not raw_config_fields(plan.task_plan("xnli", 1000))


@pytest.mark.parametrize("file, arg, data", CASES, ids=[f"{f}:{a}" for f, a, _ in CASES])
def test_a_recorded_config_resolves_to_the_same_plan(file, arg, data):
    plan = resolve(config(file, arg, data))
    again = resolve_record(plan.record)
    for field in dataclasses.fields(plan):
        assert getattr(again, field.name) == getattr(plan, field.name), field.name


@pytest.mark.parametrize("resolved", ["pretraining", "finetuning"])
def test_config_json_is_the_config_with_its_vocabulary_size(resolved, tmp_path):
    """`config.json` holds the config's keys in its order, JSON values; a run that sizes its
    vocabulary from the tokenizer records that size."""
    if resolved == "pretraining":
        cfg = pretraining.default_config()
        plan = resolve(cfg).with_vocab_size(1234)
        cfg.model.vocab_size = 1234
    else:
        cfg = finetuning_config()
        plan = resolve_finetuning(cfg)
    save_config(str(tmp_path), plan.record, 0)
    written = (tmp_path / CONFIG).read_text()
    assert written == json.dumps(json.loads(cfg.to_json_best_effort()), indent=2)
