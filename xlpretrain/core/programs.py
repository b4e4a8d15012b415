"""How every command line (`python -m xlpretrain.X`) ends: a mistake the user can fix is one line
on stderr, `PROGRAM: error: WHAT (WHERE)`, and exit status 2 (`USAGE`), as argparse and most Unix
tools do; Ctrl-C is one line and 130. Light (the standard library only), so that the programs
that start no JAX (`launch`, `data.prepare`) stay fast.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import NoReturn

from xlpretrain.core.errors import MissingExtra

USAGE, FAILED, INTERRUPTED = 2, 1, 130  # 130: 128 + SIGINT, as shells report Ctrl-C
# What a user can fix: a bad value or flag, a missing or unreadable file or folder, a missing
# optional package.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, MissingExtra)


def setup_logging(level: int = logging.INFO) -> None:
    """Our log to stdout; JAX's and absl's only from warnings up (JAX logs at INFO that no TPU
    backend was found, which reads as an error on every CPU or GPU host)."""
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stdout,
        force=True,  # absl.app has installed its own handler by now
    )
    quiet_libraries()


def quiet_libraries() -> None:
    """JAX's, absl's, Orbax's and grain's logs from warnings up (a JAX plugin that cannot start
    is `xlpretrain.core.quiet`'s)."""
    for library in ("absl", "jax", "orbax", "grain"):
        logging.getLogger(library).setLevel(logging.WARNING)


def name() -> str:
    """`python -m xlpretrain.train` → `xlpretrain.train`, as the error lines name it."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is None:
        return os.path.basename(sys.argv[0])
    return spec.name.removesuffix(".__main__")


def exit_with(message: str, code: int = USAGE, kind: str = "error") -> NoReturn:
    """Prints `PROGRAM: KIND: message` (its first line) to stderr and exits with `code`."""
    first = message.strip().splitlines()[0] if message.strip() else "unknown error"
    print(f"{name()}: {kind}: {first}", file=sys.stderr, flush=True)
    sys.exit(code)


def describe(error: BaseException) -> str:
    """An error as WHAT (WHERE): an OSError of the system (no such file, permission denied) as
    its reason and the path, anything else as its message."""
    if isinstance(error, OSError) and error.strerror and error.filename is not None:
        return f"{error.strerror} ({error.filename})"
    return str(error) or type(error).__name__


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (`--help` still shows the usage)."""

    def error(self, message: str) -> NoReturn:
        exit_with(message)


def report(error: BaseException) -> NoReturn:
    """Ends the program with `error` in one line and exit status 2; with its traceback where
    `XLPRETRAIN_TRACEBACK=1`, so that a bug that surfaces as a `ValueError` or `OSError` can
    still be traced."""
    if os.environ.get("XLPRETRAIN_TRACEBACK") == "1":
        raise error
    exit_with(describe(error))


@contextlib.contextmanager
def reported(errors: tuple[type[BaseException], ...] = USER_ERRORS) -> Iterator[None]:
    """`errors` raised in the block end the program in one line with exit status 2; Ctrl-C in
    one line with 130."""
    try:
        yield
    except KeyboardInterrupt:
        exit_with("aborted (Ctrl-C)", INTERRUPTED, kind="stopped")
    except errors as error:
        report(error)


def run(main: Callable[[], int | None]) -> NoReturn:
    """A program's `__main__`: `main()`, its user errors reported in one line, its return value
    the exit status."""
    with reported():
        code = main()
    sys.exit(code)


def run_absl(define: Callable[[], None], main: Callable[[Sequence[str]], None]) -> None:
    """A command of absl flags: `define` them, then `main` with them parsed from `sys.argv`; a
    flag error, and the user errors `main` raises, end it in one line with exit status 2."""
    from absl import app, flags

    def parse(argv: list[str]) -> list[str]:
        try:
            return flags.FLAGS(argv)
        except flags.Error as error:
            exit_with(str(error))

    def reporting(argv: Sequence[str]) -> None:
        with reported():
            main(argv)

    define()
    app.run(reporting, flags_parser=parse)
