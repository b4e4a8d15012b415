"""Sentence-pair fine-tuning's old command, `python -m xlpretrain.eval.finetune`, which now
names its new one (`python -m xlpretrain.finetune run`, the `pairs` task) and stops."""
