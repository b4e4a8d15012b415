"""A model family is a backbone declaration (`xlpretrain.backbones`): no other module compares
or dispatches on a family's name, the model code reads the layer features a declaration gives,
and records carry those features so a model is rebuilt without the registry."""

import ast
import dataclasses
import json
import pathlib

import jax
import numpy as np
import pytest

from xlpretrain import backbones
from xlpretrain.backbones.settings import SHARED, ModelSettings
from xlpretrain.convert import folder
from xlpretrain.core.errors import ConfigError
from xlpretrain.model.config import LAYER_FEATURES, ModelConfig, recorded_features
from xlpretrain.training.config import check_config, default_config

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "xlpretrain"


def _is_architecture(node: ast.AST) -> bool:
    """`x.architecture` or `x["architecture"]`: a family's name read from a config."""
    if isinstance(node, ast.Attribute):
        return node.attr == "architecture"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "architecture"
    return False


def _names_a_family(node: ast.AST) -> bool:
    """A family's name as a constant, alone or in a tuple, list or set."""
    if isinstance(node, ast.Constant):
        return node.value in backbones.NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_a_family(e) for e in node.elts)
    return False


def family_dispatch(source: str) -> list[int]:
    """Lines that compare a family's name (`architecture == "modernbert"`, `name in ("xlmr",
    …)`) or look something up by it (`TABLE[config.architecture]`). Comparing two models'
    families with each other (same family or not) is no dispatch."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            read = [_is_architecture(o) for o in operands]
            if (any(read) and not all(read)) or any(_names_a_family(o) for o in operands):
                lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and _is_architecture(node.slice):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_no_module_but_the_declarations_dispatches_on_a_family_name():
    found = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if "backbones" not in path.relative_to(PACKAGE).parts
        and (lines := family_dispatch(path.read_text(encoding="utf-8")))
    }
    assert not found, f"a family's name is compared outside xlpretrain/backbones: {found}"


@pytest.mark.parametrize(
    "line",
    [
        'if config.architecture == "modernbert": pass',
        'ffn = 2 if cfg["architecture"] in ("xlmr",) else 3',
        "settings = FUNCTION_SETTINGS[checkpoint.architecture]",
        'if family == "xlmr": pass',
    ],
)
def test_the_scan_finds_each_kind_of_dispatch(line):
    assert family_dispatch(line) == [1]
    assert family_dispatch("same = run.architecture == checkpoint.architecture") == []


def test_every_family_declares_its_layers_and_builds_its_config():
    for name, backbone in backbones.REGISTRY.items():
        assert backbone.name == name and set(backbone.features) == set(LAYER_FEATURES)
        config = backbone.config(absolute_positions=backbone.features["layer_type"] != "pre_ln")
        assert config.architecture == name
        assert {f: getattr(config, f) for f in LAYER_FEATURES} == dict(backbone.features)
    with pytest.raises(ValueError, match="unknown model.architecture 'gpt'; known: xlmr, mod"):
        backbones.get("gpt")


def test_records_without_layer_features_are_read_as_they_were_written(tmp_path):
    """A model.json (or a workdir's model_family.json) written before layer features were
    recorded rebuilds the same model: post-LN unless it had no learned or relative positions."""
    modern = backbones.get("modernbert").config(
        absolute_positions=False, vocab_size=40, hidden_size=16, num_layers=2, num_heads=2,
        mlp_dim=24, max_positions=32,
    )  # fmt: skip
    xlmr = ModelConfig(vocab_size=40, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=24)
    for config in (modern, xlmr):
        record = {k: v for k, v in dataclasses.asdict(config).items() if k not in LAYER_FEATURES}
        assert recorded_features(record) == {f: getattr(config, f) for f in LAYER_FEATURES}
    zeros = jax.tree.map(lambda x: np.zeros(x.shape, np.float32), folder.abstract_params(modern))
    folder.write(folder.Pretrained(modern, zeros, None, ()), tmp_path / "ckpt")
    model_json = tmp_path / "ckpt" / folder.MODEL_JSON
    written = json.loads(model_json.read_text())
    assert {f: written[f] for f in LAYER_FEATURES} == dict(backbones.get("modernbert").features)
    model_json.write_text(json.dumps({k: v for k, v in written.items() if k not in LAYER_FEATURES}))
    assert folder.read(tmp_path / "ckpt").config == dataclasses.replace(modern, scan_layers=True)


def test_each_declaration_names_a_converter_below_it_that_reads_its_family():
    """A declaration names its converter module (imported only when it converts, so the layer
    test cannot see the import): it must sit below the declarations and read the family's
    name, layers and model types from the declaration's own `Family`."""
    from tests.test_layering import rank

    for backbone in backbones.REGISTRY.values():
        converter = backbone.converter_module()
        module = backbone.converter.removeprefix("xlpretrain.")
        assert rank(module) < rank("backbones.declaration"), module
        assert any(value is backbone.family for value in vars(converter).values()), module


def test_the_peer_leaves_out_options_no_hugging_face_class_has():
    """`bench --peer` on VECO's or XLM-E's model times the plain HF model of its shape."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    config = backbones.get("xlmr").config(
        vocab_size=40, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=24,
        relative_position="gated", cross_attention=True, num_languages=3,
    )  # fmt: skip
    with torch.device("meta"):
        peer = backbones.of(config).hf_peer(config)
    assert type(peer).__name__ == "XLMRobertaForMaskedLM"
    assert (peer.config.num_hidden_layers, peer.config.hidden_size) == (2, 16)


def test_a_backbone_builds_its_model_from_typed_settings():
    """The plan hands a backbone the keys every backbone reads and its own section's, typed;
    the backbone builds the `ModelConfig` (`attention` is `attention_impl`; the data sizes the
    language table)."""
    modern = backbones.get("modernbert")
    shared = ModelSettings(vocab_size=50, dtype="bfloat16", remat="dots", attention="cudnn")
    config = modern.model_config(
        dataclasses.replace(shared, absolute_positions=False, language_embeddings=True),
        modern.section.values(local_window=64),
    )
    assert (config.vocab_size, config.dtype, config.remat, config.hidden_size) == (
        50, "bfloat16", "dots", 768,
    )  # fmt: skip
    assert (config.attention_impl, config.num_languages, config.local_window) == ("cudnn", 0, 64)
    assert {f: getattr(config, f) for f in LAYER_FEATURES} == dict(modern.features)


def test_the_configs_model_keys_are_the_declared_settings():
    """`model.*` is the backbone's name, the keys every backbone reads (`SHARED`) and each
    backbone's own section, with their defaults; each section's ranges check its keys, and a
    section's keys become `ModelConfig` fields."""
    model = default_config().model
    declared = {"architecture", *SHARED.defaults}
    for section in backbones.sections():
        assert section.name == "model" and not declared & set(section.defaults), section
        declared |= set(section.defaults)
        assert {k: model[k] for k in section.defaults} == section.defaults
        assert set(section.defaults) <= {f.name for f in dataclasses.fields(ModelConfig)}
    assert set(model) == declared
    assert [b.section for b in backbones.REGISTRY.values()].count(
        backbones.get("xlmr").section
    ) == 2
    for key, value in [("local_window", 3), ("num_buckets", 3), ("flash_tiles", "x")]:
        cfg = default_config()
        cfg.model[key] = value
        with pytest.raises(ConfigError, match=rf"'model\.{key}': must be"):
            check_config(cfg)
