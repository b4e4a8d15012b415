"""Where `prepare`'s pieces run: here one after another, in worker processes
(`--workers`), or as an Apache Beam pipeline (`--beam`); each runs the same `shards.run_task`,
so the store's bytes do not depend on the runner.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
from collections.abc import Sequence

from xlpretrain.core.errors import require
from xlpretrain.data.prepare.inputs import Task
from xlpretrain.data.prepare.readers import Reading
from xlpretrain.data.prepare.shards import run_task


def run_pieces(
    tasks: Sequence[Task],
    out: str,
    reading: Reading,
    workers: int = 1,
    beam_options: Sequence[str] | None = None,
) -> None:
    """Runs `tasks` into the store `out`: as a Beam pipeline with `beam_options` (a list, e.g.
    `["--runner=DirectRunner"]`), else in `workers` processes, else here."""
    if beam_options is not None:
        run_with_beam(tasks, out, reading, beam_options)
    elif workers > 1 and len(tasks) > 1:
        spawn = multiprocessing.get_context("spawn")  # no JAX here, but stay safe with threads
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=spawn) as pool:
            jobs = [pool.submit(run_task, task, out, reading) for task in tasks]
            for job in jobs:
                job.result()
    else:
        for task in tasks:
            run_task(task, out, reading)


def run_with_beam(
    tasks: Sequence[Task], out: str, reading: Reading, options: Sequence[str]
) -> None:
    """The shards as an Apache Beam pipeline: one element per task, spread by a reshuffle."""
    beam = require("apache_beam", "--beam")
    pipeline_options = require("apache_beam.options.pipeline_options", "--beam")
    with beam.Pipeline(options=pipeline_options.PipelineOptions(list(options))) as pipeline:
        _ = (
            pipeline
            | "shards" >> beam.Create(list(tasks))
            | "spread" >> beam.Reshuffle()
            | "tokenize" >> beam.Map(run_task, out, reading)
        )
