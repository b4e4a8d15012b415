"""Attention masks as pure functions of per-token metadata.

A mask is ``allowed(q, k) -> bool array``: ``q`` and ``k`` are ``Meta`` dicts of integer
arrays taken from the Batch (``segment_ids`` (0 = padding), ``pair_ids``, ``side``
(0 source/monolingual, 1 target, 2 placeholder, 3 pseudo), ``positions``, ``is_masked``).
``materialize`` adds ``index`` (the token's place in its row, FlexAttention's ``q_idx`` /
``kv_idx``) so a mask can single out a token itself.
Like PyTorch FlexAttention's ``mask_mod``, the function only sees broadcastable arrays, so
the same definition is materialised to ``[B, 1, L, L]`` for the reference XLA path and for
tests (``q`` arrays as ``[B, L, 1]``, ``k`` arrays as ``[B, 1, L]``), and will later be
evaluated tile by tile inside fused kernels and reduced to block sparsity. Masks therefore
use elementwise ``jnp`` operations only and never index or reshape their inputs.

Additive score modifications (relative position bias) follow the same idea as ``ScoreMod``:
``score_mod(q_meta, k_meta, params) -> [B, H, Lq, Lk]`` float logits added before softmax.
"""

import argparse
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Meta = Mapping[str, jax.Array]
MaskFn = Callable[[Meta, Meta], jax.Array]
ScoreMod = Callable[[Meta, Meta, Any], jax.Array]


def materialize(mask_fn: MaskFn, meta: Meta, k_meta: Meta | None = None) -> jax.Array:
    """Evaluates ``mask_fn`` on every (query, key) pair: bool ``[B, 1, Lq, Lk]``.

    ``k_meta`` defaults to ``meta`` (self-attention); pass it for cross-attention, where the
    keys come from another sequence.
    """
    k_meta = meta if k_meta is None else k_meta
    batch, q_len = next(iter(meta.values())).shape[:2]
    k_len = next(iter(k_meta.values())).shape[1]
    q = {name: jnp.asarray(v)[:, :, None] for name, v in meta.items()}
    k = {name: jnp.asarray(v)[:, None, :] for name, v in k_meta.items()}
    q["index"] = jnp.arange(q_len)[None, :, None]
    k["index"] = jnp.arange(k_len)[None, None, :]
    allowed = jnp.broadcast_to(mask_fn(q, k), (batch, q_len, k_len))
    return allowed[:, None].astype(bool)


def mmlm(q: Meta, k: Meta) -> jax.Array:
    """Monolingual MLM: a token sees its own packed segment only.

    Padding (segment 0) sees only padding, so no row of the mask is empty and softmax stays
    finite.
    """
    return q["segment_ids"] == k["segment_ids"]


def tlm(q: Meta, k: Meta) -> jax.Array:
    """Translation LM: a pair ``<s> A </s></s> B </s>`` is one segment, so both sides see
    each other — the same rule as MMLM, registered separately because objectives name it."""
    return mmlm(q, k)


SIDE_PLACEHOLDER = 2  # xlpretrain.data.batch.SIDE_* (masks sit below data)
SIDE_TAG = 4


def camlm(q: Meta, k: Meta) -> jax.Array:
    """ERNIE-M cross-attention MLM: a masked token sees itself and the *unmasked tokens of the
    other side* only, p(x_m | X \\ (M ∪ X_src)) and symmetrically for the target.

    To hold at every depth, the unmasked tokens of a side see only unmasked tokens of their own
    side: their states never carry the other side or any masked token, so nothing a masked token
    reads — directly or through any number of layers — is outside its conditioning set. Masked
    tokens are seen by nobody but themselves.
    """
    same_pair = q["segment_ids"] == k["segment_ids"]
    q_masked, k_masked = q["is_masked"] > 0, k["is_masked"] > 0
    same_side = q["side"] == k["side"]
    itself = q["index"] == k["index"]
    masked_row = q_masked & ((~k_masked & ~same_side) | itself)
    unmasked_row = ~q_masked & ~k_masked & same_side
    return same_pair & (masked_row | unmasked_row)


def btmlm_generate(q: Meta, k: Meta) -> jax.Array:
    """ERNIE-M back-translation, pass 1: the source sees itself; each placeholder sees the
    source and itself only, so pseudo tokens are decoded in parallel from the source alone.
    A target-language tag (when the run uses tags instead of language embeddings) sees the
    source and the tag, and is seen by the placeholders."""
    same_segment = q["segment_ids"] == k["segment_ids"]
    q_placeholder = q["side"] == SIDE_PLACEHOLDER
    k_placeholder = k["side"] == SIDE_PLACEHOLDER
    q_source = (q["side"] != SIDE_PLACEHOLDER) & (q["side"] != SIDE_TAG)
    k_tag = k["side"] == SIDE_TAG
    itself = q["index"] == k["index"]
    return same_segment & ~(q_source & k_tag) & (~k_placeholder | (q_placeholder & itself))


def btmlm(q: Meta, k: Meta) -> jax.Array:
    """ERNIE-M back-translation, pass 2: MLM on the source with the pseudo tokens appended,
    attending across the whole unit as in TLM: p(x_m | X \\ M, P)."""
    return mmlm(q, k)


def veco_cross(q: Meta, k: Meta) -> jax.Array:
    """VECO cross-attention: a token of x reads the memory (the plain stream's last layer) of
    the *other* sequence of its pair, y, and vice versa; never its own sequence."""
    other = (q["pair_ids"] == k["pair_ids"]) & (q["segment_ids"] != k["segment_ids"])
    padding = (q["segment_ids"] == 0) & (k["segment_ids"] == 0)
    return (other & (k["segment_ids"] > 0)) | padding


def veco_causal(q: Meta, k: Meta) -> jax.Array:
    """VECO (ICLR version) CS-MLM: the s stream's self-attention is causal within a segment."""
    return mmlm(q, k) & (k["positions"] <= q["positions"])


MASKS: dict[str, MaskFn] = {
    "mmlm": mmlm,
    "tlm": tlm,
    "camlm": camlm,
    "btmlm_generate": btmlm_generate,
    "btmlm": btmlm,
    "veco_cross": veco_cross,
    "veco_causal": veco_causal,
}


def get(name: str) -> MaskFn:
    """Looks up a registered mask by objective name."""
    try:
        return MASKS[name]
    except KeyError:
        raise KeyError(f"unknown attention mask {name!r}; known: {sorted(MASKS)}") from None


# --- python -m xlpretrain.masks: show an objective's mask on an example -----------------------

SIDE_NAMES = ("source", "target", "placeholder", "pseudo", "tag")
PAIR_SEPARATOR = " ||| "
MASK_TOKEN = "<mask>"


def example_meta(objective: str, example: str, ratio: float = 0.15) -> tuple[list[str], dict]:
    """Tokens (whitespace-split words) and metadata of `example` laid out as `objective` lays
    out its rows: `<s> a </s>` (MMLM; `|||` packs a second segment), `<s> a </s></s> b </s>`
    (TLM, CAMLM), `<s> a </s>` + ⌈ratio·|a|⌉ placeholders (BTMLM pass 1), `<s> a </s>` + pseudo
    tokens `b` (BTMLM pass 2). `<mask>` marks a masked token."""
    get(objective)
    parts = [part.split() for part in example.split(PAIR_SEPARATOR.strip())]
    if len(parts) > 2 or not all(parts):
        raise ValueError(f"expected 'A' or 'A ||| B' with non-empty sides, got {example!r}")
    tokens, side, segment = [], [], []

    def add(words: list[str], side_id: int, segment_id: int) -> None:
        tokens.extend(words)
        side.extend([side_id] * len(words))
        segment.extend([segment_id] * len(words))

    a = parts[0]
    if objective == "mmlm":
        for number, words in enumerate(parts, start=1):
            add(["<s>", *words, "</s>"], 0, number)
    elif objective in ("veco_cross", "veco_causal"):
        if len(parts) != 2:
            raise ValueError(f"{objective} needs a pair: 'X{PAIR_SEPARATOR}Y'")
        add(["<s>", *a, "</s>"], 0, 1)
        add(["<s>", *parts[1], "</s>"], 1, 2)
    elif objective in ("tlm", "camlm"):
        if len(parts) != 2:
            raise ValueError(f"{objective} needs a pair: 'A{PAIR_SEPARATOR}B'")
        add(["<s>", *a, "</s>"], 0, 1)
        add(["</s>", *parts[1], "</s>"], 1, 1)
    elif objective == "btmlm_generate":
        if len(parts) != 1:
            raise ValueError("btmlm_generate takes the source only; placeholders are appended")
        add(["<s>", *a, "</s>"], 0, 1)
        add([MASK_TOKEN] * math.ceil(ratio * len(a)), SIDE_PLACEHOLDER, 1)
    elif objective == "btmlm":
        if len(parts) != 2:
            raise ValueError(f"btmlm needs 'SOURCE{PAIR_SEPARATOR}PSEUDO TOKENS'")
        add(["<s>", *a, "</s>"], 0, 1)
        add(parts[1], 3, 1)
    else:
        raise ValueError(f"no example layout for {objective!r}")
    is_masked = [
        int(t == MASK_TOKEN and s != SIDE_PLACEHOLDER) for t, s in zip(tokens, side, strict=True)
    ]
    meta = {
        "segment_ids": np.array([segment]),
        "pair_ids": np.ones((1, len(segment)), int)
        if objective.startswith("veco")
        else np.array([segment]),
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


def describe(objective: str, example: str, ratio: float = 0.15, layers: int = 12) -> dict:
    tokens, meta = example_meta(objective, example, ratio)
    allowed = np.asarray(materialize(get(objective), meta))[0, 0]
    return {
        "objective": objective,
        "tokens": tokens,
        "side": [SIDE_NAMES[s] for s in meta["side"][0]],
        "is_masked": meta["is_masked"][0].tolist(),
        "is_padding": (meta["segment_ids"][0] == 0).astype(int).tolist(),
        "allowed": allowed.astype(int).tolist(),
        "layers": layers,
        "depends_on": depends_on(allowed, layers).astype(int).tolist(),
    }


def format_text(info: dict) -> str:
    """The mask as a grid: row = query (attends to) the columns marked '#'."""
    tokens = info["tokens"]
    width = max(len(t) for t in tokens)
    lines = [f"{info['objective']}: rows attend to columns ('#')"]
    for i, token in enumerate(tokens):
        cells = " ".join("#" if a else "." for a in info["allowed"][i])
        lines.append(f"{i:>3} {token:>{width}} {info['side'][i][:3]} {cells}")
    lines.append(f"after {info['layers']} layers, each row depends on the columns marked '@':")
    for i, token in enumerate(tokens):
        cells = " ".join("@" if a else "." for a in info["depends_on"][i])
        lines.append(f"{i:>3} {token:>{width}} {info['side'][i][:3]} {cells}")
    return "\n".join(lines)


def plot(info: dict, path: str) -> None:
    """Draws the mask like ERNIE-M's Figure 2: rows attend to columns, tokens as tick labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tokens = info["tokens"]
    labels = [f"{t} ({s[0]})" for t, s in zip(tokens, info["side"], strict=True)]
    size = 1.0 + 0.38 * len(tokens)
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
    ax.set_title(f"{info['objective']} attention mask")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Show an objective's attention mask.")
    parser.add_argument("--objective", required=True, choices=sorted(MASKS))
    parser.add_argument(
        "--example", required=True, help="e.g. 'the cat <mask> sat ||| die Katze <mask>'"
    )
    parser.add_argument(
        "--ratio", type=float, default=0.15, help="btmlm_generate: placeholders per source token"
    )
    parser.add_argument("--layers", type=int, default=12, help="depth for the dependency view")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--png", help="also draw the mask to this PNG file")
    args = parser.parse_args(argv)
    try:
        info = describe(args.objective, args.example, args.ratio, args.layers)
    except ValueError as error:
        parser.error(str(error))
    print(json.dumps(info) if args.json else format_text(info))
    if args.png:
        plot(info, args.png)


if __name__ == "__main__":
    main()
