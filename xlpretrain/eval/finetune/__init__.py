"""Sentence-pair classification fine-tuning (XNLI, PAWS-X) with cross-lingual transfer: `python
-m xlpretrain.eval.finetune` (`__main__`), a program above `training`, whose fine-tuning
(`xlpretrain.training.finetuning`) it runs. The package itself holds no library code, so that
`eval`'s library modules stay below `training`."""
