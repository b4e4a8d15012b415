"""Start a multi-process run: `python -m xlpretrain.launch local --processes N
--devices-per-process D -- --config … --workdir …`.

`local` starts N CPU processes of `python -m xlpretrain.train --distributed` on this machine,
each with D fake devices, joined through `jax.distributed` on localhost: the same program a
cluster runs, so multi-process behaviour (per-host rows, process-0 logging, collective
checkpointing) can be exercised anywhere. Cluster launchers live in the repository's `launch/`.
Output lines are prefixed with the process id; if one process fails, the others are stopped
and its exit code is returned.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading

from xlpretrain.core import programs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def process_env(index: int, processes: int, devices: int, port: int) -> dict[str, str]:
    env = dict(os.environ)
    # The device count after the caller's own XLA flags, which it overrides and which stay.
    device_count = f"--xla_force_host_platform_device_count={devices}"
    env.update(
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=" ".join(filter(None, [os.environ.get("XLA_FLAGS", ""), device_count])),
        JAX_COORDINATOR_ADDRESS=f"localhost:{port}",
        JAX_NUM_PROCESSES=str(processes),
        JAX_PROCESS_ID=str(index),
        PYTHONUNBUFFERED="1",
    )
    return env


def _relay(index: int, stream) -> None:
    for line in stream:
        sys.stdout.write(f"[{index}] {line}")
        sys.stdout.flush()


def run_local(processes: int, devices: int, train_args: list[str], port: int = 0) -> int:
    """Runs the processes to the end; returns the first non-zero exit code, or 0."""
    port = port or free_port()
    command = [sys.executable, "-m", "xlpretrain.train", "--distributed", *train_args]
    children = [
        subprocess.Popen(
            command,
            env=process_env(i, processes, devices, port),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(processes)
    ]
    relays = [
        threading.Thread(target=_relay, args=(i, child.stdout), daemon=True)
        for i, child in enumerate(children)
    ]
    for relay in relays:
        relay.start()
    code = 0
    try:
        pending = list(children)
        while pending:
            for child in list(pending):
                try:
                    result = child.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    continue
                pending.remove(child)
                if result and not code:
                    code = result
                    for other in pending:  # a peer that failed leaves the rest waiting forever
                        other.terminate()
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
        for relay in relays:
            relay.join(timeout=5.0)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = programs.ArgumentParser(prog="python -m xlpretrain.launch", description=__doc__)
    sub = parser.add_subparsers(dest="mode", required=True)
    local = sub.add_parser("local", help="N CPU processes on this machine")
    local.add_argument("--processes", type=int, required=True)
    local.add_argument("--devices-per-process", type=int, default=1)
    local.add_argument("--port", type=int, default=0, help="coordinator port (default: free)")
    local.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then train's arguments")
    args = parser.parse_args(argv)
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    if args.processes < 1 or args.devices_per_process < 1:
        parser.error("--processes and --devices-per-process must be >= 1")
    if not train_args:
        parser.error("give train's arguments after --: -- --config configs/demo.py --workdir W")
    return run_local(args.processes, args.devices_per_process, train_args, args.port)


if __name__ == "__main__":
    programs.run(main)
