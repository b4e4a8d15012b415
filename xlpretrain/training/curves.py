"""A picture of a run, `WORKDIR/curves.png`: the training loss of each objective, and each
held-out figure per evaluation beside the references that need no training (the training
text's unigram model, the parameters at step 0, chance; `training.evaluation`), so that
whether and when a run learned anything shows at a glance, without TensorBoard.

Drawn from `metrics.jsonl` read whole, so a resumed run's picture covers every step. Built on
a bare `Figure` with matplotlib's Agg canvas: no display, and nothing set in pyplot's global
state of a program that imports the library.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from xlpretrain.eval.scripts import group_label
from xlpretrain.training.metrics import read_metrics

if TYPE_CHECKING:  # matplotlib is imported when a picture is drawn, not with the loop
    from matplotlib.figure import Figure

FILENAME = "curves.png"
# How each reference's line is drawn, in its figure's colour.
REFERENCE_STYLES = {"unigram": "--", "step 0": ":", "chance": "-."}


def write_curves(workdir: str, baselines: Mapping[str, Mapping[str, float]]) -> str | None:
    """Draws `WORKDIR/curves.png` from the run's whole `metrics.jsonl`; returns its path, or
    None when no step was logged."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    records = read_metrics(workdir)
    if not records:
        return None
    figure = curves_figure(records, baselines, title=os.path.basename(os.path.abspath(workdir)))
    path = os.path.join(workdir, FILENAME)
    FigureCanvasAgg(figure).print_png(path)
    return path


def curves_figure(
    records: Sequence[Mapping[str, float]],
    baselines: Mapping[str, Mapping[str, float]],
    title: str = "",
) -> Figure:
    """One panel for the training loss per objective, then one per held-out measure (loss,
    accuracy, retrieval@1) with a line per objective or pair group and a horizontal line per
    reference; panels share the step axis."""
    from matplotlib.figure import Figure

    # title, y label, series, marker (held-out figures are few points: each one shows)
    panels = [("training loss", "loss", _training_series(records), None)]
    for what, label in (("loss", "loss"), ("accuracy", "accuracy"), ("retrieval", "retrieval@1")):
        if series := _held_out_series(records, baselines, what):
            panels.append((f"held-out {label}", label, series, "o"))
    names = sorted({name for _, _, series, _ in panels for name in series})
    colours = {name: f"C{index % 10}" for index, name in enumerate(names)}
    figure = Figure(figsize=(10, 1.0 + 3.0 * len(panels)), dpi=100, layout="constrained")
    axes = figure.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (panel_title, ylabel, series, marker) in zip(axes, panels, strict=True):
        for name, (steps, values, references) in series.items():
            ax.plot(
                steps,
                values,
                color=colours[name],
                marker=marker,
                markersize=4,
                label=name,
            )
            for reference, value in references.items():
                ax.axhline(
                    value,
                    color=colours[name],
                    linewidth=1,
                    linestyle=REFERENCE_STYLES.get(reference, "--"),
                    label=f"{name}: {reference}",
                )
        ax.set_title(panel_title)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    axes[-1].set_xlabel("step")
    if title:
        figure.suptitle(title)
    return figure


Series = dict[str, tuple[list[int], list[float], dict[str, float]]]


def _line(records: Sequence[Mapping[str, float]], key: str) -> tuple[list[int], list[float]]:
    """Steps and finite values of `key`, over the records that have it."""
    points = [(r["step"], r[key]) for r in records if key in r and math.isfinite(r[key])]
    return [s for s, _ in points], [v for _, v in points]


def _training_series(records: Sequence[Mapping[str, float]]) -> Series:
    """`loss/<objective>` by objective, or the total `loss` where none is logged."""
    keys = sorted({k for r in records for k in r if k.count("/") == 1 and k.startswith("loss/")})
    named = {key.removeprefix("loss/"): key for key in keys} or {"loss": "loss"}
    lines = {name: _line(records, key) for name, key in named.items()}
    return {name: (steps, values, {}) for name, (steps, values) in lines.items() if steps}


def _held_out_series(
    records: Sequence[Mapping[str, float]], baselines: Mapping[str, Mapping[str, float]], what: str
) -> Series:
    """The `eval/<what>/…` figures with their references. For retrieval, the average over all
    pair files and the groups that have references (across scripts, within a script); each
    file's own figure is left to metrics.jsonl, too many lines to read."""
    prefix = f"eval/{what}"
    keys = sorted({k for r in records for k in r if k == prefix or k.startswith(prefix + "/")})
    if what == "retrieval":
        keys = [k for k in keys if k in baselines]
    series: Series = {}
    for key in keys:
        name = key.removeprefix(prefix).removeprefix("/")
        name = (group_label(name) if name else "all pairs") if what == "retrieval" else name
        steps, values = _line(records, key)
        if steps:
            series[name] = (steps, values, dict(baselines.get(key, {})))
    return series
