"""``python -m xlpretrain.convert {from-hf,to-hf,to-hf-seq2seq} SRC DST`` and ``python -m
xlpretrain.convert merge CKPT… --out DIR``: see ``docs/convert.md``."""

from __future__ import annotations

import argparse
import logging

from xlpretrain.convert import from_hf, merge, to_hf, to_hf_seq2seq
from xlpretrain.convert.merging import normalised, workdir_checkpoints
from xlpretrain.convert.seq2seq import decoder_layers_of
from xlpretrain.core import programs


def comma_list(kind: type):
    """An argparse type: ``1,2,3`` as a list of ``kind``."""

    def parse(text: str) -> list:
        try:
            return [kind(item) for item in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a comma-separated list of {kind.__name__}s"
            ) from None

    return parse


def add_conversion(
    commands: argparse._SubParsersAction, name: str, *, help: str, description: str
) -> argparse.ArgumentParser:
    """The command ``name SRC DST``: every conversion reads folder SRC into new folder DST."""
    command = commands.add_parser(name, help=help, description=description)
    command.add_argument("src", metavar="SRC")
    command.add_argument("dst", metavar="DST")
    return command


def main(argv: list[str] | None = None) -> None:
    parser = programs.ArgumentParser(
        prog="python -m xlpretrain.convert",
        description="Convert between Hugging Face XLM-R / ModernBERT / BERT and xlpretrain "
        "checkpoints; "
        "merge checkpoints of one model.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    pull = add_conversion(
        commands,
        "from-hf",
        help="HF XLMRobertaForMaskedLM, ModernBertForMaskedLM or BertForMaskedLM folder -> "
        "xlpretrain checkpoint folder",
        description="SRC: a folder with config.json, model.safetensors or pytorch_model.bin "
        "and optionally its tokenizer (sentencepiece.bpe.model, else tokenizer.json). DST: a "
        "new xlpretrain checkpoint folder (model.json, params/, tokenizer.model or "
        "tokenizer.json).",
    )
    pull.add_argument(
        "--allow-missing-head",
        action="store_true",
        help="accept a bare encoder (XLMRobertaModel, no lm_head.*) and initialise a new MLM head",
    )
    add_conversion(
        commands,
        "to-hf",
        help="xlpretrain checkpoint folder, training workdir or task workdir -> HF folder",
        description="SRC: an xlpretrain checkpoint folder, or a training workdir (its latest "
        "checkpoint), or a fine-tuning task's workdir (its selected parameters, exported as "
        "the backbone's sequence-classification, token-classification or question-answering "
        "class with its labels). "
        "DST: a new HF XLMRobertaForMaskedLM folder (ModernBertForMaskedLM for a ModernBERT "
        "model, BertForMaskedLM for a BERT one; config.json, model.safetensors, "
        "and sentencepiece.bpe.model or tokenizer.json when there is a tokenizer, a ModernBERT "
        "or BERT one's SentencePiece model as both); for an XLM-E workdir, its discriminator "
        "as an XLMRobertaModel (ModernBertModel, BertModel) folder.",
    )
    seq = add_conversion(
        commands,
        "to-hf-seq2seq",
        help="VECO checkpoint folder or training workdir -> HF EncoderDecoderModel folder",
        description="SRC: an xlpretrain checkpoint folder or training workdir of a model with "
        "VECO's cross-attention. DST: a new HF EncoderDecoderModel folder: XLM-R encoder (the "
        "plain stream), XLM-R causal decoder from the last N layers whose cross-attention is "
        "the pre-trained plug-in.",
    )
    seq.add_argument(
        "--decoder-layers",
        type=int,
        metavar="N",
        help="build the decoder from the last N layers (default: all)",
    )
    average = commands.add_parser(
        "merge",
        help="average checkpoints of one model -> xlpretrain checkpoint folder",
        description="CKPT: an xlpretrain checkpoint folder, a training workdir (its latest "
        "checkpoint) or one of its checkpoints, WORKDIR/checkpoints/N; all of one model (same "
        "model config, parameters, tokenizer and languages). DIR: a new checkpoint folder "
        "holding the parameter-wise (weighted) average, the inputs' tokenizer and languages.",
    )
    average.add_argument("sources", nargs="+", metavar="CKPT")
    average.add_argument("--out", required=True, metavar="DIR", help="the new checkpoint folder")
    average.add_argument(
        "--weights",
        type=comma_list(float),
        metavar="W1,W2,...",
        help="one weight per checkpoint, normalised to sum 1 (default: all equal)",
    )
    average.add_argument(
        "--steps",
        type=comma_list(int),
        metavar="N1,N2,...",
        help="average these checkpoints of the one workdir CKPT (WORKDIR/checkpoints/N), "
        "e.g. the decay phase's",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    programs.quiet_libraries()
    if args.command == "merge":
        return merge_command(args)
    if args.command == "from-hf":
        model = from_hf(args.src, args.dst, allow_missing_head=args.allow_missing_head)
    elif args.command == "to-hf":
        model = to_hf(args.src, args.dst)
    else:
        model = to_hf_seq2seq(args.src, args.dst, decoder_layers=args.decoder_layers)
    c = model.config
    layers = f"{c.num_layers} layers"
    if args.command == "to-hf-seq2seq":
        decoder = len(decoder_layers_of(c, args.decoder_layers))
        layers = f"encoder {c.num_layers} layers, decoder {decoder} layers"
    print(
        f"wrote {args.dst}: {layers}, hidden {c.hidden_size}, {c.num_heads} heads, "
        f"vocab {c.vocab_size}, tokenizer: {'yes' if model.tokenizer else 'no'}"
    )


def merge_command(args: argparse.Namespace) -> None:
    """``merge``: the sources (``--steps`` of one workdir, else as given) averaged into
    ``--out``."""
    sources = args.sources
    if args.steps is not None:
        if len(sources) != 1:
            raise ValueError(f"--steps picks checkpoints of one workdir, not {len(sources)}")
        sources = workdir_checkpoints(sources[0], args.steps)
    model = merge(sources, args.out, weights=args.weights)
    shares = normalised(args.weights, len(sources))
    c = model.config
    print(
        f"wrote {args.out}: the average of {len(sources)} checkpoints (weights "
        f"{', '.join(f'{w:.4g}' for w in shares)}): {c.num_layers} layers, hidden "
        f"{c.hidden_size}, {c.num_heads} heads, vocab {c.vocab_size}, tokenizer: "
        f"{'yes' if model.tokenizer else 'no'}"
    )


if __name__ == "__main__":
    programs.run(main)
