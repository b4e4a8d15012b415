"""Who may import whom: the library in layers, each a package, the programs on top.

Every `xlpretrain` import in the package (at module level or inside a function) goes down or
sideways, never up; no modules import each other in a circle; no module imports a program
(a program imports the library, never another program). docs/architecture.md draws the same
layers (`tests/test_docs.py` checks its table against `LAYERS`).
"""

import ast
import pathlib
import re

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "xlpretrain"

# Lowest first. A module belongs to the longest prefix listed; a package's own order is stated
# where its modules import one another (training's).
LAYERS = (
    ("core",),
    ("parallel", "masks"),
    # The masks CLI's printing and plotting shows a mask on the data's row layout.
    ("data", "masks.show"),
    ("model",),
    # Each family's name, layers and HF model types, which its converter and its declaration
    # both read.
    ("objectives", "families"),
    # XTREME's metrics (evaluate.py's), which the kinds of task score with.
    ("eval.xtreme.answers", "eval.xtreme.score"),
    # The kinds of fine-tuning task: reader rows, head, loss, decoding and metric, per kind,
    # listed once (`tasks.KINDS`): the converters name them and build their modules.
    ("tasks",),
    # Hugging Face machinery and each family's converter, then the backbone declarations that
    # name them, then what dispatches by backbone (the package's `from_hf` / `to_hf`).
    (
        "convert.folder", "convert.hf", "convert.converter", "convert.xlmr", "convert.modernbert",
        "convert.bert", "convert.merging", "convert.seq2seq", "convert.task_workdir",
    ),
    ("backbones",),
    ("convert", "api", "eval"),
    ("training",),  # checkpoints, optimizer, metrics, workdir, warm start, preemption, divergence
    ("training.config", "training.config_files"),
    ("training.plan", "training.step"),
    ("training.evaluation", "training.prediction"),
    ("training.loop",),
    ("training.trainer",),
    ("training.cli",),
    # Fine-tuning on training's loop: a task's examples from its source and its batches, the
    # registry of tasks, the config schema made from it, the plan, one task's run, the suite.
    (
        "finetune", "finetune.examples", "finetune.batches", "finetune.layer_decay",
        "finetune.xtreme_source", "finetune.folder_source",
    ),
    ("finetune.registry",),
    ("finetune.schema",),
    ("finetune.plan",),
    ("finetune.task_run",),
    ("finetune.suite",),
    ("bench",),
)  # fmt: skip
# A program is a root entry point (`python -m xlpretrain.train`) or a package's `__main__`
# module (`python -m xlpretrain.finetune` runs `finetune/__main__.py`); every other
# module is library code and has a layer.
ROOT_PROGRAMS = ("train", "aot", "launch")


def is_program(module: str) -> bool:
    return module in ROOT_PROGRAMS or module.endswith(".__main__")


def modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(path: pathlib.Path) -> set[str]:
    """The `xlpretrain` modules `path` imports (names relative to the package): `from P import
    M` imports module P.M where M is one, else P."""
    known, found = modules(), set()

    def ours(name: str) -> str | None:
        relative = name.removeprefix("xlpretrain.")
        return relative if name.startswith("xlpretrain.") and relative in known else None

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {ours(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            named = [ours(f"{node.module}.{alias.name}") for alias in node.names]
            found |= set(named) if all(named) else {*named, ours(node.module)}
    return found - {None}


def rank(module: str) -> int:
    if is_program(module):
        return len(LAYERS)
    matches = [
        (len(prefix), index)
        for index, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    assert matches, f"xlpretrain.{module} is in no layer: add it to LAYERS (or make it a program)"
    return max(matches)[1]


def test_every_module_has_a_place():
    for module in modules():
        if module:
            rank(module)


def test_every_root_module_is_a_program_or_the_front_door():
    """The package root holds the programs and the front door (`api`); a library module lives
    in a package named for its layer."""
    root = {module for module in modules() if module and "." not in module}
    packages = {module for module, path in modules().items() if path.name == "__init__.py"}
    assert root - packages <= {*ROOT_PROGRAMS, "api"}, sorted(root - packages)


def runs_as_a_program(path: pathlib.Path) -> bool:
    """Whether the module has an `if __name__ == "__main__":` block."""
    main = ast.parse('__name__ == "__main__"', mode="eval").body
    return any(
        isinstance(node, ast.If) and ast.dump(node.test) == ast.dump(main)
        for node in ast.walk(ast.parse(path.read_text()))
    )


def test_only_programs_run_as_programs():
    """A library module is imported, never run: `python -m` runs a root entry point or a
    package's `__main__`, so that the library it sits in has a layer of its own."""
    wrong = sorted(
        module
        for module, path in modules().items()
        if module and not is_program(module) and runs_as_a_program(path)
    )
    assert not wrong, f"{wrong} run as programs: make each a package's __main__"


def test_imports_go_down_and_no_module_imports_a_program():
    wrong = []
    for module, path in modules().items():
        if not module:
            continue
        for target in imports(path):
            if is_program(target):
                wrong.append(f"{module} imports the program {target}")
            elif rank(target) > rank(module):
                wrong.append(f"{module} (layer {rank(module)}) imports {target} ({rank(target)})")
    assert not wrong, "\n".join(sorted(wrong))


def test_eval_only_measures():
    """`eval` measures: its library modules sit below `training`, and no module of it, its
    programs included, imports training or fine-tuning (which lives in `finetune`)."""
    library = [m for m in modules() if m.startswith("eval.") and not is_program(m)]
    above = sorted(m for m in library if rank(m) >= rank("training"))
    assert library and not above, f"{above}: eval's library sits below training"
    training = sorted(
        f"{module} imports {target}"
        for module, path in modules().items()
        if module == "eval" or module.startswith("eval.")
        for target in imports(path)
        if target.split(".")[0] in ("training", "finetune")
    )
    assert not training, "\n".join(training) + ": eval measures; fine-tuning is finetune's"


# What the command lines share (absl's flags, their error lines and exit statuses): a program
# imports it, a library module never does, however high its layer (`bench` loads a shipped
# config through `training.config_files`, as `--config` does).
PROGRAMS_ONLY = ("training.cli",)


def test_only_command_lines_import_what_command_lines_share():
    wrong = sorted(
        f"{module} imports {target}"
        for module, path in modules().items()
        if module and not is_program(module)
        for target in imports(path)
        if target in PROGRAMS_ONLY
    )
    assert not wrong, "\n".join(wrong) + ": only a program may"


def test_no_modules_import_each_other_in_a_circle():
    graph = {module: imports(path) - {module} for module, path in modules().items() if module}
    circles, done = [], set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            circles.append(" -> ".join([*path[path.index(module) :], module]))
            return
        if module in done:
            return
        for target in sorted(graph.get(module, ())):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert not circles, "\n".join(circles)


# The modules that read a raw config: its defaults and key checks, the plans that resolve it
# (`training.plan.resolve`, `finetune.plan.resolve`), the loading of config
# files and the command lines that parse one. Everything else reads a plan's typed sections.
CONFIG_READERS = (
    "training.config",
    "training.config_keys",
    "training.stages",
    "training.plan",
    "finetune.schema",
    "finetune.plan",
    "training.config_files",
    "training.cli",
)


def imports_ml_collections(path: pathlib.Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        names = (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        if any(name.split(".")[0] == "ml_collections" for name in names):
            return True
    return False


def test_only_config_and_plan_modules_and_command_lines_import_ml_collections():
    readers = sorted(
        module
        for module, path in modules().items()
        if module and not is_program(module) and imports_ml_collections(path)
    )
    assert set(readers) <= set(CONFIG_READERS), (
        f"{sorted(set(readers) - set(CONFIG_READERS))} import ml_collections: read the run "
        "plan's sections instead of the raw config"
    )


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def documented_layers(page: str) -> list[tuple[str, ...]]:
    """The modules of each numbered row of the page's layer table (`| N | `a`, `b` | … |`),
    in order."""
    rows = re.findall(r"^\| (\d+) \| ([^|]*) \|", page, flags=re.MULTILINE)
    assert [int(number) for number, _ in rows] == list(range(len(rows))), "rows out of order"
    return [tuple(re.findall(r"`([\w.]+)`", modules)) for _, modules in rows]


def test_the_architecture_page_draws_these_layers():
    assert documented_layers(ARCHITECTURE.read_text()) == list(LAYERS)
