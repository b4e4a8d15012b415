"""The demo corpus's command line; the corpus itself is the package's
(`xlpretrain.data.demo_corpus`)."""

from __future__ import annotations

from xlpretrain.core import programs
from xlpretrain.data.demo_corpus import (
    SNAPSHOT_LANGUAGES,
    build_demo_corpus,
    demo_xtreme,
    translation_pairs,
    write_snapshot,
)


def main(argv: list[str] | None = None) -> None:
    """`python -m xlpretrain.data.demo_corpus --out DIR [--from-babel] [--languages N]
    [--pairs DIR] [--xtreme DIR] [--snapshot FILE]`: writes the demo corpus to a folder of one's
    own, to pass as data.mono_dir / data.parallel_dir, with --pairs its translation-or-not
    fine-tuning task (`translation_pairs`) and with --xtreme its XTREME-format benchmark
    (`demo_xtreme`)."""
    parser = programs.ArgumentParser(
        prog="python -m xlpretrain.data.demo_corpus",
        description="Writes the demo corpus (training and held-out folders) to --out: the "
        "snapshot this package ships, or one built from the installed Babel's CLDR data.",
    )
    parser.add_argument("--out", required=True, help="folder to write mono/, parallel/, held_out/")
    parser.add_argument(
        "--from-babel",
        action="store_true",
        help="build it from the installed Babel's CLDR data instead of unpacking the shipped "
        "snapshot (its text and languages then depend on the Babel release)",
    )
    parser.add_argument(
        "--languages",
        type=int,
        default=SNAPSHOT_LANGUAGES,
        help=f"English and N-1 others; other than {SNAPSHOT_LANGUAGES}, built from Babel",
    )
    parser.add_argument(
        "--pairs",
        help="also write the translation-or-not task built from it to this folder, "
        "<l1>-<l2>/{train,test}.tsv, for python -m xlpretrain.finetune run (the pairs task)",
    )
    parser.add_argument(
        "--xtreme",
        help="also write a small XTREME-format benchmark built from it to this folder: "
        "pawsx/, panx/, squad/ + xquad/, tatoeba/ and labels/ (see "
        "xlpretrain.data.demo_corpus.demo_xtreme)",
    )
    parser.add_argument(
        "--snapshot",
        help="also pack the corpus into this .tar.xz file, as the shipped snapshot is packed",
    )
    args = parser.parse_args(argv)
    folders = build_demo_corpus(args.out, num_languages=args.languages, from_babel=args.from_babel)
    for name, folder in folders._asdict().items():
        count = len(list(folder.iterdir()))
        print(f"{name + ':':<19}{folder}  ({count} files)")
    if args.pairs:
        counts = translation_pairs.write_task(args.out, args.pairs)
        print(f"{'pairs:':<19}{args.pairs}  ({len(counts)} folders of train.tsv and test.tsv)")
    if args.xtreme:
        counts = demo_xtreme.write_benchmark(args.out, args.xtreme)
        for task, files in counts.items():
            tests = sum(n for name, n in files.items() if name.startswith("test-"))
            sizes = [f"{n} {name}" for name, n in files.items() if not name.startswith("test-")]
            print(
                f"{task + ':':<19}{args.xtreme}  ({', '.join([*sizes, f'{tests} test examples'])})"
            )
    if args.snapshot:
        digest = write_snapshot(args.out, args.snapshot)
        print(f"{'snapshot:':<19}{args.snapshot}  (sha256 {digest})")


if __name__ == "__main__":
    programs.run(main)
