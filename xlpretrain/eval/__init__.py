"""Evaluation of pre-trained encoders: cross-lingual sentence retrieval and bitext mining (the
measures in `alignment` and `mining`, Tatoeba's and BUCC's files in `benchmarks`, the scripts of
the languages in `scripts`) and XTREME's scoring (`xtreme`), below `training`: nothing here
trains. The programs are packages' `__main__` modules: `python -m xlpretrain.eval.retrieval`
and `python -m xlpretrain.eval.xtreme score`; fine-tuning is `python -m xlpretrain.finetune`."""
