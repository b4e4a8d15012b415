"""The typed, frozen sections of a resolved run, shared by every task (pre-training and
fine-tuning): the loop (`train.*`), the optimizer and its schedule (`optim.*`), the device mesh
(`mesh.*`) and the input pipeline's workers.

Each is built by `of(config)` from a validated config read as a mapping — a `ConfigDict` or a
workdir's saved `config.json` alike, so the resume guard resolves the config a checkpoint was
trained with the same way as the new one. Only the run plan builds them; the rest of training
reads their fields.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grain
import jax
import jax.numpy as jnp
import optax

from xlpretrain.core.errors import check
from xlpretrain.data.pretraining.pipeline import make_dataset
from xlpretrain.parallel.rules import Rules, as_rules, data_parallel_axes

SCHEDULES = ("linear", "wsd")
DECAY_SHAPES = ("linear", "cosine", "1-sqrt")
# jax.random's key implementations a run may draw dropout from (its philox ones do not lower
# on XLA:CPU in JAX 0.10).
PRNG_IMPLS = ("threefry2x32", "threefry4x32", "rbg", "unsafe_rbg")


def warmup_stable_decay(
    peak: float, warmup_steps: int, total_steps: int, decay: int, shape: str
) -> optax.Schedule:
    """Warm-up, stable, decay (the trapezoid of ModernBERT and mmBERT): 0 → `peak` over
    `warmup_steps`, `peak` until the last `decay` steps, then to 0 at `total_steps` along
    `shape` (linear; cosine; 1-sqrt, 1 − √(t/decay)). A longer run lengthens the stable part
    alone: the steps before its decay train at the same rates. The decay fits after the
    warm-up (`decay_length` refuses one that does not), except in a run no longer than its
    warm-up, which only warms up."""
    warmup = min(warmup_steps, total_steps)
    start = max(total_steps - decay, warmup)
    span = max(total_steps - start, 1)
    shapes = {
        "linear": optax.linear_schedule(peak, 0.0, span),
        "cosine": optax.cosine_decay_schedule(peak, span),
        "1-sqrt": lambda t: peak * (1.0 - jnp.sqrt(jnp.minimum(t, span) / span)),
    }
    return optax.join_schedules(
        [optax.linear_schedule(0.0, peak, max(warmup, 1)), optax.constant_schedule(peak),
         shapes[shape]],
        boundaries=[warmup, start],
    )  # fmt: skip


def warmup_linear_decay(
    peak: float, warmup_steps: int, total_steps: int, cap_warmup: bool = True
) -> optax.Schedule:
    """0 → `peak` over `warmup_steps`, then linearly to 0 at `total_steps`: every seed
    paper's schedule. A warm-up longer than the run is squeezed into it (`cap_warmup`, the
    rate reaches `peak` at the end), or not: step t's rate stays `peak` · t / `warmup_steps`,
    as transformers' `get_linear_schedule_with_warmup` (XTREME's `run_*.py`) computes it."""
    warmup = min(warmup_steps, total_steps) if cap_warmup else warmup_steps
    return optax.join_schedules(
        [
            optax.linear_schedule(0.0, peak, max(warmup, 1)),
            optax.linear_schedule(peak, 0.0, max(total_steps - warmup, 1)),
        ],
        boundaries=[warmup],
    )


def decay_length(optim: Mapping[str, Any], steps: int, warmup: int) -> int:
    """The warm-up–stable–decay schedule's decay, in steps: `optim.decay_steps`, or
    `optim.decay_fraction` of `steps` (a shipped config's decay then follows a shorter or
    longer `--config.train.steps`, as its `data.anneal` points do). A `wsd` decay longer than
    the steps after warm-up is refused rather than squeezed into them, which would decay
    faster than asked; a run no longer than its warm-up (a trial of a few steps) never reaches
    a decay, so it is not checked."""
    fraction, given = optim.get("decay_fraction", 0.0), optim.get("decay_steps", 0)
    if fraction:
        check(
            not given,
            "optim.decay_fraction",
            f"{fraction} and optim.decay_steps={given} both give the decay: set the other 0",
        )
        key, decay, asked = "optim.decay_fraction", round(fraction * steps), f"{fraction}"
        asked += f" of train.steps={steps} is {decay} steps"
    else:
        key, decay, asked = "optim.decay_steps", given, f"{given}"
    left = steps - warmup
    if optim.get("schedule", "linear") == "wsd" and left > 0:
        check(
            decay <= left,
            key,
            f"{asked}, but train.steps={steps} leave {left} after optim.warmup_steps={warmup}: "
            f"set a decay of at most {left} steps"
            + ("" if fraction else ", or optim.decay_fraction (a share of train.steps)"),
        )
    return decay


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """`train.*` as the shared training loop reads it (`xlpretrain.training.loop`)."""

    steps: int  # the run's length: the schedule is built from it
    stop_at: int  # halt after this step with a checkpoint (-1: run to `steps`)
    log_every: int
    checkpoint_every: int
    keep_checkpoints: int
    async_checkpointing: bool
    seed: int
    prng_impl: str  # dropout's random bits (`PRNG_IMPLS`)
    grad_accum: int
    max_bad_steps: int
    allow_fresh_start: bool
    resume_with_changes: bool
    wandb_project: str
    eval_every: int  # `eval.every_steps`: 0 evaluates only at the end (fine-tuning) or never

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> LoopSettings:
        train = config["train"]
        fields = [f.name for f in dataclasses.fields(cls) if f.name != "eval_every"]
        return cls(
            **{name: train[name] for name in fields}, eval_every=config["eval"]["every_steps"]
        )

    @property
    def end_step(self) -> int:
        """The last step this invocation runs: `stop_at`, else `steps`."""
        return self.stop_at if self.stop_at > 0 else self.steps


@dataclasses.dataclass(frozen=True)
class OptimizerSettings:
    """`optim.*`: clipped AdamW on linear warm-up and linear decay to 0 at `steps`."""

    learning_rate: float
    warmup_steps: int
    steps: int
    b1: float
    b2: float
    eps: float
    weight_decay: float
    clip_norm: float  # global-norm clipping; 0 disables
    layer_decay: float = 1.0  # fine-tuning's layer-wise learning-rate decay (1: none)
    schedule: str = "linear"  # linear | wsd (warm-up, stable, decay)
    decay_steps: int = 0  # wsd: the decay's length (`optim.decay_steps` or `decay_fraction`)
    decay_shape: str = "linear"  # wsd: linear | cosine | 1-sqrt
    cap_warmup: bool = True  # linear: a warm-up longer than `steps` ends at `steps` (XTREME: no)
    # Update k at the schedule's rate of k + 1 (XTREME's run_tag.py steps its scheduler first)
    scheduler_first: bool = False

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> OptimizerSettings:
        """Pre-training's `optim.warmup_steps`, or fine-tuning's `optim.warmup_fraction` of
        `train.steps`."""
        optim, steps = config["optim"], config["train"]["steps"]
        warmup = (
            optim["warmup_steps"]
            if "warmup_steps" in optim
            else round(optim["warmup_fraction"] * steps)
        )
        return cls(
            learning_rate=optim["learning_rate"],
            warmup_steps=warmup,
            steps=steps,
            b1=optim["b1"],
            b2=optim["b2"],
            eps=optim["eps"],
            weight_decay=optim["weight_decay"],
            clip_norm=optim["clip_norm"],
            layer_decay=optim.get("layer_decay", 1.0),
            schedule=optim.get("schedule", "linear"),
            decay_steps=decay_length(optim, steps, warmup),
            decay_shape=optim.get("decay_shape", "linear"),
        )

    def learning_rates(self) -> optax.Schedule:
        if self.schedule == "wsd":
            return warmup_stable_decay(
                self.learning_rate, self.warmup_steps, self.steps, self.decay_steps,
                self.decay_shape,
            )  # fmt: skip
        rates = warmup_linear_decay(
            self.learning_rate, self.warmup_steps, self.steps, self.cap_warmup
        )
        return (lambda count: rates(count + 1)) if self.scheduler_first else rates


@dataclasses.dataclass(frozen=True)
class MeshSettings:
    """`mesh.*`: the `data × fsdp × tensor` mesh (-1: the devices the others leave) and the
    logical axis rules placed on it."""

    data: int
    fsdp: int
    tensor: int
    rules: Rules

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> MeshSettings:
        mesh = config["mesh"]
        return cls(mesh["data"], mesh["fsdp"], mesh["tensor"], as_rules(mesh["rules"]))

    @property
    def data_parallel_axes(self) -> tuple[str, ...]:
        """The mesh axes the rules put `batch` on: a step's rows divide over their devices."""
        return data_parallel_axes(self.rules)

    def make(self, devices: Sequence[jax.Device] | None = None) -> jax.sharding.Mesh:
        from xlpretrain.parallel.sharding import make_mesh  # Flax

        return make_mesh(self.data, self.fsdp, self.tensor, devices)

    def check_rows_divide(
        self, rows_key: str, rows: int, grad_accum: int, shape: Mapping[str, int], what: str = ""
    ) -> None:
        """`rows` global rows (set by config key `rows_key`) / `grad_accum` split evenly over
        the data-parallel devices of a mesh of `shape`."""
        axes = self.data_parallel_axes
        parallel = math.prod(shape[axis] for axis in axes)
        micro = rows // grad_accum
        sizes = " × ".join(f"{axis} {shape[axis]}" for axis in axes) or "none"
        check(
            micro % parallel == 0,
            rows_key,
            f"{rows}{what} / train.grad_accum={grad_accum} = {micro} rows per micro-batch, not "
            f"divisible by the data-parallel size {parallel} (the mesh axes mesh.rules put "
            f"'batch' on: {sizes})",
        )


@dataclasses.dataclass(frozen=True)
class PipelineSettings:
    """How the input pipeline runs (`data.num_workers`, `data.prefetch`): not what it reads."""

    num_workers: int
    prefetch: int

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> PipelineSettings:
        return cls(config["data"]["num_workers"], config["data"]["prefetch"])

    def dataset(self, batches: Callable[[int], Any], steps: int) -> grain.IterDataset:
        """`data.pretraining.pipeline.make_dataset` of `batches` (step → this process's batches)
        over `steps` steps, with these workers and prefetch: every task's input, and the
        benchmarks' of it."""
        return make_dataset(batches, steps, num_workers=self.num_workers, prefetch=self.prefetch)
