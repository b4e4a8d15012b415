"""PyTorch peer for the step benchmark: `python -m xlpretrain.bench --peer`.

Our tokens/s means little on its own; next to the step a user would otherwise run, the Hugging
Face masked LM of its backbone (`XLMRobertaForMaskedLM`, `ModernBertForMaskedLM`,
`BertForMaskedLM`: `Backbone.hf_peer`, built from the `config.json` `convert to-hf` writes) with
PyTorch's fused (SDPA) attention and AdamW, it says whether the JAX stack pays off. A model
option the HF class has no place for (VECO's plug-in, relative positions, language embeddings)
fails each mode with the option named, as the export does. The peer runs the plan's model
shape on the benchmark's rows (full rows `<s> … </s>`, `data.batch_size` × `data.max_length`,
the MMLM masking rate), eager and under `torch.compile`, with our numerics policy (bf16 compute
under autocast, fp32 parameters). Unlike ours, HF applies the LM head to every token, not only
to the predicted ones: that is part of what the comparison measures.

torch and transformers are imported only when the peer runs, so the package works without them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from xlpretrain import backbones
from xlpretrain.core.errors import require
from xlpretrain.data.pretraining.streams import max_predictions
from xlpretrain.model.config import ModelConfig
from xlpretrain.training.plan import RunPlan

MODES = ("eager", "compile")
BOS, EOS, FIRST_REGULAR = 0, 2, 4  # as step.synthetic_batch: a SentencePiece layout


def peer_benchmark(
    plan: RunPlan,
    steps: int,
    warmup: int,
    modes: Sequence[str] = MODES,
) -> dict:
    """Times HF's training step on the plan's shapes once per mode; a mode that fails (a
    missing compiler for `torch.compile`, out of memory) reports its error so the others run."""
    torch = require("torch", "--peer")
    transformers = require("transformers", "--peer")
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise ValueError(f"unknown peer modes {unknown}; known: {list(MODES)}")

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows, length, seed = plan.batch_size, plan.max_length, plan.loop.seed
    mask_rate = plan.mask_rates.mono
    batch = _synthetic_batch(rows, length, mask_rate, plan.model.vocab_size, seed, device)
    results = {}
    for mode in modes:
        try:
            results[mode] = _time_mode(plan.model, seed, mode, batch, device, steps, max(warmup, 1))
        except Exception as error:  # any failure is this mode's result, not the run's
            results[mode] = {"error": f"{type(error).__name__}: {error}"}
    return {
        "peer": backbones.of(plan.model).peer_name,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "batch_size": rows,
        "max_length": length,
        "dtype": plan.model.dtype,
        "modes": results,
    }


def _synthetic_batch(
    rows: int, length: int, mask_rate: float, vocab_size: int, seed: int, device
) -> dict:
    """The JAX benchmark's rows in HF's form: labels hold the original id at the predicted
    positions and -100 (ignored by the loss) elsewhere, so both losses cover the same tokens."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(FIRST_REGULAR, vocab_size - 1, (rows, length), generator=generator)
    input_ids[:, 0], input_ids[:, -1] = BOS, EOS
    slots = max_predictions(length, mask_rate)
    order = torch.rand((rows, length - 2), generator=generator).argsort(dim=1)
    chosen = 1 + order[:, :slots]  # regular positions only, never <s> or </s>
    labels = torch.full_like(input_ids, -100)
    labels.scatter_(1, chosen, input_ids.gather(1, chosen))
    batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}
    return {name: value.to(device) for name, value in batch.items()}


def _time_mode(
    encoder: ModelConfig, seed: int, mode: str, batch: dict, device, steps: int, warmup: int
) -> dict:
    """One mode from a fresh seeded model and optimizer, so modes do not warm each other up."""
    import torch

    torch.manual_seed(seed)
    # float32 parameters: the master weights
    model = backbones.of(encoder).hf_peer(encoder).to(device)
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01
    )
    forward = torch.compile(model) if mode == "compile" else model
    bf16 = encoder.dtype == "bfloat16"

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = forward(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(warmup):  # compilation, autotuning, allocator and optimizer state
        step()
    synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    synchronize()
    step_s = (time.perf_counter() - start) / steps
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    return {
        "step_time_s": step_s,
        "tokens_per_s": batch["input_ids"].numel() / step_s,
        "peak_memory_gib": peak,
        "final_loss": float(loss),
    }


def format_peer(ours_tokens_per_s: float, peer: dict) -> str:
    """One line per mode with our speed-up over the peer: the number the comparison is for."""
    lines = []
    for mode, result in peer["modes"].items():
        if "error" in result:  # first line only: compiler errors run to pages
            lines.append(f"peer ({mode}): failed: {result['error'].splitlines()[0]}")
            continue
        memory = result["peak_memory_gib"]
        lines.append(
            f"peer ({mode}): {result['tokens_per_s']:,.0f} tokens/s, "
            f"peak memory {f'{memory:.2f} GiB' if memory is not None else 'n/a'}, "
            f"ours / peer ({mode}): {ours_tokens_per_s / result['tokens_per_s']:.2f}x"
        )
    return "\n".join(lines)
