"""A program's stderr without the start-up chatter of JAX's CUDA plugin and of TensorFlow.

On a host without a GPU, importing JAX with its CUDA plugin installed (the `gpu-compile` extra)
makes the plugin's C++ write "Could not find cuda drivers…" lines straight to file descriptor 2,
and importing TensorFlow (which TFDS may do) writes lines of the same kind; no setting silences
them. So a program (`python -m xlpretrain.X`, `xlpretrain/__init__.py` calls `install`) runs the
first import of either, and JAX's first discovery of its plugins (which loads the plugin's
library, when JAX first needs a backend: after a program has set the GPU memory settings the
plugin reads then), with descriptor 2 pointed at a temporary file, and passes every line on
except the known ones: a real error is never hidden. On a host with no NVIDIA device, JAX's
report that the CUDA plugin could not start (a traceback) goes to our log at debug level; where
there is one, it stays a warning, in one line. `XLPRETRAIN_QUIET=0` turns all of this off (for
a process that dies in C++ while its output is held back).
"""

from __future__ import annotations

import contextlib
import glob
import importlib.abc
import importlib.machinery
import logging
import os
import re
import sys
import tempfile
import types
from collections.abc import Iterator, Sequence

NOISY_IMPORTS = ("jax", "tensorflow")
NOISE = re.compile(
    "|".join(
        (
            r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
            r"STDERR$",
            r"cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine",
            # TensorFlow's, on a host without a GPU:
            r"\] Unable to register cu(DNN|FFT|BLAS) factory: Attempting to register factory",
            r"\] oneDNN custom operations are on\.",
            r"\] This TensorFlow binary is optimized to use available CPU instructions",
            r"^To enable the following instructions: .* rebuild TensorFlow with the appropriate",
            r"\] TF-TRT Warning: Could not find TensorRT$",
            r"\] computation placer already registered\. Please check linkage",
        )
    )
)


def is_noise(line: str) -> bool:
    """Whether `line` is one of the known start-up lines."""
    return NOISE.search(line.rstrip("\n")) is not None


@contextlib.contextmanager
def held_back() -> Iterator[None]:
    """File descriptor 2 goes to a temporary file while the block runs (a file, not a pipe: it
    cannot fill up); then every line written there that is not noise goes on to stderr."""
    if sys.stderr is not None:
        sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 to keep clean
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            if sys.stderr is not None:
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines = capture.read().splitlines(keepends=True)
            kept = [line for line in lines if not is_noise(line.decode(errors="replace"))]
            with open(2, "wb", closefd=False) as stderr:
                stderr.write(b"".join(kept))


class _HeldBackLoader(importlib.abc.Loader):
    """A module's own loader, run under `held_back`."""

    def __init__(self, loader: importlib.abc.Loader):
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__loader__ = module.__spec__.loader = self.loader  # for the package's resources
        with held_back():
            self.loader.exec_module(module)
        if module.__name__ == "jax":
            _hold_back_first_plugin_discovery()


def _hold_back_first_plugin_discovery() -> None:
    """JAX's first discovery of its backend plugins, run under `held_back` when JAX makes it:
    the CUDA plugin's library prints its lines again when it is loaded."""
    from jax._src import xla_bridge

    discover = getattr(xla_bridge, "_discover_and_register_pjrt_plugins", None)
    if discover is None:  # JAX's own name for it: nothing to do where it has another
        return

    def first_discovery() -> None:
        xla_bridge._discover_and_register_pjrt_plugins = discover  # later calls: JAX's own
        with held_back():
            discover()

    xla_bridge._discover_and_register_pjrt_plugins = first_discovery


class _HeldBackImports(importlib.abc.MetaPathFinder):
    """Finds the first import of each of `names` as the other finders do, to run it under
    `held_back`."""

    def __init__(self, names: set[str]):
        self.names = names

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name not in self.names:
            return None
        self.names.discard(name)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _HeldBackLoader(spec.loader)
                return spec
        return None


class _PluginFailureToDebug(logging.Filter):
    """JAX's report of a backend plugin that cannot start (an error and two chained tracebacks)
    in one line: at debug level in our log on a host with no NVIDIA device (the CUDA plugin of
    the `gpu-compile` extra, which has no GPU to find there), else as a warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info is None or record.exc_info[1] is None:
            return True
        error = record.exc_info[1]
        if glob.glob("/dev/nvidia[0-9]*"):
            record.msg = f"{record.getMessage()}: {type(error).__name__}: {error}"
            record.args, record.exc_info, record.exc_text = (), None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            return True
        logging.getLogger("xlpretrain").debug(
            "%s: %s: %s", record.getMessage(), type(error).__name__, error
        )
        return False


def install() -> None:
    """For a program: the first imports of JAX and TensorFlow held back, and JAX's report of a
    plugin that cannot start in one line; nothing with `XLPRETRAIN_QUIET=0`."""
    if os.environ.get("XLPRETRAIN_QUIET", "1") == "0":
        return
    sys.meta_path.insert(0, _HeldBackImports(set(NOISY_IMPORTS) - set(sys.modules)))
    logging.getLogger("jax._src.xla_bridge").addFilter(_PluginFailureToDebug())
