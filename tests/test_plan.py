"""The run plan: every shipped config's batches have one shape, whoever builds them.

The plan's shapes (what `aot` compiles for: `RunPlan.abstract_batches`) and the benchmark's
synthetic batch agree field for field with the batch the input pipeline builds, in every stage
of every shipped pre-training config — rows shrunk to keep the pipeline quick; and that batch
has rows and lengths as the config sets them and prediction slots for the most predictions a
row can carry (a row with more is an error of the pipeline, never a silent cut).
"""

import importlib.util
import pathlib

import jax
import numpy as np
import pytest

from xlpretrain import objectives as objectives_lib
from xlpretrain.bench import step as bench
from xlpretrain.data.corpora import corpus as corpus_lib
from xlpretrain.data.pretraining.anneal import Anneal
from xlpretrain.data.pretraining.row_kinds import SegmentPairs, Segments
from xlpretrain.data.pretraining.streams import MONO, PARALLEL, StreamSpec
from xlpretrain.data.tokenizer import Tokenizer
from xlpretrain.training.plan import resolve

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"
# Both kinds of rows masked harder in the first half than any objective's own rate.
ANNEALED_RATES = (
    {"step": 0, "mono_mask_rate": 0.4, "parallel_mask_rate": 0.35},
    {"step": 0.5, "mono_mask_rate": 0.1, "parallel_mask_rate": 0.1},
)
SHIPPED = [  # (file, argument, data.* settings)
    ("demo.py", "", {}),
    ("veco.py", "tiny", {"mono_mask_rate": 0.3}),  # veco_mono masks more than the parallel rate
    ("veco.py", "tiny", {"anneal": ANNEALED_RATES}),
    ("ernie_m.py", "tiny", {"anneal": ANNEALED_RATES}),
    *(("xlmr.py", size, {}) for size in ("tiny", "base", "large")),
    *(("ernie_m.py", size, {}) for size in ("tiny", "base", "large")),
    *(("veco.py", size, {}) for size in ("tiny", "small", "large")),
    *(("xlm_e.py", size, {}) for size in ("tiny", "base")),
    *(("mmbert.py", size, {}) for size in ("tiny", "small", "base")),
    *(("mbert.py", size, {}) for size in ("tiny", "base")),
]


def shipped_config(file: str, arg: str, data: dict | None = None):
    """`configs/FILE:ARG` with `data` set in its `data` section."""
    spec = importlib.util.spec_from_file_location(file.removesuffix(".py"), CONFIGS / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = module.get_config(arg) if arg else module.get_config()
    cfg.data.update(data or {})
    return cfg


def shrunk(cfg, corpus: pathlib.Path, tokenizer: pathlib.Path):
    """`cfg` with every objective's rows per step at one micro-batch row per accumulation
    step, reading `corpus` with `tokenizer`: the lengths, rates and stages unchanged."""
    rows = cfg.train.grad_accum
    cfg.data.batch_size = rows
    for override in cfg.data.per_objective.values():
        if "batch_size" in override:
            override.batch_size = rows
    cfg.schedule = tuple(
        {**stage, "batch_size": dict.fromkeys(stage["batch_size"], rows)}
        if "batch_size" in stage
        else stage
        for stage in cfg.schedule
    )
    cfg.data.update(mono_dir=str(corpus / "mono"), parallel_dir=str(corpus / "parallel"))
    cfg.tokenizer.path = str(tokenizer)
    cfg.eval.every_steps = 0  # shapes of the training batches only (configs/demo.py evaluates)
    return cfg


def shapes(batches) -> dict:
    return {
        name: {field: (tuple(v.shape), np.dtype(v.dtype)) for field, v in batch.items()}
        for name, batch in batches.items()
    }


def row_length(cfg, stage: int, name: str) -> int:
    """Objective `name`'s row length in stage `stage`, read from the config: the stage's
    `max_length`, else `data.per_objective`'s, else `data.max_length`."""
    staged = cfg.schedule[stage].get("max_length", {}) if cfg.schedule else {}
    default = cfg.data.per_objective.get(name, {}).get("max_length", cfg.data.max_length)
    return staged.get(name, default)


def most_predictions(cfg, plan, stage: int, name: str) -> int:
    """The most tokens a row of objective `name` can have predicted in stage `stage`, read
    from the config: max(1, round(rate · L)) for a row whose L tokens are all maskable, at the
    highest rate its rows are masked at — its own rate for each kind of corpus it reads, or
    the highest of `data.anneal`'s over the stage's steps and after training (held-out rows)."""
    declared = objectives_lib.get(name).stream_spec(plan.contexts[name])
    rates = dict(declared.mask_rates)
    anneal = Anneal.from_config(cfg.data.anneal, cfg.train.steps)
    first = plan.stages[stage].start_step
    last = plan.stages[stage + 1].start_step - 1 if stage + 1 < len(plan.stages) else None
    for source in rates:
        key = f"{source}_mask_rate"
        if key in anneal:
            final = anneal.points[key][1][-1]
            rates[source] = max(anneal.maximum(key, first, last or cfg.train.steps), final)
    return max(1, round(max(rates.values()) * row_length(cfg, stage, name)))


@pytest.mark.parametrize(
    "file, arg, data", SHIPPED, ids=[f"{f}:{a}{''.join(f'+{k}' for k in d)}" for f, a, d in SHIPPED]
)
def test_plan_bench_and_pipeline_batches_have_one_shape(file, arg, data, udhr, udhr_tokenizer_path):
    cfg = shrunk(shipped_config(file, arg, data), udhr, udhr_tokenizer_path)
    plan = resolve(cfg)
    corpus = corpus_lib.load_corpus(plan.corpus, plan.sources())
    builder = plan.batch_builder(corpus, Tokenizer.load(cfg.tokenizer.path))
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    rng = np.random.default_rng(0)
    for index, stage in enumerate(plan.stages):
        real = shapes(builder.map(stage.start_step))  # dataset index k is logged step k + 1
        assert set(real) == set(stage.weights), f"stage {index}"
        for name, fields in real.items():
            length = row_length(cfg, index, name)
            assert fields["input_ids"][0] == (cfg.train.grad_accum, length), name
            (slots,) = {fields[f][0][1] for f in ("pred_positions", "pred_labels", "pred_weights")}
            needed = most_predictions(cfg, plan, index, name)  # ⌈rate · L⌉: one to spare at most
            assert needed <= slots <= needed + 1, f"{name}: {slots} slots for {needed}"
        assert shapes(plan.abstract_batches(index, sharding)) == real, f"stage {index}"
        streams = plan.stage_streams[index]
        synthetic = {
            name: bench.synthetic_batch(rows, streams[name], cfg.model.vocab_size, rng)
            for name, rows in stage.rows.items()
        }
        assert shapes(synthetic) == real, f"stage {index}"


def test_a_stream_with_two_mask_rates_has_slots_for_the_higher():
    """VECO's segment pairs mask monolingual rows at their own rate: the slots fit the higher
    one, in the pipeline and the benchmark alike (the benchmark once sized the lower)."""
    stream = StreamSpec(SegmentPairs(mono_fraction=0.5), {PARALLEL: 0.15, MONO: 0.3}, max_length=40)
    assert stream.prediction_slots == 12  # ⌈0.3 · 40⌉
    batch = bench.synthetic_batch(2, stream, 100, np.random.default_rng(0))
    assert batch["pred_weights"].shape == (2, 12)
    assert batch["pred_weights"].sum(1).tolist() == [6, 6]  # ⌈0.15 · 40⌉ predicted


def test_a_stream_needs_its_length_before_it_has_shapes():
    with pytest.raises(ValueError, match="row length is not resolved"):
        StreamSpec(Segments(), {MONO: 0.15}).batch_shapes(4)


def test_stage_lookup_and_unfreezing():
    cfg = shipped_config("veco.py", "tiny")
    plan = resolve(cfg)
    second = plan.stages[1].start_step
    assert [plan.stage_index(s) for s in (1, second - 1, second)] == [0, 0, 1]
    assert plan.starts_training_others(second) and not plan.starts_training_others(second + 1)
