"""The training state and the jitted step: mixed objectives, exact gradient accumulation.

Each objective's loss is the mean over *all* its predictions in the global batch, whatever the
accumulation or sharding: a micro-batch contributes `loss_micro · count_micro / count_total`,
so accumulated gradients equal the full-batch gradient, and sharded equals unsharded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from xlpretrain.core.errors import ConfigError
from xlpretrain.objectives.declaration import CountFn, LossFn, predictions
from xlpretrain.parallel.rules import Rules
from xlpretrain.parallel.sharding import batch_sharding, logical_shardings, under_mesh
from xlpretrain.training.optim import (
    adamw_from,
    restart_moments,
    trainable_mask,
)
from xlpretrain.training.plan import RunPlan

Batches = dict[str, dict[str, jax.Array]]


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: Any
    opt_state: Any
    rng: jax.Array  # base key; step k uses fold_in(rng, k)


def init_state(params, optimizer: optax.GradientTransformation, rng: jax.Array) -> TrainState:
    return TrainState(
        step=jnp.zeros((), jnp.int32), params=params, opt_state=optimizer.init(params), rng=rng
    )


def _split_micro(batch: dict[str, jax.Array], accum: int) -> dict[str, jax.Array]:
    """[B, …] → [accum, B/accum, …], micro-batch i = rows i, i+accum, … so each device keeps
    its own rows (no resharding when the batch is split over devices)."""

    def split(x):
        return x.reshape(x.shape[0] // accum, accum, *x.shape[1:]).swapaxes(0, 1)

    return jax.tree.map(split, batch)


def make_train_step(
    model,
    loss_fns: Mapping[str, LossFn],
    weights: Mapping[str, float],
    optimizer: optax.GradientTransformation,
    schedule: optax.Schedule,
    grad_accum: int = 1,
    counts: Mapping[str, CountFn] | None = None,
) -> Callable[[TrainState, Batches], tuple[TrainState, dict[str, jax.Array]]]:
    """Returns `step(state, batches) -> (state, metrics)`, to be wrapped in `jax.jit`.

    `counts[name]` is what objective `name`'s loss is a mean over in a batch (default: its
    weighted prediction slots; `Objective.count`): each micro-batch's loss is weighted by its
    share of the step's, so accumulated micro-batches give the loss of the whole batch."""
    names = sorted(loss_fns)
    counts = counts or {}

    def micro_loss(params, micro: Batches, totals, rng):
        loss, metrics = 0.0, {}
        for index, name in enumerate(names):
            obj_loss, obj_metrics = loss_fns[name](
                params, micro[name], jax.random.fold_in(rng, index), model
            )
            share = obj_metrics["count"] / jnp.maximum(totals[name], 1.0)
            loss = loss + weights[name] * obj_loss * share
            for key, value in obj_metrics.items():
                # An objective may name a metric fully ("loss/veco_self"); else "<key>/<name>".
                full = key if "/" in key else f"{key}/{name}"
                metrics[full] = value if key == "count" else value * share
        return loss, metrics

    grad_fn = jax.value_and_grad(micro_loss, has_aux=True)

    def step(state: TrainState, batches: Batches):
        rng = jax.random.fold_in(state.rng, state.step)
        totals = {name: counts.get(name, predictions)(batches[name]) for name in names}
        if grad_accum == 1:
            (loss, metrics), grads = grad_fn(state.params, batches, totals, rng)
        else:
            micro_batches = {name: _split_micro(batches[name], grad_accum) for name in names}

            def accumulate(carry, inputs):
                index, micro = inputs
                (loss, metrics), grads = grad_fn(
                    state.params, micro, totals, jax.random.fold_in(rng, index)
                )
                return jax.tree.map(jnp.add, carry, (loss, metrics, grads)), None

            first = jax.tree.map(lambda x: x[0], micro_batches)
            shapes = jax.eval_shape(grad_fn, state.params, first, totals, rng)
            zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), (*shapes[0], shapes[1]))
            (loss, metrics, grads), _ = jax.lax.scan(
                accumulate, zeros, (jnp.arange(grad_accum), micro_batches)
            )
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        new_params = optax.apply_updates(state.params, updates)
        grad_norm = optax.tree.norm(grads)
        finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
        # A non-finite step leaves the state untouched; the host counts the flag
        # (divergence.BadStepGuard).
        keep = lambda new, old: jnp.where(finite, new, old)  # noqa: E731
        new_state = state.replace(
            step=state.step + 1,
            params=jax.tree.map(keep, new_params, state.params),
            opt_state=jax.tree.map(keep, opt_state, state.opt_state),
        )
        metrics = dict(metrics)
        metrics["loss"] = loss
        metrics["grad_norm"] = grad_norm
        metrics["learning_rate"] = schedule(state.step)
        metrics["finite"] = finite
        return new_state, metrics

    return step


@dataclasses.dataclass
class Training:
    """A run's initial state, its shardings and the compiled step of each of the plan's stages,
    on one mesh."""

    mesh: Mesh
    state: TrainState
    state_shardings: TrainState
    batch_sharding: NamedSharding
    step_fns: list[Callable[[TrainState, Batches], tuple[TrainState, dict[str, jax.Array]]]]
    # Applied before the first step of a stage whose `trainable` differs from the previous
    # stage's (optim.restart_moments).
    restart_moments: Callable[[TrainState], TrainState]


def setup_training(
    plan: RunPlan,
    model: nn.Module,
    init_params: Callable[[jax.Array], Any],
    mesh: Mesh,
    materialize: bool = True,
) -> Training:
    """Pre-training's `Training`: one optimizer and one step per stage of the plan (each stage
    freezes its own parameters), on `sharded_training`."""
    # One optimizer per stage (each freezes its own parameters), all with the same state.
    optimizers = [adamw_from(plan.optim, stage.trainable) for stage in plan.stages]
    abstract_params = jax.eval_shape(
        lambda rng: nn.unbox(init_params(rng)), jax.random.key(plan.loop.seed)
    )
    for stage in plan.stages:
        if stage.trainable and not any(
            jax.tree.leaves(trainable_mask(abstract_params, stage.trainable))
        ):
            raise ConfigError(
                f"config key 'train.trainable' (or a stage's 'trainable'): {stage.trainable!r} "
                "matches no parameter path (e.g. 'encoder/layers/attention/query/kernel')"
            )
    steps = [
        make_train_step(
            model,
            {name: plan.objectives[name].loss(plan.contexts[name]) for name in stage.weights},
            stage.weights,
            stage_optimizer,
            plan.optim.learning_rates(),
            plan.loop.grad_accum,
            {name: plan.objectives[name].count(plan.contexts[name]) for name in stage.weights},
        )
        for stage, stage_optimizer in zip(plan.stages, optimizers, strict=True)
    ]
    return sharded_training(
        mesh,
        plan.mesh.rules,
        init_params,
        optimizers[0],
        steps,
        plan.loop.seed,
        materialize=materialize,
        prng_impl=plan.loop.prng_impl,
    )


def sharded_training(
    mesh: Mesh,
    rules: Rules,
    init_params: Callable[[jax.Array], Any],
    optimizer: optax.GradientTransformation,
    steps: Sequence[Callable[[TrainState, Batches], tuple[TrainState, dict[str, jax.Array]]]],
    seed: int,
    materialize: bool = True,
    prng_impl: str = "threefry2x32",
) -> Training:
    """Any task's `Training` on `mesh`: the state initialised directly into the shardings the
    `rules` give its logical axes (no host copy of the parameters), and each of `steps`
    (`make_train_step`'s, whose optimizers share `optimizer`'s state) jitted with explicit
    in/out shardings and a donated state.

    `init_params(rng)` returns the model's parameters boxed with logical axis names, from a
    threefry key of `seed`; the state's key for dropout is `prng_impl`'s key of the same seed
    (for threefry2x32 the same key, folded in once).
    `materialize=False` leaves the state abstract (shapes, dtypes, shardings): enough to
    lower and compile the steps ahead of time (`xlpretrain.aot`) without the memory.
    """

    def init_fn(rng):
        params = nn.unbox(init_params(rng))
        dropout_key = jax.random.key(seed, impl=prng_impl)
        return init_state(params, optimizer, jax.random.fold_in(dropout_key, 1))

    rng = jax.random.key(seed)
    boxed = jax.eval_shape(init_params, rng)
    param_shardings = logical_shardings(boxed, mesh, rules)
    abstract = jax.eval_shape(init_fn, rng)
    replicated = NamedSharding(mesh, PartitionSpec())
    state_shardings = TrainState(
        step=replicated,
        params=param_shardings,
        opt_state=optax.tree_map_params(
            optimizer,
            lambda _, sharding: sharding,
            abstract.opt_state,
            param_shardings,
            transform_non_params=lambda _: replicated,
        ),
        rng=replicated,
    )
    if materialize:
        state = jax.jit(init_fn, out_shardings=state_shardings)(rng)
    else:
        state = jax.tree.map(
            lambda value, where: jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=where),
            abstract,
            state_shardings,
        )
    batches = batch_sharding(mesh, rules)
    step_fns = [
        jax.jit(  # compiled when its stage is first reached
            under_mesh(mesh, rules, step),
            in_shardings=(state_shardings, batches),
            out_shardings=(state_shardings, replicated),
            donate_argnums=0,
        )
        for step in steps
    ]
    restart = jax.jit(
        lambda state: state.replace(opt_state=restart_moments(state.opt_state)),
        in_shardings=(state_shardings,),
        out_shardings=state_shardings,
        donate_argnums=0,
    )
    return Training(mesh, state, state_shardings, batches, step_fns, restart)
