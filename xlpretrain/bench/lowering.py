"""A plan's train step lowered for devices this host need not have: fake CPU devices, a TPU
slice (libtpu) or GPUs (XLA:GPU deviceless), the state and batch abstract. What `aot` sizes
and the census counts."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xlpretrain.training.plan import RunPlan


def topology_devices(name: str) -> list:
    """The devices of topology ``name``, for compiling, not running: a TPU slice ("v5p:2x2x2")
    or GPUs ("h100:8", "h200:2x8")."""
    from jax.experimental import topologies

    from xlpretrain.parallel import gpu_targets

    if name.partition(":")[0] in gpu_targets.GPUS:
        return gpu_targets.topology_devices(name)
    try:
        return list(topologies.get_topology_desc(topology_name=name, platform="tpu").devices)
    except Exception as error:  # noqa: BLE001 - a missing plugin and a bad name both land here
        raise ValueError(
            f"--topology {name}: no TPU topology ({type(error).__name__}: {error}); it needs "
            "libtpu (pip install -e '.[tpu]') and a name like v5p:2x2x2 or v4:2x2x2; GPU "
            f"topologies are {', '.join(gpu_targets.GPUS)} (e.g. h100:8)"
        ) from error


@dataclasses.dataclass(frozen=True)
class LoweredStep:
    """A plan's train step lowered for some devices, with what it was lowered on."""

    lowered: Any  # jax.stages.Lowered
    training: Any  # training.step.Training, its state abstract
    batch: dict
    devices: list
    index: int  # the stage, 0-based

    @property
    def platform(self) -> str:
        return self.devices[0].platform


def lower_step(plan: RunPlan, devices: int | list, stage: int | None = None) -> LoweredStep:
    """The train step of the plan's stage `stage` (0-based; default the last) lowered for
    `devices`: a number of fake CPU devices, or the devices of a TPU or GPU topology
    (`topology_devices`); the state and batch abstract, nothing allocated."""
    import jax

    from xlpretrain import objectives as objectives_lib
    from xlpretrain.training.step import setup_training

    plan = plan.sized(workdir=None)
    if isinstance(devices, int):
        if jax.device_count() < devices:
            raise ValueError(f"--devices {devices}: only {jax.device_count()} devices are visible")
        devices = jax.devices()[:devices]
    platform = devices[0].platform
    index = len(plan.stages) - 1 if stage is None else stage
    model, init_params = objectives_lib.build_model(
        plan.model_config(num_languages=8, kernel_platform=platform), plan.objectives, plan.contexts
    )
    mesh = plan.mesh.make(devices)
    training = setup_training(plan, model, init_params, mesh, materialize=False)
    batch = plan.abstract_batches(index, training.batch_sharding)
    lowered = training.step_fns[index].lower(training.state, batch)
    return LoweredStep(lowered, training, batch, list(devices), index)
