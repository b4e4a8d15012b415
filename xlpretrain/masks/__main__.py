"""`python -m xlpretrain.masks --objective NAME --example "…" [--json] [--png FILE]`.

NAME is an objective (its first declared mask is shown) or one of the masks an objective
declares (`btmlm_generate`, `veco_cross`, …); the example is laid out as that mask's rows are.
"""

from __future__ import annotations

import json
import sys

from xlpretrain.core import programs
from xlpretrain.masks import catalog
from xlpretrain.masks.show import describe, format_text, plot


def main(argv: list[str] | None = None) -> None:
    programs.quiet_libraries()
    known = catalog.choices()
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
