"""``python -m xlpretrain.convert {from-hf,to-hf} SRC DST``: see ``docs/convert.md``."""

from __future__ import annotations

import argparse
import logging
import sys

from xlpretrain.convert import from_hf, to_hf


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m xlpretrain.convert",
        description="Convert between Hugging Face XLM-R and xlpretrain checkpoints.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    pull = commands.add_parser(
        "from-hf",
        help="HF XLMRobertaForMaskedLM folder -> xlpretrain checkpoint folder",
        description="SRC: a folder with config.json, model.safetensors or pytorch_model.bin "
        "and optionally sentencepiece.bpe.model. DST: a new xlpretrain checkpoint folder "
        "(model.json, params/, tokenizer.model).",
    )
    pull.add_argument("src", metavar="SRC")
    pull.add_argument("dst", metavar="DST")
    pull.add_argument(
        "--allow-missing-head",
        action="store_true",
        help="accept a bare encoder (XLMRobertaModel, no lm_head.*) and initialise a new MLM head",
    )
    push = commands.add_parser(
        "to-hf",
        help="xlpretrain checkpoint folder or training workdir -> HF folder",
        description="SRC: an xlpretrain checkpoint folder, or a training workdir (its latest "
        "checkpoint). DST: a new HF XLMRobertaForMaskedLM folder (config.json, "
        "model.safetensors, sentencepiece.bpe.model when there is a tokenizer).",
    )
    push.add_argument("src", metavar="SRC")
    push.add_argument("dst", metavar="DST")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    logging.getLogger("absl").setLevel(logging.WARNING)
    try:
        if args.command == "from-hf":
            model = from_hf(args.src, args.dst, allow_missing_head=args.allow_missing_head)
        else:
            model = to_hf(args.src, args.dst)
    except (ValueError, FileNotFoundError, FileExistsError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    c = model.config
    print(
        f"wrote {args.dst}: {c.num_layers} layers, hidden {c.hidden_size}, {c.num_heads} heads, "
        f"vocab {c.vocab_size}, tokenizer: {'yes' if model.tokenizer else 'no'}"
    )


if __name__ == "__main__":
    main()
