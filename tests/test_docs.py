"""The documentation site builds with `--strict`, and the commands the docs show run.

Why: docs rot quietly. A renamed flag or config key leaves a README command that fails on a
user's first try, and nobody notices until then. This module builds the mkdocs site and runs,
on CPU with tiny settings, every command of every ```bash block in README.md, in the site's
pages (docs/, in nav order, with the files they include through `--8<--`, i.e.
launch/README.md) and in launch/README.md.

How a block is treated:

- Its commands run one by one, unless the line before its fence (blank lines aside) is a
  marker `<!-- docs-test: skip reason="..." -->` (needs a GPU, placeholders, ...): then each
  command is reported as a pytest skip with that reason (`pytest -rs` lists them).
  `test_markers_are_well_formed` fails on a skip without a reason and on any other
  `docs-test:` text.
- `<!-- docs-test: fails with="TEXT" -->`: the block's one command must exit non-zero and
  print TEXT (for pages that show an error message).
- A command is a line, or lines joined at trailing backslashes; blank and `#` lines are
  dropped. A few are skipped or changed by rule (`RULES`, `STRIP_PREFIX`, `DRY_RUN`):
  installation lines (CI has installed the project), the test suite itself, cluster
  submissions, the xlco demo (tests/test_demo_xlco.py runs it as written);
  `launch/*.sh` launchers run as their dry run (`DRY_RUN=1`).
- A command identical to one that runs on another page is run once, where it comes first.
  So a page must not use the outputs of a command it repeats from another page, except those
  that only write a corpus folder (`EVERY_PAGE`: seconds each), which run on every page.
- `TINY` is the one place where documented settings are shrunk: a command running one of its
  programs gets that program's flags appended (a later flag wins over the documented one):
  a few steps, one small shared tokenizer, small benchmark and sizing shapes, and no held-out
  evaluation in a one-device `train` that sets no eval flag (`NO_EVAL`); a command that sets
  `XLA_FLAGS` itself gets the tests' cheap compiles after its own flags.

Where commands run: each page (README.md, a docs page, launch/README.md) in its own scratch
directory, holding symlinks `configs` and `launch` to the repository's and nothing else a
user's clone lacks (no `../shared`). So the documented relative paths (`configs/demo.py`,
`runs/demo`, `launch/slurm.sh`) resolve as in a checkout, and whatever a command writes lands
in the scratch directory, never in the repository. A page's commands run
in order in its directory, so its `train` then `convert` of one workdir works; after a failure
the rest of the page is not run. Pages run side by side (`WORKERS`) so that both cores of a CI
machine work: a command is mostly one busy core (start-up and a cold XLA compile). Each
command is a fresh `bash -c` (no variable or `cd` carries over), sees one CPU device
(`XLA_FLAGS` reset, as on a user's machine: conftest's 8 fake devices are for the in-process
tests; cheap XLA compiles, `tests/compile_flags.py`, but for `FULL_OPTIMIZATION`) and has a
timeout. A failure shows the command, where it is documented, its directory and the tail of its
output.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest
import yaml

from tests.compile_flags import FAST_COMPILE, OPTIMIZED_COMPILE

REPO = pathlib.Path(__file__).resolve().parents[1]
# Read besides README.md and the site's pages, if no page includes them.
EXTRA_SOURCES = ("launch/README.md",)
TIMEOUT_S = 300  # per command
# Pages run side by side: a command is mostly one busy core (start-up, one XLA compile).
WORKERS = 2
TAIL_CHARS = 3000

# --- Tiny settings: the one place where documented commands are shrunk. -----------------------
TINY_VOCAB = 1002  # the shared tokenizer's size (trained once, in `outcomes`)
_TRAIN = (
    "--config.train.steps=4",
    "--config.train.log_every=2",
    "--config.tokenizer.path={tokenizer}",  # instead of training one per command
    f"--config.model.vocab_size={TINY_VOCAB}",
    # Retrieval on every held-out pair file, at step 0 and at the end, but 10 lines of each
    # instead of 100 or 1000: the encoding, not the compile, was most of a tiny run.
    "--config.eval.retrieval_lines=10",
)
# XLM-R base / large shapes take minutes per compiled step on a CPU; the benchmark and sizing
# commands get a small model of the same kind instead.
_SMALL_MODEL = (
    "--config.model.num_layers=2",
    "--config.model.hidden_size=64",
    "--config.model.num_heads=4",
    "--config.model.mlp_dim=128",
)
TINY: dict[str, tuple[str, ...]] = {
    "xlpretrain.train": _TRAIN,
    "xlpretrain.launch": _TRAIN,  # its arguments after `--` are train's
    "xlpretrain.bench": (
        *_SMALL_MODEL,
        "--config.data.batch_size=2",
        "--config.data.max_length=64",
        "--config.tokenizer.path={tokenizer}",
        f"--config.model.vocab_size={TINY_VOCAB}",
        "--steps=1",
        "--warmup=1",
        "--peer_modes=eager",
        "--attention_lengths=128",
        "--attention_batch=1",
        "--attention_repeats=1",
    ),
    # 64 rows: divisible by the 8 devices × train.grad_accum=8 of launch/README.md's sizing.
    "xlpretrain.aot": (*_SMALL_MODEL, "--config.data.batch_size=64", "--config.data.max_length=64"),
    "xlpretrain.eval.retrieval": ("--max-lines=10",),
    "xlpretrain.finetune": ("--config.train.steps=4", "--config.train.log_every=2"),
}
# Left to a run on a prepared store, whose tokenizer (and so vocabulary) is the run's.
STORE_KEEPS = ("--config.tokenizer.path", "--config.model.vocab_size")
# Compiled at XLA's default level, not -O0: their evaluation over every language of the demo's
# pairs outweighs their compiles (`compile_flags.OPTIMIZED_COMPILE`).
FULL_OPTIMIZATION = ("xlpretrain.finetune",)
# Appended only where a command sets the flag, so that it stays inside the tiny run.
TINY_IF_SET = {"--config.train.stop_at": "2"}
# No held-out evaluation (a retrieval at step 0 and an evaluation at the end: about a third of a
# tiny run) in a one-device `train` that sets no `--config.eval.` flag: tests/test_demo_runs.py
# and tests/test_evaluation.py check evaluation on one device. Commands that set an eval flag,
# run several devices (`XLA_FLAGS=...`) or processes (`launch`) keep theirs.
NO_EVAL = "--config.eval.every_steps=0"

# --- Rules for commands that are not run as written. -----------------------------------------
_ENV = r"^(?:\w+=\S*\s+)*"  # leading VAR=value assignments
RULES: tuple[tuple[str, str], ...] = (
    (r"^pip install\b", "installs the project, which CI has already installed"),
    (r"^python -m pytest\b", "the test suite itself, which CI runs (this test is part of it)"),
    (
        r"^python -m xlpretrain\.train --config configs/demo\.py:xlco --workdir runs/demo_xlco$",
        "the xlco demo, run as written (600 steps) by tests/test_demo_xlco.py; no page uses its "
        "workdir",
    ),
    (
        _ENV + r"sbatch\b",
        "submits to a SLURM cluster; the launcher's dry run is tested in "
        "tests/test_launch_scripts.py",
    ),
)
STRIP_PREFIX = r"^pip install [^&;|]*&&\s*"  # `pip install X && CMD` runs CMD
EVERY_PAGE = r"^python -m xlpretrain\.data\.demo_corpus\b"  # writes the folders a page trains on
DRY_RUN = _ENV + r"launch/\w+\.sh\b"  # cluster launchers print their commands instead

FENCE = re.compile(r"^\s*```(\S*)\s*$")
CLOSING_FENCE = re.compile(r"^\s*```\s*$")  # no info string: "```bash" inside a block is text
MARKER = re.compile(r"^\s*<!--\s*docs-test:(.*?)-->\s*$")
DIRECTIVE = re.compile(r'^\s*(?:skip reason="([^"]+)"|fails with="([^"]+)")\s*$')
INCLUDE = re.compile(r'^\s*--8<--\s+"([^"]+)"\s*$')
PROGRAM = re.compile(r"\bpython -m (xlpretrain(?:\.\w+)+)")


@dataclasses.dataclass(frozen=True)
class Block:
    """One ```bash block: where it is, its commands, and its marker."""

    path: str  # relative to the repository
    line: int  # of the opening fence, 1-based
    commands: tuple[str, ...]
    skip: str = ""  # the reason, if marked skip
    fails_with: str = ""  # the expected text, if marked fails
    problem: str = ""  # a malformed marker


@dataclasses.dataclass(frozen=True)
class Step:
    block: Block
    index: int  # of the command in its block

    @property
    def command(self) -> str:
        return self.block.commands[self.index]

    @property
    def where(self) -> str:
        return f"{self.block.path}:{self.block.line}"

    @property
    def id(self) -> str:
        return f"{self.where}:{self.index + 1}"


def split_commands(lines: list[str]) -> tuple[str, ...]:
    """Shell commands of a block: continuation lines joined, blank and comment lines dropped."""
    commands, current = [], ""
    for raw in lines:
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1].rstrip() + " "
            continue
        commands.append((current + line).strip())
        current = ""
    if current:
        commands.append(current.strip())
    return tuple(commands)


def parse_blocks(path: str, seen: set[str], root: pathlib.Path = REPO) -> list[Block]:
    """The bash blocks of `path`, with those of the files it includes (`--8<--`) in place."""
    seen.add(path)
    lines = (root / path).read_text().splitlines()
    blocks: list[Block] = []
    marker: tuple[int, str] | None = None  # (line, text) of a pending marker
    i = 0
    while i < len(lines):
        line = lines[i]
        if match := MARKER.match(line):
            marker = (i + 1, match.group(1))
        elif match := INCLUDE.match(line):
            if match.group(1) not in seen:
                blocks.extend(parse_blocks(match.group(1), seen, root))
        elif match := FENCE.match(line):
            end = i + 1
            while end < len(lines) and not CLOSING_FENCE.match(lines[end]):
                end += 1
            if match.group(1) == "bash":
                blocks.append(_block(path, i + 1, split_commands(lines[i + 1 : end]), marker))
            elif marker is not None:
                blocks.append(Block(path, i + 1, (), problem="marker before a non-bash block"))
            marker = None
            i = end
        elif line.strip() and marker is not None:
            blocks.append(Block(path, marker[0], (), problem="marker not followed by a block"))
            marker = None
        i += 1
    return blocks


def _block(
    path: str, line: int, commands: tuple[str, ...], marker: tuple[int, str] | None
) -> Block:
    if marker is None:
        return Block(path, line, commands)
    match = DIRECTIVE.match(marker[1])
    if match is None:
        problem = (
            f"malformed marker on line {marker[0]}: {marker[1].strip()!r}; expected "
            'skip reason="..." or fails with="..."'
        )
        return Block(path, line, commands, problem=problem)
    skip, fails_with = match.groups()
    if fails_with and len(commands) != 1:
        problem = f'a fails with="..." block holds one command, not {len(commands)}'
        return Block(path, line, commands, problem=problem)
    return Block(path, line, commands, skip=skip or "", fails_with=fails_with or "")


def sources() -> list[str]:
    """README.md, the site's pages in nav order, then any other documentation file."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    docs_dir = config.get("docs_dir", "docs")

    def pages(nav) -> list[str]:
        if isinstance(nav, str):
            return [nav] if nav.endswith(".md") else []
        items = nav.values() if isinstance(nav, dict) else nav
        return [page for item in items for page in pages(item)]

    ordered = ["README.md", *(f"{docs_dir}/{page}" for page in pages(config["nav"]))]
    others = sorted(str(p.relative_to(REPO)) for p in (REPO / docs_dir).glob("*.md"))
    return [*ordered, *(p for p in others if p not in ordered), *EXTRA_SOURCES]


def all_blocks() -> list[Block]:
    """Every bash block of the documentation, each file read once."""
    seen: set[str] = set()
    return [block for path in sources() if path not in seen for block in parse_blocks(path, seen)]


BLOCKS = all_blocks()
STEPS = [Step(block, i) for block in BLOCKS for i in range(max(len(block.commands), 1))]


def by_rule(command: str) -> tuple[str, str]:
    """The command as it will run and, if a rule skips it, why."""
    command = re.sub(STRIP_PREFIX, "", command)
    for pattern, reason in RULES:
        if re.match(pattern, command):
            return command, reason
    if re.match(DRY_RUN, command):
        command = "DRY_RUN=1 " + command
    return command, ""


def shrink(command: str, tokenizer: pathlib.Path) -> str:
    """`command` with the tiny settings of the program it runs (see `TINY`)."""
    match = PROGRAM.search(command)
    if match is None or match.group(1) not in TINY:
        return command
    assert not re.search(r"[|;>]|&&", command[match.end() :]), (
        f"tiny flags are appended at the end, so {command!r} must end with the program's "
        "arguments (no pipe, redirection or second command after it)"
    )
    # Its own XLA flags (fake devices) are kept and the cheap compiles added after them.
    command = re.sub(
        r"^((?:\w+=\S*\s+)*)XLA_FLAGS=(\S+)", rf'\1XLA_FLAGS="\2 {FAST_COMPILE}"', command
    )
    extra = [flag.format(tokenizer=tokenizer) for flag in TINY[match.group(1)]]
    extra += [f"{flag}={value}" for flag, value in TINY_IF_SET.items() if flag + "=" in command]
    if match.group(1) == "xlpretrain.train" and not re.search(
        r"--config\.eval\.|XLA_FLAGS=", command
    ):
        extra.append(NO_EVAL)
    if "--config.data.store=" in command:  # the store's tokenizer is the run's
        extra = [f for f in extra if not f.startswith(STORE_KEEPS)]
    return " ".join([command, *extra])


def page_directory(root: pathlib.Path, page: str) -> pathlib.Path:
    """`root/<page>`, where `page`'s commands run, with the repository's `configs` and
    `launch` beside them, as in a user's clone."""
    work = root / page.replace("/", "__")
    work.mkdir()
    for name in ("configs", "launch"):
        (work / name).symlink_to(REPO / name)
    return work


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What happened to one documented command."""

    status: str  # "passed", "skipped" or "failed"
    message: str = ""


class Runner:
    """Runs the pages' commands: each page in order in its own directory, pages side by side
    on `WORKERS` threads, every distinct command once."""

    def __init__(self, root: pathlib.Path, tokenizer: pathlib.Path):
        self.root, self.tokenizer = root, tokenizer
        self.env = dict(os.environ)
        # One CPU device, as a user has (not conftest's 8). Cheap compiles (but for
        # `FULL_OPTIMIZATION`): compiling is most of a tiny command's time, and nothing is timed.
        self.env["XLA_FLAGS"] = FAST_COMPILE
        self.env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(REPO), self.env.get("PYTHONPATH")])
        )
        self.env["PATH"] = os.pathsep.join(
            [str(pathlib.Path(sys.executable).parent), self.env.get("PATH", "")]
        )
        self._claims: dict[str, str] = {}  # command as run → where it is documented first

    def run_all(self, steps: list[Step]) -> dict[str, Outcome]:
        """Outcomes by step id; pages start in document order, README.md first. A command
        documented twice runs where it comes first in that order, whichever page's thread
        reaches it first (a later page may then use its outputs only if it runs after)."""
        pages: dict[str, list[Step]] = {}
        for step in steps:
            pages.setdefault(step.block.path, []).append(step)
            if not step.block.skip and not by_rule(step.command)[1]:
                command = shrink(by_rule(step.command)[0], self.tokenizer)
                self._claims.setdefault(command, step.where)
        outcomes: dict[str, Outcome] = {}
        with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
            for result in pool.map(self.run_page, pages.items()):
                outcomes.update(result)
        return outcomes

    def run_page(self, page: tuple[str, list[Step]]) -> dict[str, Outcome]:
        """One page's commands in order; after a failure the rest, which may need its
        outputs, are reported as not run."""
        path, steps = page
        work = page_directory(self.root, path)
        outcomes: dict[str, Outcome] = {}
        failed = ""
        for step in steps:
            if failed:
                outcome = Outcome("skipped", f"{step.where}: not run, {failed} failed before it")
            else:
                try:
                    outcome = self.run_step(step, work)
                except Exception as error:  # a broken rule must not hide the other pages
                    outcome = Outcome("failed", f"{step.where}: {type(error).__name__}: {error}")
            if outcome.status == "failed":
                failed = step.id
            outcomes[step.id] = outcome
        return outcomes

    def run_step(self, step: Step, work: pathlib.Path) -> Outcome:
        """Applies the marker, the rules and `TINY`, then runs the command in `work`."""
        block = step.block
        if block.problem:
            return Outcome("failed", f"{step.where}: {block.problem}")
        if not block.commands:
            return Outcome("skipped", f"{step.where}: empty block")
        if block.skip:
            return Outcome("skipped", f"{step.where}: {block.skip}")
        command, reason = by_rule(step.command)
        if reason:
            return Outcome("skipped", f"{step.where}: {step.command!r}: {reason}")
        command = shrink(command, self.tokenizer)
        program = PROGRAM.search(command)
        env = self.env
        if program and program.group(1) in FULL_OPTIMIZATION:
            env = {**env, "XLA_FLAGS": OPTIMIZED_COMPILE}
        first = step.where if re.match(EVERY_PAGE, command) else self._claims[command]
        if first != step.where:
            return Outcome("skipped", f"{step.where}: same command as {first}, run there")
        start = time.perf_counter()
        try:
            result = subprocess.run(
                ["bash", "-c", "set -eo pipefail\n" + command],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
            )
            code, out, err = result.returncode, result.stdout, result.stderr
        except subprocess.TimeoutExpired as error:
            code, out, err = (
                f"timeout after {TIMEOUT_S} s",
                _text(error.stdout),
                _text(error.stderr),
            )
        seconds = time.perf_counter() - start
        report = (
            f"{step.where}: {command}\n(in {work})\nexit status {code} after {seconds:.0f} s\n"
            f"--- stdout (tail) ---\n{out[-TAIL_CHARS:]}\n"
            f"--- stderr (tail) ---\n{err[-TAIL_CHARS:]}"
        )
        if block.fails_with:
            if code == 0 or not isinstance(code, int):
                return Outcome("failed", "expected to fail with an error:\n" + report)
            if block.fails_with not in out + err:
                return Outcome("failed", f"expected {block.fails_with!r} in:\n{report}")
        elif code != 0:
            return Outcome("failed", report)
        return Outcome("passed")


def _text(output: bytes | str | None) -> str:
    """What a timed-out process had written (bytes, despite `text=True`)."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Runs every documented command once (see the module docstring); by step id."""
    from xlpretrain.data import demo_corpus
    from xlpretrain.data.corpora.folders import MonolingualSource
    from xlpretrain.data.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("docs")
    mono_dir = demo_corpus.build_demo_corpus(demo_corpus.default_demo_cache_dir()).mono
    mono = MonolingualSource.from_dir(mono_dir)
    texts = {lang: [mono.line(lang, i) for i in range(20)] for lang in mono.languages}
    tokenizer = root / "tokenizer.model"
    train_tokenizer(texts, tokenizer, TINY_VOCAB, character_coverage=0.99)
    return Runner(root, tokenizer).run_all(STEPS)


def test_site_builds_strict(tmp_path: pathlib.Path) -> None:
    """`mkdocs build --strict`: no broken link or anchor, no missing page or include."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, (
        f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    )


def test_every_guard_in_the_rules_table_exists() -> None:
    """docs/objectives.md names the test guarding each rule (`tests/x.py::name`, or `::name`
    for the file named before it in the cell): each must be a test function of that file."""
    table = (REPO / "docs" / "objectives.md").read_text().split("## Which test guards which rule")
    assert len(table) == 2, "docs/objectives.md has no rules table"
    missing, named = [], 0
    for line in table[1].split("\n## ")[0].splitlines():
        path = None
        for file, name in re.findall(r"`(tests/[\w/]+\.py)?(?:::(\w+))?`", line):
            path = file or path
            if name:
                named += 1
                source = (REPO / path).read_text()
                if not re.search(rf"^def {name}\(", source, re.M):
                    missing.append(f"{path}::{name}")
    assert named > 20 and not missing, f"tests named in the table but not defined: {missing}"


def test_every_objective_has_its_formula_and_mask_pictures() -> None:
    """docs/objectives.md gives each registered objective a section with a display formula
    (typeset by arithmatex + MathJax, so `$$` and no plain-text stand-in) and a picture of
    each mask it declares, and every picture it shows exists."""
    from xlpretrain.objectives import REGISTRY

    page = (REPO / "docs" / "objectives.md").read_text()
    sections = {s.split("\n", 1)[0]: s for s in page.split("\n## ")[1:]}
    problems = []
    for name, objective in REGISTRY.items():
        titled = [body for title, body in sections.items() if name.upper() in title.split(" —")[0]]
        if len(titled) != 1:
            problems.append(f"{name}: {len(titled)} sections titled with {name.upper()}")
            continue
        if "$$" not in titled[0]:
            problems.append(f"{name}: no display formula")
        for mask in objective.masks:  # pictured under the mask's name or the objective's
            if not {f"img/mask_{mask.name}.png", f"img/mask_{name}.png"} & set(
                re.findall(r"img/[\w.]+", titled[0])
            ):
                problems.append(f"{name}: no picture of its mask {mask.name}")
    for picture in re.findall(r"\(img/([\w.]+)\)", page):
        if not (REPO / "docs" / "img" / picture).is_file():
            problems.append(f"img/{picture} is shown but missing")
    assert not problems, problems
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text().replace("!!", "#"))
    extensions = [e if isinstance(e, str) else next(iter(e)) for e in config["markdown_extensions"]]
    assert "pymdownx.arithmatex" in extensions and any(
        "mathjax" in script for script in config["extra_javascript"]
    )


def test_user_facing_files_stay_inside_the_repository() -> None:
    """A user's clone has no `../shared`: README, docs, configs and launchers never point there
    (tests may, and skip without it)."""
    files = [REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "docs").glob("*.ipynb")]
    files += [
        *(REPO / "configs").glob("*.py"),
        *(p for p in (REPO / "launch").rglob("*") if p.is_file()),
    ]
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for path in files
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if re.search(r"\.\./shared|shared/(data|DESIGN)", line)
    ]
    assert not offenders, offenders


def test_markers_are_well_formed() -> None:
    """Every skip says why; a marker that cannot be read would silently run or skip a block."""
    problems = [f"{b.path}:{b.line}: {b.problem}" for b in BLOCKS if b.problem]
    assert not problems, "\n".join(problems)
    assert any(b.path == "README.md" for b in BLOCKS), "no ```bash block found in README.md"


def test_blocks_markers_and_commands_are_read_as_documented(tmp_path: pathlib.Path) -> None:
    """The reader itself: continuation lines, comments, markers, includes."""
    (tmp_path / "included.md").write_text("```bash\necho included\n```\n")
    (tmp_path / "page.md").write_text(
        "```bash\n# a comment\npython -m x \\\n    --flag\n\nls\n```\n"
        '<!-- docs-test: skip reason="needs a GPU" -->\n\n```bash\nnvidia-smi\n```\n'
        "<!-- docs-test: skip -->\n```bash\nls\n```\n"
        '<!-- docs-test: fails with="no such" -->\n```bash\nls nowhere\n```\n'
        '<!-- docs-test: skip reason="x" -->\n```python\nprint()\n```\n'
        '--8<-- "included.md"\n'
        "```text\n```bash\nnot a command\n```\n"
        "```bash\necho last\n```\n"
    )
    blocks = parse_blocks("page.md", set(), tmp_path)
    assert [b.commands for b in blocks] == [
        ("python -m x --flag", "ls"),
        ("nvidia-smi",),
        ("ls",),
        ("ls nowhere",),
        (),
        ("echo included",),
        ("echo last",),
    ]
    assert blocks[1].skip == "needs a GPU" and blocks[3].fails_with == "no such"
    assert "malformed marker" in blocks[2].problem
    assert blocks[4].problem == "marker before a non-bash block"
    assert not any(b.problem for b in blocks[:2] + blocks[3:4] + blocks[5:])


@pytest.mark.parametrize("step", STEPS, ids=[step.id for step in STEPS])
def test_documented_command(step: Step, outcomes: dict[str, Outcome]) -> None:
    """One documented command: passed, skipped with its reason, or failed with its output."""
    outcome = outcomes[step.id]
    if outcome.status == "skipped":
        pytest.skip(outcome.message)
    if outcome.status == "failed":
        pytest.fail(outcome.message, pytrace=False)
