"""Ahead-of-time sizing: `python -m xlpretrain.aot --config configs/X.py
(--devices N | --topology v5p:4x4x4 | --topology h100:8) [--mesh DATA,FSDP,TENSOR] [--stage N]
[--json]`,
and the fused attention's kernels alone: `python -m xlpretrain.aot --kernels h100 [--tiles S]`.

Compiles the config's train step (its last stage, or stage `--stage N` as the log numbers them
from 1: a staged run compiles one step per stage, and a stage of longer rows — context
extension — may need more memory) for a mesh without that hardware — the state
and batch abstract (`setup_training(materialize=False)`), nothing allocated — and reports
per-device memory: parameters and optimizer state (from their shardings), and XLA's own account
of the compiled program (arguments, outputs, temporaries: activations and workspace).

- `--devices N`: N fake CPU devices. The program is XLA:CPU's, so fusion and layouts differ from
  a GPU's or TPU's: the numbers size a mesh, they do not replace a run on the device.
- `--topology NAME`: a Cloud TPU slice (`jax.experimental.topologies`, e.g. `v5p:2x2x2` is 8
  chips, `v4:2x2x2`), compiled by XLA:TPU itself on this host, which needs only `libtpu`
  (`pip install -e ".[tpu]"`), not a TPU; attention `auto` then compiles the splash kernel.
  Or GPUs (`h100:8` is one host of 8, `h200:2x8` two hosts;
  `xlpretrain.parallel.gpu_targets`), compiled by XLA:GPU, Triton kernels and ptxas included,
  with the CUDA plugin and ptxas
  (`pip install -e ".[gpu-compile]"`), not a GPU; `auto` then compiles the Triton kernel.
- `--kernels GPU`: the forward and gradient of the fused attention for every case CI checks
  (`gpu_compile.checked_cases`), compiled for that GPU, as a markdown table of each kernel's
  registers, spills and shared memory; `--tiles` (`flash.Tiles.parse`) tries other tiles.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from xlpretrain.bench import lowering
from xlpretrain.core import programs

if TYPE_CHECKING:  # JAX is imported once the environment names its devices (`main`)
    from xlpretrain.training.plan import RunPlan

GIB = 2**30
# Memory per device (GiB as the vendors state it, in GB → GiB).
DEVICE_MEMORY_GIB = {
    "H100 80GB": 80e9 / GIB,
    "H200 141GB": 141e9 / GIB,
    "A100 40GB": 40e9 / GIB,
    "A100 80GB": 80e9 / GIB,
    "TPU v4 (32 GiB)": 32.0,
    "TPU v5e (16 GiB)": 16.0,
    "TPU v5p (95 GiB)": 95.0,
    "TPU v6e (32 GiB)": 32.0,
}


def _shard_bytes(tree) -> int:
    """Bytes one device holds of an abstract tree with shardings (the largest shard)."""
    import jax

    total = 0
    for leaf in jax.tree.leaves(tree):
        shape = leaf.sharding.shard_shape(leaf.shape) if leaf.sharding is not None else leaf.shape
        total += math.prod(shape) * leaf.dtype.itemsize
    return total


def size_step(plan: RunPlan, devices: int | list, stage: int | None = None) -> dict:
    """Per-device memory of the train step of the plan's stage `stage` (0-based; default the
    last) compiled for `devices` (`bench.lowering.lower_step`)."""
    import jax

    step = lowering.lower_step(plan, devices, stage)
    lowered, training, batch, devices = step.lowered, step.training, step.batch, step.devices
    platform, index, mesh = step.platform, step.index, step.training.mesh
    plan = plan.sized(workdir=None)
    refused, kernels = False, None
    try:
        if platform == "gpu":  # and how ptxas built the fused attention's kernels
            from xlpretrain.model.kernels import gpu_compile

            compiled, kernels = gpu_compile.compile_with_report(lowered)
        else:
            compiled = lowered.compile()
        analysis = compiled.memory_analysis()
        arguments = analysis.argument_size_in_bytes
        outputs_not_donated = analysis.output_size_in_bytes - analysis.alias_size_in_bytes
        temp = analysis.temp_size_in_bytes
    except jax.errors.JaxRuntimeError as error:
        # XLA:TPU refuses a program larger than the chip, saying how much it needs.
        needed = re.search(r"HLO temporaries \(([\d.]+)G\)", str(error))
        if "RESOURCE_EXHAUSTED" not in str(error) or needed is None:
            raise
        temp, refused = float(needed.group(1)) * 1e9, True
        arguments = _shard_bytes((training.state, batch))
        outputs_not_donated = 0
    peak = arguments + outputs_not_donated + temp
    kind = getattr(devices[0], "device_kind", platform)
    return {
        "devices": len(devices),
        "device_kind": kind,
        "mesh": dict(mesh.shape),
        "stage": index + 1,
        "objectives": sorted(plan.stages[index].weights),
        # Global rows × tokens per row of each objective: the batch compiled for.
        "rows": {
            name: [fields["input_ids"][0][0], fields["input_ids"][0][1]]
            for name, fields in sorted(plan.batch_shapes(index).items())
        },
        "parameters_gib": _shard_bytes(training.state.params) / GIB,
        "optimizer_gib": _shard_bytes(training.state.opt_state) / GIB,
        "batch_gib": _shard_bytes(batch) / GIB,
        "arguments_gib": arguments / GIB,
        "temporaries_gib": temp / GIB,
        "outputs_not_donated_gib": outputs_not_donated / GIB,
        "peak_gib": peak / GIB,
        "fits": {name: peak / GIB <= memory for name, memory in DEVICE_MEMORY_GIB.items()},
        "kernels": None if kernels is None else [dataclasses.asdict(k) for k in kernels],
        "note": f"XLA:TPU refused to compile for {kind}: its temporaries exceed the chip's memory"
        if refused
        else f"compiled by XLA:{'TPU' if platform == 'tpu' else 'GPU'} for {kind}"
        if platform in ("tpu", "gpu")
        else "XLA:CPU program on fake devices; a GPU/TPU compile differs in fusion and layout",
    }


def kernel_table(gpu: str, tiles_spec: str = "") -> Iterator[str]:
    """Markdown rows: each kernel of each checked case as ptxas built it for ``gpu``."""
    import jax.numpy as jnp

    from xlpretrain.model.kernels import flash, gpu_compile

    yield "| case | kernel | tile | registers | spill stores | shared memory |"
    yield "| --- | --- | --- | --- | --- | --- |"
    for case in gpu_compile.checked_cases():
        default = flash.default_tiles(jnp.dtype(case.dtype), case.head_dim)
        tiles = flash.Tiles.parse(tiles_spec, default) if tiles_spec else None
        used = (tiles or default).fitted(case.length, case.length)
        _, reports = gpu_compile.compile_for_gpu(case.gradient(tiles), case.abstract_args(), gpu)
        for r in reports:
            tile = getattr(used, r.name.strip("_").removesuffix("_kernel"))
            yield (f"| {case} | {r.name} | {tile} | {r.registers} | {r.spill_stores} B | "
                   f"{r.shared_memory // 1024} KiB |")  # fmt: skip


def format_report(report: dict) -> str:
    mesh = " × ".join(f"{axis}={size}" for axis, size in report["mesh"].items())
    lines = [
        f"{report['devices']} devices ({report['device_kind']}), mesh {mesh}, stage "
        f"{report['stage']}: "
        + ", ".join(f"{n} {rows} × {length}" for n, (rows, length) in report["rows"].items())
        + " (global rows × tokens)",
        f"per device: parameters {report['parameters_gib']:.2f} GiB, optimizer state "
        f"{report['optimizer_gib']:.2f} GiB, batch {report['batch_gib']:.3f} GiB",
        f"compiled step: arguments {report['arguments_gib']:.2f} GiB + temporaries "
        f"(activations, workspace) {report['temporaries_gib']:.2f} GiB + new outputs "
        f"{report['outputs_not_donated_gib']:.2f} GiB = peak {report['peak_gib']:.2f} GiB",
        "fits: " + ", ".join(f"{n} {'yes' if ok else 'NO'}" for n, ok in report["fits"].items()),
        *(
            f"kernel {k['name']}: {k['registers']} registers, {k['spill_stores']} B spilled, "
            f"{k['shared_memory'] / 1024:.0f} KiB shared memory"
            for k in report["kernels"] or ()
        ),
        f"({report['note']})",
    ]
    return "\n".join(lines)


def _mesh_argument(text: str) -> tuple[int, int, int]:
    try:
        data, fsdp, tensor = (int(part) for part in text.split(","))
    except ValueError:
        message = f"expected DATA,FSDP,TENSOR, e.g. 2,4,1, got {text!r}"
        raise argparse.ArgumentTypeError(message) from None
    return data, fsdp, tensor


def main(argv: list[str] | None = None) -> None:
    parser = programs.ArgumentParser(prog="python -m xlpretrain.aot", description=__doc__)
    parser.add_argument("--config", help="configs/NAME.py[:ARG]")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--kernels", metavar="GPU", help="the fused kernels alone, e.g. h100")
    parser.add_argument("--tiles", default="", help="--kernels: flash tiles, e.g. dq=64x64:w8")
    target.add_argument("--devices", type=int, help="fake CPU devices of the target mesh")
    target.add_argument(
        "--topology", help="TPU or GPU topology to compile for, e.g. v5p:2x2x2 or h100:8"
    )
    parser.add_argument(
        "--mesh",
        type=_mesh_argument,
        help="DATA,FSDP,TENSOR (one may be -1); default: the config's",
    )
    parser.add_argument(
        "--stage", type=int, help="the stage whose step to size, from 1 (default: the last)"
    )
    parser.add_argument("--json", action="store_true")
    args, overrides = parser.parse_known_args(argv)
    # Before JAX starts: this host's accelerators are not the target; the CPU backend is the
    # default (with N fake devices for --devices), a TPU topology is compiled for by libtpu.
    if args.devices:
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "")
            + f" --xla_force_host_platform_device_count={args.devices}"
        )
    os.environ["JAX_PLATFORMS"] = "cpu"
    # Compiling touches no TPU, so two sizing runs (or one beside a test) may share libtpu.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    if args.kernels:
        for row in kernel_table(args.kernels, args.tiles):
            print(row, flush=True)
        return
    if not args.config:
        parser.error("--config is required with --devices or --topology")
    from absl import flags
    from ml_collections import config_flags

    from xlpretrain.training import cli
    from xlpretrain.training.plan import resolve

    config_flags.DEFINE_config_file("config", None, "Config file.")
    cli.parse_flags([sys.argv[0], f"--config={args.config}", *overrides])
    cfg = flags.FLAGS.config
    if args.mesh:
        cfg.mesh.data, cfg.mesh.fsdp, cfg.mesh.tensor = args.mesh
    plan = resolve(cfg)
    if args.stage is not None and not 1 <= args.stage <= len(plan.stages):
        parser.error(f"--stage {args.stage}: the run has {len(plan.stages)} stage(s), from 1")
    devices = lowering.topology_devices(args.topology) if args.topology else args.devices
    report = size_step(plan, devices, None if args.stage is None else args.stage - 1)
    print(json.dumps(report) if args.json else format_report(report))


if __name__ == "__main__":
    programs.run(main)
