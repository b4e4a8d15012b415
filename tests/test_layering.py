"""Who may import whom: the library in layers, the command lines on top.

Every `xlpretrain` import in the package (at module level or inside a function) goes down or
sideways, never up; a command line imports the library, never another tool's command line.
docs/architecture.md draws the same layers.
"""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "xlpretrain"

# Lowest first. A module belongs to the longest prefix listed.
LAYERS = (
    ("errors", "programs", "quiet"),
    ("tokenizer", "masks", "sharding", "optim", "metrics", "divergence", "preemption",
     "distributed", "gpu_targets", "checkpoint", "workdir"),
    ("data",),
    ("model",),
    ("objectives",),
    ("config", "convert", "api", "warm_start", "eval", "cli"),
    ("plan", "step"),
    ("evaluation",),
    ("loop",),
    ("trainer", "finetuning"),
)  # fmt: skip
# Command lines, by tool: `python -m xlpretrain.<module>` (bench's suite and micro-benchmarks
# are parts of the bench tool).
TOOLS = {
    "train": ("train",),
    "bench": ("bench", "bench_gpu", "bench_attention", "bench_peer", "bench_store"),
    "aot": ("aot",),
    "masks": ("masks.__main__", "masks.show"),
    "convert": ("convert.__main__",),
    "finetune": ("eval.finetune",),
    "retrieval": ("eval.retrieval",),
    "launch": ("launch",),
}
CLI = {module: tool for tool, modules in TOOLS.items() for module in modules}


def modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(path: pathlib.Path) -> set[str]:
    """The `xlpretrain` modules `path` imports (names relative to the package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    known = modules()
    return {
        name.removeprefix("xlpretrain.")
        for name in found
        if name.startswith("xlpretrain.") and name.removeprefix("xlpretrain.") in known
    }


def rank(module: str) -> int:
    if module in CLI:
        return len(LAYERS)
    matches = [
        (len(prefix), index)
        for index, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    assert matches, f"xlpretrain.{module} is in no layer: add it to LAYERS or TOOLS"
    return max(matches)[1]


def test_every_module_has_a_place():
    for module in modules():
        if module:
            rank(module)


def test_imports_go_down_and_command_lines_do_not_import_each_other():
    wrong = []
    for module, path in modules().items():
        if not module:
            continue
        for target in imports(path):
            if target in CLI and CLI.get(module) != CLI[target]:
                wrong.append(f"{module} imports the command line {target}")
            elif target not in CLI and rank(target) > rank(module):
                wrong.append(f"{module} (layer {rank(module)}) imports {target} ({rank(target)})")
    assert not wrong, "\n".join(sorted(wrong))
