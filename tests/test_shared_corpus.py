"""CI fails, not skips, when ../shared (the UDHR corpus) is missing: the session's conftest.py,
copied into a clone with no ../shared beside it, runs a test that reads the corpus."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REQUIRE_SHARED

# The session's conftest.py and the module it imports.
CONFTEST = pathlib.Path(__file__).with_name("conftest.py")
COMPILE_FLAGS = pathlib.Path(__file__).with_name("compile_flags.py")


@pytest.fixture(scope="module")
def lone_clone(tmp_path_factory) -> pathlib.Path:
    """`clone/tests/` with this conftest.py (and what it imports) and one test that reads the
    corpus; no `shared/`."""
    tests = tmp_path_factory.mktemp("lone") / "clone" / "tests"
    tests.mkdir(parents=True)
    shutil.copy(CONFTEST, tests / "conftest.py")
    shutil.copy(COMPILE_FLAGS, tests / "compile_flags.py")
    (tests / "test_reads_udhr.py").write_text("def test_reads(udhr):\n    assert udhr.is_dir()\n")
    assert not (tests.parents[1] / "shared").exists()
    return tests


def run_pytest(tests: pathlib.Path, require: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != REQUIRE_SHARED}
    if require is not None:
        env[REQUIRE_SHARED] = require
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tests)],
        cwd=tests.parent, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_missing_corpus_fails_when_required_and_skips_otherwise(lone_clone):
    required = run_pytest(lone_clone, "1")
    assert required.returncode == 1, required.stdout
    assert "1 error" in required.stdout, required.stdout
    assert f"UDHR corpus not found: no folder {lone_clone.parents[1] / 'shared'}" in (
        required.stdout
    )
    assert f"{REQUIRE_SHARED}=1: CI must have ../shared" in required.stdout
    for require in (None, "0"):
        skipped = run_pytest(lone_clone, require)
        assert skipped.returncode == 0, skipped.stdout
        assert "1 skipped" in skipped.stdout and "UDHR corpus not found" in skipped.stdout
