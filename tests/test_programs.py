"""Optional packages: a feature whose package is missing says which extra (or wheel) brings it,
and the `hf` extra installs nothing that pulls CUDA."""

import ast
import importlib.metadata
import pathlib
import re
import sys

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from xlpretrain.convert import hf
from xlpretrain.errors import MissingExtra

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_a_missing_torch_names_the_cpu_wheel(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)
    (tmp_path / "pytorch_model.bin").touch()
    with pytest.raises(MissingExtra) as missing:
        hf.read_tensors(tmp_path)
    assert str(missing.value) == (
        "reading pytorch_model.bin needs torch, which is not installed: pip install torch "
        "--index-url https://download.pytorch.org/whl/cpu (the CPU build; plain pip install "
        "torch for CUDA)"
    )


# Packages that install CUDA libraries on any Linux machine, or are CUDA builds.
PULLS_CUDA = re.compile(r"^(torch|triton|tensorflow|tensorflow-gpu|nvidia-.+|cupy-cuda.+)$")


def pulls_cuda(requirement: str, seen: set[str]) -> list[str]:
    """The chains from `requirement` to a package that pulls CUDA, through the requirements
    of the installed packages it names (with the extras it asks for)."""
    req = Requirement(requirement)
    name = canonicalize_name(req.name)
    if PULLS_CUDA.match(name) or (name == "jax" and any("cuda" in e for e in req.extras)):
        return [str(req)]
    if name in seen:
        return []
    seen.add(name)
    try:
        requires = importlib.metadata.requires(name) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    chains = []
    for dependency in map(Requirement, requires):
        wanted = {"extra": ""}, *({"extra": extra} for extra in req.extras)
        if dependency.marker is None or any(dependency.marker.evaluate(e) for e in wanted):
            chains += [f"{req} -> {c}" for c in pulls_cuda(str(dependency), seen)]
    return chains


def test_the_hf_extra_pulls_no_cuda():
    """`pip install "xlpretrain[hf]"` on a CPU machine must not download CUDA (torch's default
    wheel alone is 3 GB of nvidia-* libraries): nothing it names pulls CUDA, directly or
    through what the installed packages require."""
    setup = ast.parse((REPO / "setup.py").read_text())
    extras = next(
        ast.literal_eval(node.value)
        for node in ast.walk(setup)
        if isinstance(node, ast.keyword) and node.arg == "extras_require"
    )
    seen: set[str] = set()
    assert extras["hf"] and not [c for r in extras["hf"] for c in pulls_cuda(r, seen)]
