"""`python -m xlpretrain.masks --objective NAME --example "…" [--json] [--png FILE]`.

NAME is an objective (its first declared mask is shown) or one of the masks an objective
declares (`btmlm_generate`, `veco_cross`, …); the example is laid out as that mask's rows are.
"""

from __future__ import annotations

import json
import sys

from xlpretrain import objectives
from xlpretrain.core import programs
from xlpretrain.masks import AttentionMask
from xlpretrain.masks.show import describe, format_text, plot
from xlpretrain.training import cli


def choices() -> dict[str, tuple[str, AttentionMask]]:
    """Every name the CLI accepts → (the objective, the mask): mask names first, so an
    objective named like one of its masks (btmlm) shows that mask."""
    by_objective = {name: (name, o.masks[0]) for name, o in objectives.REGISTRY.items()}
    by_mask: dict[str, tuple[str, AttentionMask]] = {}
    for name, objective in objectives.REGISTRY.items():
        for mask in objective.masks:
            by_mask.setdefault(mask.name, (name, mask))  # the first objective that runs it
    return {**by_objective, **by_mask}


def main(argv: list[str] | None = None) -> None:
    cli.quiet_libraries()
    known = choices()
    parser = programs.ArgumentParser(
        prog="python -m xlpretrain.masks", description="Show an objective's attention mask."
    )
    parser.add_argument("--objective", required=True, choices=sorted(known))
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
    objective, mask = known[args.objective]
    info = describe(mask, args.example, args.ratio, args.layers, objective)
    print(json.dumps(info) if args.json else format_text(info))
    if args.png:
        plot(info, args.png)
        print(f"wrote {args.png}", file=sys.stderr)


if __name__ == "__main__":
    programs.run(main)
