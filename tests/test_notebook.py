"""docs/colab_tpu_demo.ipynb: stored clean, its install logic finds the right source, and it runs
top to bottom on CPU (nbclient, from docs/ of this checkout) with a few steps, so a change to a
CLI it calls breaks this test instead of a user's Colab session."""

import json
import os
import pathlib
import re
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from tests.compile_flags import FAST_COMPILE

REPO = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "docs" / "colab_tpu_demo.ipynb"
STEPS = 6  # ERNIE-M's stage 2 (BTMLM) starts at half of train.steps: steps 1-2, then 3-6


def read_notebook() -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOK, as_version=4)


def tagged(nb: nbformat.NotebookNode, tag: str) -> nbformat.NotebookNode:
    """The one cell carrying `tag`: the test finds cells by role, not by position."""
    (cell,) = [c for c in nb.cells if tag in c.metadata.get("tags", [])]
    return cell


def stream_text(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def has_png(cell: nbformat.NotebookNode) -> bool:
    return any("image/png" in o.get("data", {}) for o in cell.outputs)


def test_notebook_is_stored_clean():
    """Outputs in git would be stale, unreviewable and large; the format must stay valid."""
    nb = read_notebook()
    nbformat.validate(nb)
    assert nb.nbformat == 4
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, cell.source[:60]
    tagged(nb, "parameters")  # papermill injects overrides after it
    assert "<you>" not in NOTEBOOK.read_text(encoding="utf-8")  # no placeholder repository


@pytest.fixture(scope="module")
def helpers() -> dict:
    """The notebook's install helpers (definitions only), run here without a kernel."""
    namespace: dict = {}
    exec(tagged(read_notebook(), "helpers").source, namespace)
    return namespace


@pytest.mark.parametrize(
    "address, expected",
    [
        # Colab's sessions API: `fileId=` and the percent-encoded GitHub address.
        (
            "fileId=https%3A%2F%2Fgithub.com%2Facme%2Fxlpretrain%2Fblob%2Fmain%2Fdocs%2F"
            "colab_tpu_demo.ipynb",
            ("https://github.com/acme/xlpretrain.git", "main"),
        ),
        # The address Colab shows; a branch with a slash ends where the notebook's path starts.
        (
            "https://colab.research.google.com/github/acme/xl.pre/blob/feature/tpu/docs/"
            "colab_tpu_demo.ipynb#scrollTo=abc",
            ("https://github.com/acme/xl.pre.git", "feature/tpu"),
        ),
        (
            "https://github.com/acme/xlpretrain/blob/v0.1.0/README.md",
            ("https://github.com/acme/xlpretrain.git", "v0.1.0"),
        ),
        ("fileId=1AbCdEf_drive_id", None),  # a Drive notebook says nothing about a repository
    ],
)
def test_github_origin_from_colab_address(helpers, address, expected):
    assert helpers["github_source"](address) == expected


def test_install_source_forms(helpers, tmp_path):
    """Git URLs (pip's git+URL@REF too) clone; a PyPI name is refused: it has no configs/."""
    parse = helpers["parse_source"]
    assert parse("git+https://example.org/a/xlpretrain.git@dev") == (
        "git",
        "https://example.org/a/xlpretrain.git",
        "dev",
    )
    assert parse("git@example.org:a/xlpretrain.git") == (
        "git",
        "git@example.org:a/xlpretrain.git",
        None,
    )
    assert parse(str(REPO)) == ("path", str(REPO), None)
    for bad in ("xlpretrain==0.1.0", ""):
        with pytest.raises(ValueError):
            parse(bad)
    assert helpers["find_checkout"](REPO / "docs") == REPO
    assert helpers["find_checkout"](tmp_path) is None


@pytest.mark.parametrize("colab", [False, True])
def test_no_source_stops_with_a_clear_error(helpers, tmp_path, monkeypatch, colab):
    """Outside a checkout, with XLPRETRAIN_SOURCE empty and no GitHub origin from Colab (here a
    Drive notebook), the install cell asks for the source instead of cloning a guess."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("XLPRETRAIN_SOURCE", raising=False)
    namespace = {**helpers, "XLPRETRAIN_SOURCE": ""}
    namespace["in_colab"] = lambda: colab
    namespace["colab_notebook_address"] = lambda: "fileId=1AbCdEf_drive_id"
    with pytest.raises(RuntimeError, match="Set XLPRETRAIN_SOURCE") as error:
        exec(tagged(read_notebook(), "install").source, namespace)
    assert ("Colab did not say" in str(error.value)) == colab
    assert list(tmp_path.iterdir()) == []  # nothing cloned


def test_notebook_runs_on_cpu(tmp_path):
    """Executes every cell as Jupyter opened in docs/ would, with STEPS steps on the demo corpus
    (what Colab has; UDHR's tokenizer alone would take 1.5 minutes), and checks real outputs."""
    probe = "import importlib.util as u; print(u.find_spec('xlpretrain').origin)"
    found = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO / "docs",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not found.startswith(str(REPO)):
        pytest.skip(f"xlpretrain comes from {found}: the notebook would pip install -e {REPO}")
    nb = read_notebook()
    workdir = tmp_path / "run"
    overrides = nbformat.v4.new_code_cell(
        f"STEPS = {STEPS}\nWORKDIR = {str(workdir)!r}\nCORPUS = 'demo'\nRETRIEVAL_MAX_LINES = 50\n"
        "import sys\n"
        f"assert sys.prefix == {sys.prefix!r}, f'the kernel runs {{sys.executable}}, not the "
        "test environment'\n"
    )
    overrides.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(nb.cells.index(tagged(nb, "parameters")) + 1, overrides)

    # Any cell error (a failed command raises in the notebook) raises CellExecutionError here.
    # The kernel sees one CPU device, as a Colab CPU runtime does (conftest's 8 fake devices
    # are for the in-process tests, and compile an 8-way sharded step); compiles are cheap.
    NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(REPO / "docs")}},
    ).execute(env={**os.environ, "XLA_FLAGS": FAST_COMPILE})

    install = stream_text(tagged(nb, "install"))
    assert f"xlpretrain checkout: {REPO}" in install and "skipping pip" in install, install
    assert re.search(r"backend cpu: \d+ device", stream_text(tagged(nb, "devices")))
    assert has_png(tagged(nb, "mask")) and (workdir / "camlm_mask.png").is_file()

    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    objectives = {}
    for r in records:
        names = {k.split("/", 1)[1] for k in r if k.startswith("loss/")}
        objectives.setdefault(int(r["stage"]), set()).update(names)
    assert objectives == {0: {"mmlm", "tlm", "camlm"}, 1: {"mmlm", "tlm", "camlm", "btmlm"}}

    curves = tagged(nb, "loss-curves")
    assert has_png(curves) and (workdir / "loss_curves.png").is_file()
    assert "stage 1: logged from step 3: btmlm, camlm, mmlm, tlm" in stream_text(curves)

    table = stream_text(tagged(nb, "retrieval"))
    assert "retrieval accuracy@1" in table, table
    for pair in ("en-ar", "en-de", "en-fr", "en-ru", "en-zh", "average"):
        assert re.search(rf"^{pair} +[01]\.\d{{4}} ", table, re.M), (pair, table)
