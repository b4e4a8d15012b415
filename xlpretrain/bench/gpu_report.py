"""The GPU suite's results read: ours over the peer, Markdown, and the terminal's summary.

`performance_markdown` writes the suite's `performance.md`: the rows for docs/performance.md's
"Measured → H100" tables, one per model (`measured_rows`), then the profile's tables of each
model's longest ops (`profile_lines`), XLM-R's cuDNN step beside its variants
(`variant_lines`), the kernel check, the tile sweep's registers, spills and times, the attention
table, the input pipeline by worker count, and every unit that did not finish or was skipped,
each with why. It reads only the suite's
records (`suite.json`), so a suite with failed units is reported on a CPU too
(tests/test_bench_gpu.py).
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence

from xlpretrain.bench import peer as bench_peer
from xlpretrain.bench import profile as bench_profile
from xlpretrain.bench.gpu_timings import (
    ATTENTION_IMPLS,
    ATTENTION_LENGTHS,
    ATTENTION_MODEL,
    DEFAULT_PRNG,
    PIPELINE_GOAL,
    PIPELINE_STEPS,
    SHAPES,
    STEP_VARIANTS,
    VARIANT_ATTENTION,
    VARIANT_MODEL,
    peer_unit,
    step_unit,
    variant_unit,
)
from xlpretrain.bench.kernel_check import ATOL, RTOL
from xlpretrain.bench.tile_sweep import SPILL_CASE, TIMED_CASE, sweep_default
from xlpretrain.model.kernels import flash

# Hugging Face's class that is each measured model's peer (its backbone's `hf_peer`).
PEER_CLASSES = {"xlmr": "XLMRobertaForMaskedLM", "mmbert": "ModernBertForMaskedLM"}


def first_record(step: Mapping | None) -> dict | None:
    return step["records"][0] if step and step["records"] else None


def peer_ratios(steps: Mapping[str, dict]) -> dict[str, dict[str, dict[str, float]]]:
    """Our tokens/s over the peer's, per model, attention and peer mode (where both ran)."""
    ratios = {}
    for model in SHAPES:
        for impl in ATTENTION_IMPLS:
            ours = first_record(steps.get(step_unit(model, impl)))
            for mode in bench_peer.MODES:
                theirs = first_record(steps.get(peer_unit(model, mode)))
                run = theirs["modes"].get(mode, {}) if theirs else {}
                if ours and "tokens_per_s" in run:
                    by_impl = ratios.setdefault(model, {}).setdefault(impl, {})
                    by_impl[mode] = ours["tokens_per_s"] / run["tokens_per_s"]
    return ratios


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:160] if text.strip() else "?"


def _failed(step: Mapping | None) -> str:
    return f"{step['status']}: {_first_line(step.get('error', ''))}" if step else "not run"


def _gib(value: float | None) -> str:
    return f"{value:.1f} GiB" if value else "n/a"


def _peer_run(suite: Mapping, model: str, mode: str) -> dict:
    """The result of ``model``'s peer in ``mode``, or ``{"failed": why not}``."""
    step = suite["steps"].get(peer_unit(model, mode))
    record = first_record(step)
    if record is None:
        return {"failed": _failed(step)}
    run = record["modes"][mode]
    return {"failed": f"failed: {_first_line(run['error'])}"} if "error" in run else run


def _ratios(suite: Mapping, model: str, mode: str) -> str:
    """Ours / the peer in ``mode`` for ``model``, per attention: "pallas 1.52x, xla 1.20x"."""
    by_impl = suite["peer_ratio"].get(model, {}).items()
    return ", ".join(f"{impl} {by_mode[mode]:.2f}x" for impl, by_mode in by_impl if mode in by_mode)


def _attention_results(suite: Mapping) -> list[dict]:
    return [
        r
        for length in ATTENTION_LENGTHS
        for r in (first_record(suite["steps"].get(f"attention_{length}")) or {}).get("results", [])
    ]


def shape_text(model: str) -> str:
    """``model``'s measured step: "`mmbert.py:base`, batch 16 × 1,024"."""
    rows, length = SHAPES[model]
    return f"`{model}.py:base`, batch {rows} × {length:,}"


def measured_rows(suite: Mapping, model: str) -> list[str]:
    """Rows for ``model``'s table in docs/performance.md's "Measured → H100"
    (``| what | tokens/s | peak memory | date, versions |``): our step per attention, the peer
    per mode with ours / peer, and for XLM-R (whose heads the micro-benchmark has) the
    attention's masked / unmasked ratios."""
    v, date = suite["versions"], suite["date"][:10]
    ours = f"{date}, {suite['device']}, JAX {v['jax']}, Flax {v['flax']}"
    theirs = f"{date}, {suite['device']}, PyTorch {v['torch']}, transformers {v['transformers']}"
    rows = []
    for impl in ATTENTION_IMPLS:
        what = f"xlpretrain `{model}.py:base`, `attention={impl}`"
        if impl == "pallas":
            what += f', `model.flash_tiles="{suite["flash_tiles"]}"`'
        if impl == "cudnn":
            what += " (attention dropout 0: cuDNN has none)"
        step = suite["steps"].get(step_unit(model, impl))
        result = first_record(step)
        if result is None:
            rows.append(f"| {what} | {_failed(step)} | — | {ours} |")
            continue
        mfu = f" (MFU {result['mfu']:.1%})" if result["mfu"] is not None else ""
        rows.append(
            f"| {what} | {result['tokens_per_s']:,.0f}{mfu} | "
            f"{_gib(result['peak_memory_gib'])} | {ours} |"
        )
    for mode, name in (("eager", "eager"), ("compile", "`torch.compile`")):
        what = f"HF `{PEER_CLASSES[model]}`, {name}"
        run = _peer_run(suite, model, mode)
        if "failed" in run:
            rows.append(f"| {what} | {run['failed']} | — | {theirs} |")
            continue
        ratios = _ratios(suite, model, mode)
        ratios = f"; ours / peer: {ratios}" if ratios else ""
        rows.append(
            f"| {what} | {run['tokens_per_s']:,.0f}{ratios} | "
            f"{_gib(run['peak_memory_gib'])} | {theirs} |"
        )
    return rows + (_attention_rows(suite, ours) if model == ATTENTION_MODEL else [])


def _attention_rows(suite: Mapping, dated: str) -> list[str]:
    results = _attention_results(suite)
    rows = []
    for impl in ATTENTION_IMPLS:
        ratios = "; ".join(
            f"L = {r['length']}: {r['mask']} {r['vs_unmasked']:.2f}x"
            for r in results
            if r["impl"] == impl and r["mask"] in ("camlm", "tlm") and "vs_unmasked" in r
        )
        rows.append(
            f"| attention `camlm` / `tlm` vs unmasked, L = 512 and 2048, `{impl}` | "
            f"{ratios or 'not measured'} | — | {dated} |"
        )
    return rows


def profile_lines(suite: Mapping) -> list[str]:
    """Per profiled model, its op time a step and its longest ops (`bench.profile`)."""
    step = suite["steps"].get("profile")
    if not step or not step["records"]:
        return [_failed(step)]
    lines = []
    for r in step["records"]:
        lines += [
            f"### {shape_text(r['model'])}, `attention={r['attention']}`",
            "",
            f"{r['steps']} steps under `jax.profiler` (`{r['trace']}`): "
            f"{r['device_ms_per_step']:.2f} ms of op time a step on the {r['events_from']}, "
            f"over {r['hlo_ops_timed']} HLO ops of `{r['module']}`; the "
            f"{len(r['top_ops'])} longest, with their share of that time:",
            "",
            *bench_profile.markdown_table(r),
            "",
        ]
    if step["status"] != "ok":
        lines.append(f"The profile did not finish: {_failed(step)}.")
    return lines


def variant_lines(suite: Mapping) -> list[str]:
    """XLM-R's cuDNN step and each variant (`STEP_VARIANTS`), with its tokens/s over the
    step's."""
    name = step_unit(VARIANT_MODEL, VARIANT_ATTENTION)
    base = first_record(suite["steps"].get(name))
    lines = [
        f"| `{name}` with | tokens/s | over `{name}` | peak memory |",
        "| --- | --- | --- | --- |",
    ]
    rows = [(name, f"nothing changed (`train.prng_impl={DEFAULT_PRNG}`)", base)]
    for variant, overrides in STEP_VARIANTS.items():
        what = ", ".join(f"`{key}={value}`" for key, value in overrides.items())
        rows.append(
            (variant_unit(variant), what, first_record(suite["steps"].get(variant_unit(variant))))
        )
    for unit, what, result in rows:
        if result is None:
            lines.append(f"| {what} | {_failed(suite['steps'].get(unit))} | | |")
            continue
        ratio = f"{result['tokens_per_s'] / base['tokens_per_s']:.3f}x" if base else "—"
        lines.append(
            f"| {what} | {result['tokens_per_s']:,.0f} | {ratio} | "
            f"{_gib(result['peak_memory_gib'])} |"
        )
    return lines


def _check_lines(step: Mapping | None) -> list[str]:
    if not step or not step["records"]:
        return [_failed(step)]
    lines = ["| case | max abs error | within tolerance |", "| --- | --- | --- |"]
    for r in step["records"]:
        error = f"{r['max_abs_error']:.2e}" if "max_abs_error" in r else _first_line(r["error"])
        lines.append(f"| {r['case']} | {error} | {'yes' if r['passed'] else '**no**'} |")
    if step["status"] != "ok":
        lines.append(f"\nThe check did not finish: {_failed(step)}.")
    return lines


def sweep_rows(records: Sequence[dict], picked: flash.Tiles) -> list[str]:
    """The register / spill table: each compiled candidate, its time, whether it won."""
    times = {(r["kernel"], r["tiles"]): r for r in records if r["stage"] == "time"}
    rows = [
        "| kernel | tile | registers | spill stores | shared memory | fwd+bwd ms | picked |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    compiled = [r for r in records if r["stage"] == "compile"]
    for r in sorted(compiled, key=lambda r: flash.KERNELS.index(r["kernel"])):
        if "error" in r:
            rows.append(f"| {r['kernel']} | {r['tiles']} | {_first_line(r['error'])} | | | | |")
            continue
        won = "yes" if str(getattr(picked, r["kernel"])) == r["tiles"] else ""
        rows.append(
            f"| {r['kernel']} | {r['tiles']} | {r['registers']} | {r['spill_stores']} B "
            f"| {r['shared_memory'] // 1024} KiB | "
            f"{_sweep_time(r, times.get((r['kernel'], r['tiles'])))} | {won} |"
        )
    return rows


def _sweep_time(compiled: Mapping, timed: Mapping | None) -> str:
    if timed is None:
        return "spills: not timed" if compiled["spill_stores"] else "not timed"
    return f"{timed['fwd_bwd_ms']:.2f}" if "fwd_bwd_ms" in timed else _first_line(timed["error"])


def _sweep_lines(suite: Mapping) -> list[str]:
    step = suite["steps"].get("tile_sweep")
    records = step["records"] if step else []
    picked = next((r for r in records if r["stage"] == "picked"), {})
    timing = ""
    if picked.get("fwd_bwd_ms") and picked.get("default_ms"):
        timing = (
            f": {picked['fwd_bwd_ms']:.2f} ms forward + backward, the default "
            f"{picked['default_ms']:.2f} ms"
        )
    unfinished = "" if step and step["status"] == "ok" else f" The sweep {_failed(step)}."
    return [
        f'Picked `model.flash_tiles="{suite["flash_tiles"]}"`{timing} (default '
        f"`{sweep_default()}`). Registers and spills compiled for {SPILL_CASE}; times at "
        f"{TIMED_CASE}, each candidate beside the default's other kernels.{unfinished}",
        "",
        *sweep_rows(records, flash.Tiles.parse(suite["flash_tiles"])),
    ]


def _attention_lines(suite: Mapping) -> list[str]:
    lines = [
        "| L | mask | impl | ms | vs unmasked | tiles skipped | temp MiB |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for length in ATTENTION_LENGTHS:
        step = suite["steps"].get(f"attention_{length}")
        if first_record(step) is None:
            lines.append(f"| {length} | {_failed(step)} | | | | | |")
    for r in _attention_results(suite):
        if "error" in r:
            lines.append(
                f"| {r['length']} | {r['mask']} | {r['impl']} | {_first_line(r['error'])} | | | |"
            )
            continue
        ratio = f"{r['vs_unmasked']:.2f}x" if "vs_unmasked" in r else "—"
        memory = f"{r['temp_memory_mib']:.0f}" if r["temp_memory_mib"] is not None else "n/a"
        lines.append(
            f"| {r['length']} | {r['mask']} | {r['impl']} | {r['fwd_bwd_ms']:.2f} | "
            f"{ratio} | {r['tiles_skipped']:.0%} | {memory} |"
        )
    return lines


def performance_markdown(suite: Mapping) -> str:
    """``performance.md``: the measured rows per model, then the kernel check, the tile sweep's
    registers, spills and times, the attention table, and every unit that did not finish or
    was skipped."""
    failed = [
        f"- `{name}` {_failed(s)}" for name, s in suite["steps"].items() if s["status"] != "ok"
    ]
    tables = [
        line
        for model in SHAPES
        for line in (
            f"## {shape_text(model)}, bf16, AdamW",
            "",
            "| what | tokens/s | peak memory | date, versions |",
            "| --- | --- | --- | --- |",
            *measured_rows(suite, model),
            "",
        )
    ]
    lines = [
        f"# GPU suite: {suite['device']}, {suite['date']}",
        "",
        "`python -m xlpretrain.bench --suite gpu`. Rows for docs/performance.md's "
        '"Measured → H100" tables:',
        "",
        *tables,
        f"## Profile: the {bench_profile.TOP_OPS} HLO ops of most device time",
        "",
        *profile_lines(suite),
        "",
        f"## `{step_unit(VARIANT_MODEL, VARIANT_ATTENTION)}`: dropout, random bits, the head",
        "",
        *variant_lines(suite),
        "",
        f"## Kernel check: float32 on the GPU against the XLA reference (within {ATOL:g} + "
        f"{RTOL:g} · max |reference| per tensor)",
        "",
        *_check_lines(suite["steps"].get("kernel_check")),
        "",
        "## Tile sweep",
        "",
        *_sweep_lines(suite),
        "",
        "## Attention: forward + backward, batch 8, 12 heads × 64, bf16",
        "",
        *_attention_lines(suite),
        "",
        "## Input pipeline on this host's CPUs",
        "",
        *_pipeline_lines(suite),
        *(["", "## Units that did not finish or were skipped", "", *failed] if failed else []),
    ]
    return "\n".join(lines) + "\n"


def _pipeline_lines(suite: Mapping) -> list[str]:
    step = suite["steps"].get("pipeline_workers")
    records = step["records"] if step else []
    if not records:
        return [_failed(step) if step else "not run"]
    lines = [
        f"`pipeline_workers`: a {records[0]['store_gb']:g} GB synthetic prepared store, MMLM "
        f"rows of 512 tokens, 32 a step, {PIPELINE_STEPS} steps, on {records[0]['cpus']} CPUs; "
        f"the goal is {PIPELINE_GOAL / 1e6:.1f} M row tokens/s a host (8 GPUs at 700 k each).",
        "",
        "| `data.num_workers` | start-up | row tokens/s | goal |",
        "| --- | --- | --- | --- |",
    ]
    for r in records:
        goal = "met" if r["tokens_per_s"] >= PIPELINE_GOAL else "not met"
        lines.append(
            f"| {r['num_workers']} | {r['startup_s']:.2f} s | {r['tokens_per_s']:,.0f} | {goal} |"
        )
    return lines


def summary(suite: Mapping, out_dir: pathlib.Path) -> str:
    """A few lines for the terminal; the files hold the rest."""
    steps = suite["steps"]
    check = steps.get("kernel_check", {}).get("records", [])
    errors = [r["max_abs_error"] for r in check if "max_abs_error" in r]
    lines = [
        f"GPU suite on {suite['device']} ({suite['date']}): {out_dir / 'performance.md'}, "
        f"{out_dir / 'suite.json'}, {out_dir / 'suite.log'}",
        f"kernel check: {sum(r['passed'] for r in check)}/{len(check)} cases within tolerance"
        + (f", max abs error {max(errors):.1e}" if errors else ""),
        f'tile sweep: model.flash_tiles="{suite["flash_tiles"]}"',
    ]
    for model in SHAPES:
        lines.extend(_model_summary(suite, model))
    for r in steps.get("profile", {}).get("records", []):
        top = r["top_ops"][0] if r["top_ops"] else {"hlo_op": "none", "share": 0.0}
        lines.append(
            f"{r['model']} profile: {r['device_ms_per_step']:.2f} ms of op time a step, the "
            f"longest op {top['hlo_op']} ({top['share']:.1%})"
        )
    pipeline = steps.get("pipeline_workers", {}).get("records", [])
    if pipeline:
        rates = ", ".join(f"{r['num_workers']}: {r['tokens_per_s'] / 1e6:.2f} M" for r in pipeline)
        goal = f"goal {PIPELINE_GOAL / 1e6:.1f} M"
        lines.append(f"input pipeline, row tokens/s by data.num_workers: {rates} ({goal})")
    unfinished = [f"{name} ({s['status']})" for name, s in steps.items() if s["status"] != "ok"]
    if unfinished:
        lines.append(f"did not finish: {', '.join(unfinished)} (performance.md says why)")
    return "\n".join(lines)


def _model_summary(suite: Mapping, model: str) -> list[str]:
    """``model``'s step per attention and its peer per mode, one line each."""
    lines = []
    for impl in ATTENTION_IMPLS:
        step = suite["steps"].get(step_unit(model, impl))
        result = first_record(step)
        tokens = f"{result['tokens_per_s']:,.0f} tokens/s" if result else _failed(step)
        lines.append(f"{model} step, attention={impl}: {tokens}")
    for mode in bench_peer.MODES:
        run = _peer_run(suite, model, mode)
        if "failed" in run:
            lines.append(f"{model} peer ({mode}): {run['failed']}")
            continue
        ratios = _ratios(suite, model, mode)
        lines.append(
            f"{model} peer ({mode}): {run['tokens_per_s']:,.0f} tokens/s, ours / peer: {ratios}"
        )
    return lines
