"""xlpretrain's own model folders: the checkpoint folder format, and reading a training workdir.

A *checkpoint folder* holds one model for inference or export, independent of any run::

    model.json        the ModelConfig fields (JSON object)
    params/           Orbax PyTree checkpoint of the float32 params, layers stacked
                      (the tree ``init_params`` builds with ``scan_layers=True``)
    tokenizer.model   the SentencePiece model (XLM-R id layout), when there is one; or
    tokenizer.json    a Hugging Face tokenizer, with the tokenizer_config.json naming its
                      special tokens (``data.tokenizer.HFTokenizer``)
    languages.json    the codes ``lang_ids`` index, for a model with language embeddings

A *training workdir* (``python -m xlpretrain.train``) is read from its latest checkpoint, or
from the one a path ``WORKDIR/checkpoints/N`` names: only
``state.params`` is restored (not the optimizer state), with the model config rebuilt from
``config.json`` and ``languages.json`` exactly as the trainer built it, and the module it
trained from ``model_family.json`` (``{"family": "masked_lm"}``; the trainer writes it, so no
reader needs the objectives to work it out). A workdir of an XLM-E family run is read as its
discriminator: the embeddings and encoder that
``ElectraPretrainer`` keeps where ``MaskedLM`` keeps them; the generator and the replaced-token
head stay behind.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import traverse_util

from xlpretrain.data.tokenizer import Tokenizer, tokenizer_file
from xlpretrain.model import vocab
from xlpretrain.model.config import LAYER_FEATURES, ModelConfig, ModelFamily, recorded_features
from xlpretrain.model.encoder import init_params

MODEL_JSON = "model.json"
PARAMS_DIR = "params"
LANGUAGES_FILE = "languages.json"  # in a checkpoint folder as in a workdir
CHECKPOINTS_DIR = "checkpoints"  # in a training workdir: one folder per finished step
TASK_FILE = "task.json"  # in a fine-tuned task's workdir (`convert.task_workdir`)
FAMILY_FILE = "model_family.json"  # in a training workdir: the ModelFamily it trains
# What a Pretrained holds (its ``kind``): a masked LM (embeddings, encoder, lm_head), or XLM-E's
# discriminator (embeddings and encoder only: it has no MLM head).
MASKED_LM = "masked_lm"
DISCRIMINATOR = "xlm_e_discriminator"

Params = dict[str, Any]
# ModelConfig fields that say how to compute, not what: two configs that differ only in them are
# one model.
RUNTIME_FIELDS = (
    "dtype", "remat", "scan_layers", "attention_impl", "kernel_platform", "flash_tiles",
    "vocab_multiple", "loss_chunk",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Pretrained:
    """A model as converters and ``xlpretrain.load`` see it.

    ``config.scan_layers`` is always True and ``params`` are float32 NumPy arrays with the
    layers stacked, whatever the run trained with. ``languages`` indexes ``lang_ids`` (the
    workdir's ``languages.json``); it is empty for models without language embeddings.
    ``kind`` is ``MASKED_LM``, or ``DISCRIMINATOR`` for an XLM-E run's discriminator, whose
    ``params`` lack ``lm_head``.
    """

    config: ModelConfig
    params: Params
    tokenizer: Tokenizer | None = None
    languages: tuple[str, ...] = ()
    kind: str = MASKED_LM


def abstract_params(config: ModelConfig, kind: str = MASKED_LM) -> Params:
    """Shapes and dtypes of the params a model of ``config`` and ``kind`` holds, without
    allocating them."""
    # How a model computes does not change its params; a GPU-only kernel must not stop a CPU.
    config = dataclasses.replace(config, remat="none", attention_impl="xla")
    params = nn.unbox(jax.eval_shape(lambda rng: init_params(config, rng), jax.random.key(0)))
    if kind == DISCRIMINATOR:  # the masked LM's tree without its head
        del params["lm_head"]
    return params


def different_settings(a: ModelConfig, b: ModelConfig) -> dict[str, tuple[Any, Any]]:
    """``{field: (a's value, b's value)}`` for each field, ``RUNTIME_FIELDS`` aside, in which
    ``a`` and ``b`` describe different models."""
    return {
        field.name: (getattr(a, field.name), getattr(b, field.name))
        for field in dataclasses.fields(a)
        if field.name not in RUNTIME_FIELDS and getattr(a, field.name) != getattr(b, field.name)
    }


def unpadded(model: Pretrained) -> Pretrained:
    """``model`` with its vocabulary-indexed parameters cut to the real vocabulary (no rows
    padded for sharding): what a Hugging Face export holds."""
    config = dataclasses.replace(model.config, vocab_multiple=1)
    params = vocab.with_rows(model.params, model.config.vocab_size)
    return dataclasses.replace(model, config=config, params=params)


def new_folder(path: str | os.PathLike) -> Path:
    """``path`` made absolute, if nothing is there yet: conversions never overwrite."""
    path = Path(path).absolute()
    if path.exists():
        raise FileExistsError(f"{path} already exists; choose a new destination folder")
    return path


def write(model: Pretrained, path: str | os.PathLike) -> None:
    """Writes ``model`` as a checkpoint folder; ``path`` must not exist yet."""
    if model.kind != MASKED_LM:
        raise ValueError(
            "a checkpoint folder holds a masked LM; use an XLM-E discriminator from its workdir "
            "(xlpretrain.load) or export it (to-hf)"
        )
    path = new_folder(path)
    path.mkdir(parents=True)
    (path / MODEL_JSON).write_text(json.dumps(config_record(model.config), indent=2) + "\n")
    with ocp.PyTreeCheckpointer() as checkpointer:
        checkpointer.save(path / PARAMS_DIR, model.params)
    if model.tokenizer is not None:
        model.tokenizer.save(path / model.tokenizer.FILE)
    if model.languages:
        (path / LANGUAGES_FILE).write_text(json.dumps(list(model.languages)) + "\n")


def read(path: str | os.PathLike) -> Pretrained:
    """Reads a checkpoint folder, a training workdir (its latest checkpoint) or one checkpoint
    of a workdir, ``WORKDIR/checkpoints/N`` (to export or merge a step other than the last)."""
    path = Path(path).absolute()
    # Before the folder must exist: a step that is not there is named with those that are.
    if path.name.isdigit() and path.parent.name == CHECKPOINTS_DIR and is_workdir(path.parents[1]):
        _refuse_task_workdir(path.parents[1])
        return _read_workdir(path.parents[1], int(path.name))
    if not path.is_dir():
        raise FileNotFoundError(f"no such folder: {path}")
    if (path / MODEL_JSON).is_file():
        return _read_checkpoint_folder(path)
    _refuse_task_workdir(path)
    if is_workdir(path):
        return _read_workdir(path)
    raise ValueError(
        f"{path} is neither an xlpretrain checkpoint folder ({MODEL_JSON} + {PARAMS_DIR}/), a "
        f"training workdir (config.json + {CHECKPOINTS_DIR}/) nor one of its checkpoints "
        f"(WORKDIR/{CHECKPOINTS_DIR}/N)"
    )


def _refuse_task_workdir(path: Path) -> None:
    """A fine-tuned task's workdir holds an encoder with a task head, not a pre-trained model:
    say so, and what reads it, rather than what it lacks."""
    if (path / TASK_FILE).is_file():
        raise ValueError(
            f"{path} is a fine-tuned task's workdir ({TASK_FILE}), not a pre-trained model: "
            f"`python -m xlpretrain.convert to-hf {path} DST` exports it as its transformers "
            "task class; a pre-training workdir or checkpoint folder is what this reads"
        )


def is_workdir(path: Path) -> bool:
    """Whether ``path`` is a training workdir (what ``python -m xlpretrain.train`` writes)."""
    return (path / "config.json").is_file() and (path / CHECKPOINTS_DIR).is_dir()


def config_record(config: ModelConfig) -> dict[str, Any]:
    """``config`` as ``model.json`` holds it: its fields, less the writing host's kernels."""
    fields = dataclasses.asdict(config)
    del fields["kernel_platform"]  # the reading host's, not the writer's
    return fields


def recorded_config(fields: dict[str, Any], source: str | os.PathLike) -> ModelConfig:
    """The `ModelConfig` of a ``config_record`` read from ``source`` (named in its error)."""
    try:
        return ModelConfig(**{**fields, **recorded_features(fields)})
    except TypeError as error:
        raise ValueError(f"{source}: {error}") from error


def _read_checkpoint_folder(path: Path) -> Pretrained:
    fields = json.loads((path / MODEL_JSON).read_text())
    config = dataclasses.replace(recorded_config(fields, path / MODEL_JSON), scan_layers=True)
    params = restore(path / PARAMS_DIR, abstract_params(config))
    languages_file = path / LANGUAGES_FILE
    languages = tuple(json.loads(languages_file.read_text())) if languages_file.is_file() else ()
    if languages and len(languages) != config.num_languages:
        raise ValueError(
            f"{languages_file}: {len(languages)} languages, but {MODEL_JSON} has "
            f"num_languages={config.num_languages}"
        )
    return Pretrained(config, params, tokenizer_or_none(path), languages)


def _recorded_model(
    model: dict[str, Any], num_languages: int, features: dict[str, Any]
) -> ModelConfig:
    """The `ModelConfig` of a workdir's `config.json` `model` section, a record: its keys are
    the fields' names (`attention`: `attention_impl`), and a field a record predates keeps its
    default. `num_languages` sizes the language table if the run had one."""
    renamed = {"attention_impl": "attention"}
    fields = {
        field.name: model[renamed.get(field.name, field.name)]
        for field in dataclasses.fields(ModelConfig)
        if renamed.get(field.name, field.name) in model
        and field.name not in ("num_languages", "kernel_platform", "pad_token_id")
        and field.name not in LAYER_FEATURES
    }
    return ModelConfig(
        **fields,
        **features,
        num_languages=num_languages if model["language_embeddings"] else 0,
    )


def _read_workdir(path: Path, step: int | None = None) -> Pretrained:
    """The model of ``path``'s checkpoint ``step`` (default: its latest finished one)."""
    run_config = json.loads((path / "config.json").read_text())
    languages_file = path / LANGUAGES_FILE
    languages = tuple(json.loads(languages_file.read_text())) if languages_file.is_file() else ()
    if run_config["model"].get("language_embeddings") and not languages:
        raise FileNotFoundError(f"{languages_file} (the index of lang_ids) is missing")
    record = _family_record(path)
    config = _recorded_model(
        run_config["model"],
        len(languages),
        record.get("layer_features") or recorded_features(run_config["model"]),
    )
    kind = DISCRIMINATOR if ModelFamily(record["family"]) is ModelFamily.ELECTRA else MASKED_LM
    checkpoints = path / CHECKPOINTS_DIR
    finished = finished_steps(path)
    if not finished:
        raise FileNotFoundError(f"{checkpoints} holds no finished checkpoint")
    if step is None:
        step = finished[-1]
    elif step not in finished:
        raise FileNotFoundError(
            f"{checkpoints / str(step)} is not a finished checkpoint; {checkpoints} holds "
            f"steps {', '.join(map(str, finished))}"
        )
    state = restore(
        checkpoints / str(step) / "state",
        {"params": abstract_params(config, kind)},
        partial=True,
    )
    params = state["params"] if config.scan_layers else stack_layers(state["params"], config)
    return Pretrained(
        dataclasses.replace(config, scan_layers=True),
        params,
        tokenizer_or_none(path),
        languages if config.num_languages else (),
        kind,
    )


def finished_steps(workdir: str | os.PathLike) -> list[int]:
    """The steps of a training workdir's finished checkpoints, in order (a save cut short is
    none of them)."""
    return sorted(ocp.path.step.checkpoint_steps(Path(workdir) / CHECKPOINTS_DIR))


def record_family(workdir: str | os.PathLike, family: ModelFamily, model: ModelConfig) -> None:
    """Writes which module a training workdir's checkpoints hold and its layers' features
    (``FAMILY_FILE``): with the config's ``model`` section, what rebuilds the model."""
    features = {name: getattr(model, name) for name in LAYER_FEATURES}
    record = {"family": family.value, "layer_features": features}
    (Path(workdir) / FAMILY_FILE).write_text(json.dumps(record) + "\n")


def read_family(workdir: str | os.PathLike) -> ModelFamily:
    """The module a training workdir's checkpoints hold, as the trainer recorded it."""
    return ModelFamily(_family_record(workdir)["family"])


def _family_record(workdir: str | os.PathLike) -> dict:
    path = Path(workdir) / FAMILY_FILE
    try:
        record = json.loads(path.read_text())
        ModelFamily(record["family"])
        return record
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} is missing: the trainer writes it when a run starts; a workdir from before "
            f'it did can be given one by hand, e.g. {{"family": "masked_lm"}}'
        ) from None
    except (ValueError, KeyError, TypeError) as error:
        known = [f.value for f in ModelFamily]
        raise ValueError(f'{path}: expected {{"family": one of {known}}}: {error}') from error


def stack_layers(params: Params, config: ModelConfig) -> Params:
    """Unrolled ``encoder/layers_i`` params (``scan_layers=False``) → the stacked layout;
    the encoder's shared params (a relative-position table) stay beside the stack."""
    encoder = params["encoder"]
    layers = [encoder[f"layers_{i}"] for i in range(config.num_layers)]
    shared = {k: v for k, v in encoder.items() if not k.startswith("layers_")}
    stacked = jax.tree.map(lambda *x: np.stack(x), *layers)
    return {**params, "encoder": {**shared, "layers": stacked}}


def restore(path: Path, target: Params, partial: bool = False) -> Params:
    """Restores ``target``'s arrays as float32 NumPy (host memory: no device, no mesh)."""
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), target)
    try:
        with ocp.PyTreeCheckpointer() as checkpointer:
            restored = checkpointer.restore(
                path,
                args=ocp.args.PyTreeRestore(
                    item=target, restore_args=restore_args, partial_restore=partial
                ),
            )
    except Exception as error:  # Orbax raises many types for missing or mismatched trees.
        raise ValueError(
            f"cannot restore the parameters in {path}: {type(error).__name__}: {error}"
        ) from error
    _check_shapes(path, restored, target)
    return jax.tree.map(lambda x: np.asarray(x, np.float32), restored)


def _check_shapes(path: Path, restored: Params, target: Params) -> None:
    got = traverse_util.flatten_dict(restored, sep="/")
    for name, want in traverse_util.flatten_dict(target, sep="/").items():
        if got[name].shape != want.shape:
            raise ValueError(
                f"{path}: parameter {name} has shape {got[name].shape}, the model config "
                f"needs {want.shape}"
            )


def tokenizer_or_none(folder: Path) -> Tokenizer | None:
    """The tokenizer the folder keeps (either kind), or None."""
    found = tokenizer_file(folder)
    return Tokenizer.load(found) if found else None
