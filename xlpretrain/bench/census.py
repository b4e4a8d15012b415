"""`python -m xlpretrain.bench --census TARGET --config ...`: what the training step costs,
counted on a CPU from the program compiled for TARGET, beside a plain reference step.

TARGET is what `xlpretrain.aot` compiles for (`bench.lowering`): a GPU topology (`h100`,
`h100:8`; XLA:GPU deviceless, which needs the `gpu-compile` extra), a TPU topology
(`v5p:2x2x2`; libtpu), or `cpu[:N]` (XLA:CPU on N fake devices: the tests' target; its
fusion differs from a GPU's).
The framework's step (the config's last stage) and the reference (`bench.reference_step`: the
same rows, predictions, attention implementation and hidden dropout, as a plain script) are
compiled for the same devices; each is counted from its optimized HLO (`bench.hlo_count`):
FLOPs (matmuls and attention, each loop body times its trip count), memory traffic, kernel
launches, random-bit kernels and their elements, f32↔bf16 converts, and XLA's temporary and
peak memory. Model FLOPs by formula (`objectives.flops`) say what the step must do.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from typing import Any

import jax
from jax.sharding import NamedSharding, PartitionSpec

from xlpretrain.bench import hlo_count, lowering, reference_step
from xlpretrain.objectives.flops import StepShape
from xlpretrain.training.plan import RunPlan

GIB = 2**30
# The reference's attention for the framework's: the fused kernel's plain peer is cuDNN's.
REFERENCE_ATTENTION = {"xla": "xla", "cudnn": "cudnn", "pallas": "cudnn", "splash": "xla"}
# The framework's step must have these batch fields for the reference to run on its rows.
# Where each step's MLM head is, by source op name: the framework's `MaskedLM.mlm_nll`.
HEAD_SCOPES = {"xlpretrain": "mlm_nll", "reference": reference_step.HEAD_SCOPE}
REFERENCE_FIELDS = ("input_ids", "positions", "segment_ids", "pred_positions", "pred_labels",
                    "pred_weights")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class StepCensus:
    """One compiled step, counted."""

    name: str
    counts: hlo_count.Counts
    temporaries_bytes: int
    peak_bytes: int  # arguments + outputs not donated + temporaries, per device
    hlo: str
    head: hlo_count.Counts  # the MLM head's share of `counts`

    def row(self) -> dict[str, float]:
        c = self.counts
        return {
            "compiled_tflop": c.flops / 1e12,
            "matmul_tflop": c.matmul_flops / 1e12,
            "attention_tflop": c.attention_flops / 1e12,
            "traffic_gib": c.traffic_bytes / GIB,
            "launches": c.launches,
            "temporaries_gib": self.temporaries_bytes / GIB,
            "peak_gib": self.peak_bytes / GIB,
            "random_launches": c.random_launches,
            "random_elements_m": c.random_elements / 1e6,
            "converts_f32_to_bf16_m": c.converts_f32_to_bf16 / 1e6,
            "converts_bf16_to_f32_m": c.converts_bf16_to_f32 / 1e6,
        }

    def head_row(self) -> dict[str, float]:
        """The head's FLOPs, traffic and launches (memory is the whole step's)."""
        c = self.head
        return {
            "compiled_tflop": c.flops / 1e12,
            "traffic_gib": c.traffic_bytes / GIB,
            "launches": c.launches,
            "converts_f32_to_bf16_m": c.converts_f32_to_bf16 / 1e6,
            "converts_bf16_to_f32_m": c.converts_bf16_to_f32 / 1e6,
        }


def target_devices(target: str) -> list:
    """The devices to compile for: `cpu[:N]`, or a GPU or TPU topology
    (`lowering.topology_devices`)."""
    kind, _, count = target.partition(":")
    if kind == "cpu":
        count = int(count or 1)
        if jax.device_count("cpu") < count:
            raise ValueError(f"--census {target}: only {jax.device_count('cpu')} CPU devices")
        return jax.devices("cpu")[:count]
    return lowering.topology_devices(target)


def counted(name: str, lowered) -> StepCensus:
    """Compiles `lowered` and counts it."""
    compiled = lowered.compile()
    memory = compiled.memory_analysis()
    peak = (
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        - memory.alias_size_in_bytes
        + memory.temp_size_in_bytes
    )
    text = compiled.as_text()
    head = hlo_count.count(text, HEAD_SCOPES[name])
    return StepCensus(name, hlo_count.count(text), memory.temp_size_in_bytes, peak, text, head)


def reference_model(plan: RunPlan, platform: str) -> reference_step.ReferenceModel | None:
    """The plain step of the plan's model, or None where it is not XLM-R's architecture."""
    model = plan.model
    if model.layer_type != "post_ln" or model.relative_position != "none":
        return None
    impl = model.attention_impl
    if impl == "auto":
        impl = {"gpu": "pallas", "tpu": "splash"}.get(platform, "xla")
    return reference_step.ReferenceModel(
        layers=model.num_layers,
        hidden=model.hidden_size,
        heads=model.num_heads,
        mlp=model.mlp_dim,
        vocab=model.vocab_size,
        table_rows=model.padded_vocab_size,
        max_positions=model.max_positions,
        dtype=model.dtype,
        attention=REFERENCE_ATTENTION[impl] if platform == "gpu" else "xla",
        dropout=model.dropout_rate,
        layer_norm_eps=model.layer_norm_eps,
    )


def lower_reference(plan: RunPlan, model: reference_step.ReferenceModel, fields: dict, devices):
    """The reference step lowered for `devices`: the batch split over all of them, the state
    replicated, donated."""
    mesh = jax.sharding.Mesh(devices, ("batch",))
    rows = NamedSharding(mesh, PartitionSpec("batch"))
    replicated = NamedSharding(mesh, PartitionSpec())
    tx = reference_step.optimizer(plan.optim.clip_norm, plan.optim.weight_decay)
    state = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=replicated),
        reference_step.abstract_state(model, tx),
    )
    batch = {
        key: jax.ShapeDtypeStruct(fields[key].shape, fields[key].dtype, sharding=rows)
        for key in REFERENCE_FIELDS
    }
    step = jax.jit(reference_step.train_step(model, tx), donate_argnums=0)
    return step.lower(state, batch)


def model_flops(plan: RunPlan, stage: int) -> float:
    """The step's model FLOPs by formula, every prediction slot predicted."""
    streams = plan.stage_streams[stage]
    total = 0.0
    for name, fields in plan.batch_shapes(stage).items():
        (rows, length), _ = fields["input_ids"]
        slots = fields["pred_weights"][0] if "pred_weights" in fields else (0,)
        shape = StepShape(tokens=rows * length, length=length, predictions=math.prod(slots))
        total += plan.objectives[name].flops(plan.contexts[name], streams[name], shape)
    return total


def census(plan: RunPlan, target: str) -> dict[str, Any]:
    """Both steps compiled for `target` and counted; the report `format_census` prints."""
    devices = target_devices(target)
    lowered = lowering.lower_step(plan, devices)
    plan = plan.sized(workdir=None)
    steps = [counted("xlpretrain", lowered.lowered)]
    reference = reference_model(plan, lowered.platform)
    fields = next(iter(lowered.batch.values()))
    note = None
    if reference is None:
        note = "no reference: the plain step is XLM-R's architecture (post-LN, absolute positions)"
    elif not all(key in fields for key in REFERENCE_FIELDS):
        note = "no reference: the step's first objective has no MLM prediction slots"
    else:
        steps.append(counted("reference", lower_reference(plan, reference, fields, devices)))
    rows = {s.name: s.row() for s in steps}
    rows |= {f"{s.name} LM head": s.head_row() for s in steps}
    report = {
        "target": target,
        "device_kind": getattr(devices[0], "device_kind", lowered.platform),
        "devices": len(devices),
        "rows": {name: list(f["input_ids"].shape) for name, f in lowered.batch.items()},
        "dtype": plan.model.dtype,
        "attention": plan.model.attention_impl,
        "reference_attention": reference.attention if reference else None,
        "dropout": plan.model.dropout_rate,
        "attention_dropout": plan.model.attention_dropout_rate,
        "model_tflop": model_flops(plan, lowered.index) / 1e12,
        "steps": rows,
        "note": note,
    }
    if "reference" in rows:
        ours, theirs = rows["xlpretrain"], rows["reference"]
        report["ratio"] = {
            key: ours[key] / theirs[key] if theirs[key] else None
            for key in ("compiled_tflop", "traffic_gib", "launches", "peak_gib")
        }
    report["_hlo"] = {s.name: s.hlo for s in steps}
    return report


def write(report: dict[str, Any], out: str | None, hlo_dir: str | None) -> None:
    """`out/census.json` (the report without the HLO) and `hlo_dir/<step>.hlo.txt`."""
    hlo = report.pop("_hlo")
    if hlo_dir:
        folder = pathlib.Path(hlo_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in hlo.items():
            (folder / f"{name}.hlo.txt").write_text(text)
    if out:
        folder = pathlib.Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "census.json").write_text(json.dumps(report, indent=2))


COLUMNS = (
    ("compiled_tflop", "TFLOP", "{:.2f}"),
    ("traffic_gib", "traffic GiB", "{:.1f}"),
    ("launches", "launches", "{:,}"),
    ("temporaries_gib", "temp GiB", "{:.2f}"),
    ("peak_gib", "peak GiB", "{:.2f}"),
    ("random_launches", "rng kernels", "{:,}"),
    ("random_elements_m", "rng M elem", "{:.0f}"),
    ("converts_f32_to_bf16_m", "f32→bf16 M", "{:.0f}"),
    ("converts_bf16_to_f32_m", "bf16→f32 M", "{:.0f}"),
)


def format_census(report: dict[str, Any]) -> str:
    """The report as a markdown table, a step a row, the ratio last."""
    rows = "; ".join(f"{name} {r} × {length}" for name, (r, length) in report["rows"].items())
    lines = [
        f"census for {report['devices']} × {report['device_kind']} ({report['target']}): "
        f"{rows}, {report['dtype']}, attention {report['attention']} (reference: "
        f"{report['reference_attention'] or '-'}), dropout {report['dropout']} / attention "
        f"{report['attention_dropout']}; model FLOPs by formula {report['model_tflop']:.2f} TFLOP",
        "",
        "| step | " + " | ".join(title for _, title, _ in COLUMNS) + " |",
        "| --- |" + " ---: |" * len(COLUMNS),
    ]
    for name, row in report["steps"].items():
        cells = [fmt.format(row[key]) if key in row else "" for key, _, fmt in COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if "ratio" in report:
        cells = [
            f"{report['ratio'][key]:.2f}×" if report["ratio"].get(key) else ""
            for key, _, _ in COLUMNS
        ]
        lines.append("| ratio | " + " | ".join(cells) + " |")
    if report["note"]:
        lines += ["", report["note"]]
    return "\n".join(lines)
