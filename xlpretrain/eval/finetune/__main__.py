"""`python -m xlpretrain.eval.finetune`, sentence-pair fine-tuning's old command: it is now the
`pairs` task of `python -m xlpretrain.finetune run`, and this says so in one line (exit 2)."""

from xlpretrain.core import programs

MOVED = (
    "sentence-pair fine-tuning moved: python -m xlpretrain.finetune run --config "
    "configs/finetune_pairs.py[:PRESET] --init WORKDIR --data PAIRS_DIR --out OUT "
    "[--config.pairs.train_language=LANG] (the pairs task; results in OUT/pairs/results.json)"
)

if __name__ == "__main__":
    programs.exit_with(MOVED)
