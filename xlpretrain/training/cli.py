"""What the training command lines share, on top of `xlpretrain.core.programs` (how every program
ends): absl flags parsed without tracebacks, a config key's error naming the nearest valid key,
and a log that starts with the run rather than with JAX's start-up chatter.

A mistake the user can fix (a mistyped key, a missing file, a bad value, a corpus that cannot
be read) is one line on stderr, `PROGRAM: error: WHAT (WHERE)[; did you mean …?]`, and exit
status 2, as argparse and most Unix tools do. A run that fails after it started (divergence)
exits 1 (`FAILED`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import jax
from absl import app, flags

from xlpretrain.core import programs
from xlpretrain.core.errors import ConfigError
from xlpretrain.core.programs import FAILED, INTERRUPTED, exit_with, report, reported
from xlpretrain.training.checkpoint import CheckpointError
from xlpretrain.training.config_files import load_config, shipped_config
from xlpretrain.training.config_keys import unknown_key
from xlpretrain.training.divergence import DivergenceError
from xlpretrain.training.preemption import Interrupted
from xlpretrain.training.workdir import check_workdir

log = logging.getLogger("xlpretrain")
P = TypeVar("P")  # a task's plan
T = TypeVar("T")  # the task built from it


@contextlib.contextmanager
def _aborted_on_ctrl_c() -> Iterator[None]:
    """A Ctrl-C the program does not handle itself (before training, or a second one during
    it) ends it with one line and exit status 130 rather than a traceback."""
    try:
        yield
    except KeyboardInterrupt:
        exit_with(
            "aborted (Ctrl-C); nothing was saved after the last checkpoint",
            INTERRUPTED,
            kind="stopped",
        )


def _config_argument(argv: Sequence[str], name: str) -> str | None:
    """The value of the last `--name X` or `--name=X` in `argv` (the one absl keeps)."""
    found = None
    for index, arg in enumerate(argv):
        if arg == f"--{name}" and index + 1 < len(argv):
            found = argv[index + 1]
        elif arg.startswith(f"--{name}="):
            found = arg.split("=", 1)[1]
    return found


def _shipped_configs_as_files(argv: Sequence[str], name: str) -> list[str]:
    """`argv` with each `--name SPEC` that names a shipped config rather than a file given as
    that config's file, which absl's config flag loads."""

    def as_file(spec: str) -> str:
        path, colon, arg = spec.partition(":")
        shipped = None if os.path.isfile(path) else shipped_config(path)
        return f"{shipped}{colon}{arg}" if shipped else spec

    out, given = [], False
    for arg in argv:
        if given:
            arg, given = as_file(arg), False
        elif arg == f"--{name}":
            given = True
        elif arg.startswith(f"--{name}="):
            arg = f"--{name}={as_file(arg.split('=', 1)[1])}"
        out.append(arg)
    return out


def _overrides(argv: Sequence[str], name: str) -> list[tuple[str, str | None]]:
    """`(key path, value)` of every `--name.a.b[=v]` in `argv`, in order."""
    found = []
    for arg in argv:
        if arg.startswith(f"--{name}."):
            key, _, value = arg[len(name) + 3 :].partition("=")
            found.append((key, value if "=" in arg else None))
    return found


def describe_flag_error(argv: Sequence[str], error: BaseException, config_flag: str) -> str:
    """One line for an error raised while parsing `argv`: which flag or config key, what is
    wrong with it, and the nearest valid names."""
    spec = _config_argument(argv, config_flag)
    if spec is not None:
        try:
            config = load_config(spec)
        except FileNotFoundError as missing:
            return str(missing)
        except Exception as failed:  # noqa: BLE001 - whatever the config file raises
            return f"--{config_flag} {spec}: {type(failed).__name__}: {failed}"
        for key, given in _overrides(argv, config_flag):
            if why := unknown_key(config, key):
                return why
            if given is None:
                return f"--{config_flag}.{key}: missing value (--{config_flag}.{key}=VALUE)"
        match = re.match(rf"flag --{config_flag}\.([\w.]+)=(.*?): (.*)", str(error))
        if match:
            key, given, why = match.groups()
            return f"config key '{key}': cannot read {given!r} ({why})"
    text = str(error)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def parse_flags(argv: list[str], config_flag: str = "config") -> list[str]:
    """absl's flags from `argv`, the config file loaded; a flag error ends the program in one
    line naming the flag or config key, with exit status 2."""
    argv = _shipped_configs_as_files(argv, config_flag)
    try:
        rest = flags.FLAGS(argv)
        # A config file that fails to load is reported when the config is first read.
        if config_flag in flags.FLAGS and flags.FLAGS[config_flag].value is not None:
            _ = flags.FLAGS[config_flag].value.keys()
    except Exception as error:  # noqa: BLE001 - absl and ml_collections raise many types
        exit_with(describe_flag_error(argv, error, config_flag))
    return rest


# What a user can fix before a run starts: one line, exit status 2, nothing left on disk (a
# checkpoint that cannot be read, too).
USER_ERRORS = (*programs.USER_ERRORS, CheckpointError)


def run(main: Callable[[list[str]], None], config_flag: str = "config") -> None:
    """`absl.app.run(main)` with flag errors, and the user errors `main` raises, as one line and
    exit status 2."""

    def reporting(argv: list[str]) -> None:
        with reported(USER_ERRORS):
            main(argv)

    app.run(reporting, flags_parser=lambda argv: parse_flags(argv, config_flag))


def run_task(
    workdir: str,
    resolve: Callable[[], P],
    build: Callable[[P], T],
    run: Callable[[T], object],
    log_name: str,
) -> None:
    """A training task from its command line: the config resolved into the task's plan before
    anything touches the disk, then the task built from the plan, `WORKDIR/<log_name>` written
    by process 0, and every way it can end reported in
    one line on stderr — a user error before the first step (exit 2, and what this invocation
    added to the workdir removed), a checkpoint that cannot be read (2), divergence (1),
    Ctrl-C (130: saved after the step, or aborted by a second one)."""
    with _aborted_on_ctrl_c():
        try:
            plan = resolve()
        except ConfigError as error:
            report(error)
        before = set(os.listdir(workdir)) if os.path.isdir(workdir) else None
        log_path, handler = os.path.join(workdir, log_name), None
        try:
            check_workdir(workdir)
            handler = _log_to(log_path)
            task = build(plan)
        except USER_ERRORS as error:
            if handler is not None:
                log.removeHandler(handler)
                handler.close()
            _remove_created(workdir, before)
            _record(log_path, error)
            report(error)
        try:
            run(task)
        except DivergenceError as error:
            _record(log_path, error)
            exit_with(str(error), FAILED)
        except USER_ERRORS as error:  # found at resume: a checkpoint that cannot be read
            _record(log_path, error)
            report(error)
        except Interrupted as stopped:
            _record(log_path, stopped)
            exit_with(str(stopped), INTERRUPTED, kind="stopped")


def _log_to(path: str) -> logging.Handler | None:
    """The run's log file, for process 0 (one log per run); other processes log only
    problems."""
    if jax.process_index() != 0:
        log.setLevel(logging.WARNING)
        return None
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    return handler


def _remove_created(workdir: str, before: set[str] | None) -> None:
    """Removes what this invocation added to `workdir` (the folder too if it made it)."""
    if jax.process_index() != 0 or not os.path.isdir(workdir):
        return
    if before is None:
        shutil.rmtree(workdir, ignore_errors=True)
        return
    for name in set(os.listdir(workdir)) - before:
        path = os.path.join(workdir, name)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.remove(path)


def _record(path: str, error: BaseException) -> None:
    """Why the run ended, in its log file too where it has one."""
    if jax.process_index() == 0 and os.path.isfile(path):
        with open(path, "a") as f:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            f.write(f"{stamp} ERROR {type(error).__name__}: {error}\n")
