"""Showing a mask on a written example, like the papers' figures: as a grid, as JSON, as a PNG,
and the inputs each token depends on after several layers (the transitive closure)."""

from __future__ import annotations

import math

import numpy as np

from xlpretrain.data.pretraining.batch import SIDE_PLACEHOLDER, SIDE_PSEUDO
from xlpretrain.masks import AttentionMask, ExampleLayout, materialize

SIDE_NAMES = ("source", "target", "placeholder", "pseudo", "tag")
PAIR_SEPARATOR = " ||| "
MASK_TOKEN = "<mask>"


def example_meta(
    layout: ExampleLayout, example: str, ratio: float = 0.15
) -> tuple[list[str], dict]:
    """Tokens (whitespace-split words) and metadata of `example` laid out by `layout`
    (`ExampleLayout` names each form). `<mask>` marks a masked token; `|||` separates the
    two sides of a pair."""
    parts = [part.split() for part in example.split(PAIR_SEPARATOR.strip())]
    if len(parts) > 2 or not all(parts):
        raise ValueError(
            f"expected 'A' or 'A{PAIR_SEPARATOR}B' with non-empty sides, got {example!r}"
        )
    tokens, side, segment = [], [], []

    def add(words: list[str], side_id: int, segment_id: int) -> None:
        tokens.extend(words)
        side.extend([side_id] * len(words))
        segment.extend([segment_id] * len(words))

    def need(count: int, form: str) -> None:
        if len(parts) != count:
            raise ValueError(f"the {layout.value} layout needs {form}, got {example!r}")

    a = parts[0]
    if layout is ExampleLayout.SEGMENTS:
        for number, words in enumerate(parts, start=1):
            add(["<s>", *words, "</s>"], 0, number)
    elif layout is ExampleLayout.SEGMENT_PAIR:
        need(2, f"a pair: 'X{PAIR_SEPARATOR}Y'")
        add(["<s>", *a, "</s>"], 0, 1)
        add(["<s>", *parts[1], "</s>"], 1, 2)
    elif layout is ExampleLayout.PAIR:
        need(2, f"a pair: 'A{PAIR_SEPARATOR}B'")
        add(["<s>", *a, "</s>"], 0, 1)
        add(["</s>", *parts[1], "</s>"], 1, 1)
    elif layout is ExampleLayout.PLACEHOLDERS:
        need(1, "the source only (placeholders are appended)")
        add(["<s>", *a, "</s>"], 0, 1)
        add([MASK_TOKEN] * math.ceil(ratio * len(a)), SIDE_PLACEHOLDER, 1)
    else:
        need(2, f"'SOURCE{PAIR_SEPARATOR}PSEUDO TOKENS'")
        add(["<s>", *a, "</s>"], 0, 1)
        add(parts[1], SIDE_PSEUDO, 1)
    is_masked = [
        int(t == MASK_TOKEN and s != SIDE_PLACEHOLDER) for t, s in zip(tokens, side, strict=True)
    ]
    pairs = [1] * len(segment) if layout is ExampleLayout.SEGMENT_PAIR else segment
    meta = {
        "segment_ids": np.array([segment]),
        "pair_ids": np.array([pairs]),
        "side": np.array([side]),
        "is_masked": np.array([is_masked]),
        "positions": np.array([_positions(segment)]),
    }
    return tokens, meta


def _positions(segment: list[int]) -> list[int]:
    """Positions from 2, restarting at each new segment (XLM-R's offset)."""
    positions, previous, current = [], None, 1
    for seg in segment:
        current = 2 if seg != previous else current + 1
        positions.append(current)
        previous = seg
    return positions


def depends_on(allowed: np.ndarray, layers: int) -> np.ndarray:
    """Which inputs each token's state depends on after `layers` layers (with residuals):
    the transitive closure of `allowed` ∪ identity, `layers` steps deep."""
    step = allowed | np.eye(len(allowed), dtype=bool)
    reach = np.eye(len(allowed), dtype=bool)
    for _ in range(layers):
        reach = (step.astype(np.int64) @ reach.astype(np.int64)) > 0
    return reach


def describe(
    mask: AttentionMask, example: str, ratio: float = 0.15, layers: int = 12, objective: str = ""
) -> dict:
    """Everything the CLI prints about `mask` on `example`, as one JSON-able dict."""
    tokens, meta = example_meta(mask.layout, example, ratio)
    allowed = np.asarray(materialize(mask.fn, meta))[0, 0]
    return {
        "objective": objective or mask.name,
        "mask": mask.name,
        "tokens": tokens,
        "side": [SIDE_NAMES[s] for s in meta["side"][0]],
        "is_masked": meta["is_masked"][0].tolist(),
        "is_padding": (meta["segment_ids"][0] == 0).astype(int).tolist(),
        "allowed": allowed.astype(int).tolist(),
        "layers": layers,
        "depends_on": depends_on(allowed, layers).astype(int).tolist(),
    }


def format_text(info: dict) -> str:
    """The mask as a grid: row = query (attends to) the columns marked '#'. Columns are keys,
    numbered like the rows, the number written downwards (tens above units past 9)."""
    tokens, sides = info["tokens"], info["side"]
    numbers = [str(j).rjust(len(str(len(tokens) - 1))) for j in range(len(tokens))]
    index, token, side = max(3, len(numbers[-1])), max(map(len, tokens)), max(map(len, sides))
    header = [" " * (index + token + side + 7) + " ".join(d) for d in zip(*numbers, strict=True)]
    header[-1] = f"{'query':>{index + 1 + token}} {'':{side}} key " + header[-1].lstrip()

    def grid(cells: list[list[int]], mark: str) -> list[str]:
        return [
            f"{i:>{index}} {tokens[i]:>{token}} {sides[i]:{side}}     "
            + " ".join(mark if a else "." for a in row)
            for i, row in enumerate(cells)
        ]

    return "\n".join(
        [
            f"{_title(info)}: rows (queries) attend to the columns (keys) marked '#'",
            *header,
            *grid(info["allowed"], "#"),
            f"after {info['layers']} layers, each row depends on the columns marked '@':",
            *header,
            *grid(info["depends_on"], "@"),
        ]
    )


def _title(info: dict) -> str:
    """'camlm', or 'btmlm (btmlm_generate mask)' where an objective runs several masks."""
    if info["mask"] == info["objective"]:
        return info["mask"]
    return f"{info['objective']} ({info['mask']} mask)"


def plot(info: dict, path: str) -> None:
    """Draws the mask like ERNIE-M's Figure 2: rows attend to columns, tokens as tick labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tokens = info["tokens"]
    labels = [f"{t} ({s[0]})" for t, s in zip(tokens, info["side"], strict=True)]
    size = max(5.0, 1.0 + 0.38 * len(tokens))  # room for the title on short examples
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(np.array(info["allowed"]), cmap="Blues", vmin=0, vmax=1.3)
    ax.set_xticks(range(len(tokens)), labels, rotation=90)
    ax.set_yticks(range(len(tokens)), labels)
    ax.set_xticks(np.arange(-0.5, len(tokens)), minor=True)
    ax.set_yticks(np.arange(-0.5, len(tokens)), minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query")
    ax.set_title(f"{_title(info)} attention mask", wrap=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
