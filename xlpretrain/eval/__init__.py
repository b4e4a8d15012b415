"""Evaluation of pre-trained encoders: cross-lingual sentence retrieval and bitext mining (the
measures in `alignment` and `mining`, Tatoeba's and BUCC's files in `benchmarks`, the scripts of
the languages in `scripts`) below `training`; the programs are packages' `__main__` modules:
`python -m xlpretrain.eval.retrieval` and `python -m xlpretrain.eval.finetune` (sentence-pair
classification fine-tuning, which runs `training`'s loop)."""
