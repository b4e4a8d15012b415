"""Where a compiled step's device time goes: a `jax.profiler` trace read into its ops of most
time, each with its share and its source (the HLO instruction's ``op_name`` metadata).

`jax.profiler.trace(DIR)` writes ``DIR/plugins/profile/<time>/<host>.trace.json.gz`` (Chrome's
trace-event JSON; no tensorboard-plugin-profile or xprof needed to read it) beside
``<host>.xplane.pb``, which `jax.profiler.ProfileData` reads into the same events where a JAX
writes no JSON (`load_profile`). Every event XLA
runs for an HLO instruction carries ``args.hlo_op`` (the instruction's name) and
``args.hlo_module``: on a GPU the kernels on the device's stream lines (process
``/device:GPU:N``), on a CPU the thunks on the host's XLA threads. `top_ops` keeps the events
of one module: the device's where the trace has any (a GPU's host threads also name the ops
they launch; those are not device time), else the host's; on a device, the kernels on its
``Stream ...`` lines, else (a trace without them) its derived ``XLA Ops`` line, else every line
but the other derived ones: no kernel is counted twice. It sums their durations per
instruction and names each instruction's source from the compiled step's optimized HLO
(``compiled.as_text()``, `hlo_ops`): the ``metadata={op_name=...}`` JAX wrote, the fused
computation's root's where a fusion has none.

A share is of the module's summed op time, the "device time" here: kernels that overlap on
several streams are each counted whole, so it can exceed the step's wall time.
"""

from __future__ import annotations

import gzip
import json
import pathlib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from xlpretrain.bench import hlo_count

TOP_OPS = 25
# A device's lines: its streams' kernels; the derived lines some tools add, which repeat them
# (an "XLA Ops" event spans its op's kernels, gaps included): "XLA Ops" counted only where
# there are no stream lines, the others never.
STREAM_LINE, XLA_OPS_LINE = "Stream", "XLA Ops"
DERIVED_LINES = ("XLA Modules", "Steps", "Framework Ops", "Framework Name Scope", "Source code")

_TARGET = re.compile(r'custom_call_target="([^"]*)"')
_FUSION_KIND = re.compile(r"kind=(k\w+)")


def hlo_ops(hlo_text: str) -> tuple[str, dict[str, dict[str, str]]]:
    """The module's name and, per instruction name (unique in a module), its ``kind`` (opcode;
    a fusion's kind, a custom call's target) and ``source``: its ``op_name`` metadata, or for a
    fusion without one its fused computation's root's ("" where neither has one)."""
    module = re.match(r"HloModule ([^\s,]+)", hlo_text)
    computations, _ = hlo_count.parse_module(hlo_text)
    ops: dict[str, dict[str, str]] = {}
    for computation in computations.values():
        for instruction in computation.instructions:
            kind, source = instruction.opcode, instruction.op_name()
            if kind == "custom-call" and (target := _TARGET.search(instruction.attributes)):
                kind = f"custom-call {target.group(1)}"
            elif kind == "fusion" and (fusion := _FUSION_KIND.search(instruction.attributes)):
                kind = f"fusion {fusion.group(1)}"
                fused = computations.get(instruction.attribute("calls") or "")
                if not source and fused is not None:
                    source = fused.root.op_name()
            ops[instruction.name] = {"kind": kind, "source": source}
    return (module.group(1) if module else ""), ops


def trace_file(trace_dir: str | pathlib.Path) -> pathlib.Path:
    """The newest trace `jax.profiler.trace(trace_dir)` wrote: its ``*.trace.json.gz``, else
    its ``*.xplane.pb``."""
    for pattern in ("*.trace.json.gz", "*.xplane.pb"):
        found = sorted(
            pathlib.Path(trace_dir).glob(f"plugins/profile/*/{pattern}"),
            key=lambda path: path.stat().st_mtime,
        )
        if found:
            return found[-1]
    raise FileNotFoundError(f"no plugins/profile/*/*.trace.json.gz or .xplane.pb in {trace_dir}")


def load_trace(path: str | pathlib.Path) -> dict:
    """A trace as Chrome's trace-event JSON: read, or made from an ``.xplane.pb``
    (`xplane_trace`)."""
    if str(path).endswith(".xplane.pb"):
        return xplane_trace(path)
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as file:
        return json.load(file)


def xplane_trace(path: str | pathlib.Path) -> dict:
    """An ``.xplane.pb`` (`jax.profiler.ProfileData`) as the trace-event JSON `op_events` reads:
    a process per plane, a thread per line, each event with its stats as ``args`` (µs)."""
    from jax.profiler import ProfileData

    events: list[dict] = []
    for pid, plane in enumerate(ProfileData.from_file(str(path)).planes):
        events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": plane.name}})
        for tid, line in enumerate(plane.lines):
            name = {"name": line.name}
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": name})
            for event in line.events:
                events.append(
                    {"ph": "X", "pid": pid, "tid": tid, "name": event.name,
                     "ts": event.start_ns / 1e3, "dur": event.duration_ns / 1e3,
                     "args": dict(event.stats)}
                )  # fmt: skip
    return {"traceEvents": events}


def _module_matches(event_module: str, module: str) -> bool:
    # Some runtimes append the program's id: "jit_step(42)".
    return not module or event_module == module or event_module.startswith(module + "(")


def op_events(trace: Mapping, module: str = "") -> tuple[list[dict], str]:
    """The trace's events of ``module``'s HLO ops (all modules' when ``module`` is "") that
    count as device time, and where they came from: "device" or "host" (module docstring)."""
    processes, threads = {}, {}
    for event in trace.get("traceEvents", []):
        if event.get("ph") == "M" and event.get("name") == "process_name":
            processes[event.get("pid")] = event.get("args", {}).get("name", "")
        elif event.get("ph") == "M" and event.get("name") == "thread_name":
            threads[(event.get("pid"), event.get("tid"))] = event.get("args", {}).get("name", "")
    ops = [
        event
        for event in trace.get("traceEvents", [])
        if event.get("ph") == "X"
        and "hlo_op" in event.get("args", {})
        and _module_matches(str(event["args"].get("hlo_module", "")), module)
    ]
    device = [e for e in ops if processes.get(e.get("pid"), "").startswith("/device:")]
    if not device:
        return ops, "host"
    line = {id(e): threads.get((e.get("pid"), e.get("tid")), "") for e in device}
    for keep in (
        lambda name: name.startswith(STREAM_LINE),
        lambda name: name == XLA_OPS_LINE,
        lambda name: name not in DERIVED_LINES,
    ):
        if kept := [e for e in device if keep(line[id(e)])]:
            return kept, "device"
    return [], "device"


def top_ops(trace: Mapping, hlo_text: str, steps: int, count: int = TOP_OPS) -> dict[str, Any]:
    """The ``count`` HLO ops of most summed event time in ``trace`` (``steps`` runs of the
    module ``hlo_text`` is), longest first: per op its name, kind, ms a step, share of the
    module's op time, events (kernel launches) a step and source; with the module's op time a
    step, how many ops it has, and whether the events were the device's or the host's."""
    module, ops = hlo_ops(hlo_text)
    events, origin = op_events(trace, module)
    if not events and module:  # a runtime that names modules otherwise: every module's ops
        events, origin = op_events(trace)
    total_us: dict[str, float] = {}
    launches: dict[str, int] = {}
    for event in events:
        name = event["args"]["hlo_op"]
        total_us[name] = total_us.get(name, 0.0) + float(event.get("dur", 0.0))
        launches[name] = launches.get(name, 0) + 1
    all_us = sum(total_us.values())
    ranked = sorted(total_us, key=lambda name: total_us[name], reverse=True)[:count]
    return {
        "module": module,
        "events_from": origin,
        "steps": steps,
        "device_ms_per_step": all_us / 1e3 / steps,
        "hlo_ops_timed": len(total_us),
        "top_ops": [
            {
                "hlo_op": name,
                "kind": ops.get(name, {}).get("kind", "?"),
                "ms_per_step": total_us[name] / 1e3 / steps,
                "share": total_us[name] / all_us if all_us else 0.0,
                "launches_per_step": launches[name] / steps,
                "source": ops.get(name, {}).get("source", ""),
            }
            for name in ranked
        ],
    }


def profile_compiled(
    compiled: Callable, hlo_text: str, args: Iterable, steps: int, trace_dir: str | pathlib.Path
) -> dict[str, Any]:
    """``steps`` calls of ``compiled`` (a jitted step's AOT-compiled executable: the module
    whose text ``hlo_text`` is; each call's first output is the next call's first argument, as
    a training step's state) under `jax.profiler.trace(trace_dir)`, read by `top_ops`. The
    caller warms it up first: the trace should hold steps, not a compile."""
    import jax

    first, *rest = args
    jax.block_until_ready((first, rest))  # the warm-up's step runs before the trace, not in it
    with jax.profiler.trace(str(trace_dir)):
        for _ in range(steps):
            first, *outputs = compiled(first, *rest)
        jax.block_until_ready((first, outputs))
    path = trace_file(trace_dir)
    return {"trace": str(path), **top_ops(load_trace(path), hlo_text, steps)}


def _cell(text: str, limit: int = 160) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


def markdown_table(result: Mapping) -> list[str]:
    """A `top_ops` result as a Markdown table, longest first, its share of the module's op
    time and the source's last 160 characters (the innermost primitive)."""
    lines = [
        "| # | HLO op | kind | ms / step | share | launches / step | source (`op_name`) |",
        "| ---: | --- | --- | ---: | ---: | ---: | --- |",
    ]
    for rank, op in enumerate(result["top_ops"], 1):
        lines.append(
            f"| {rank} | `{op['hlo_op']}` | {op['kind']} | {op['ms_per_step']:.3f} | "
            f"{op['share']:.1%} | {op['launches_per_step']:g} | "
            f"{_cell(op['source']) or '—'} |"
        )
    return lines
