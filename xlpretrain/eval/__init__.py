"""Evaluation of pre-trained encoders: cross-lingual sentence retrieval (`retrieval`) and
sentence-pair classification fine-tuning (`finetune`)."""
