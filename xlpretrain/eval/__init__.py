"""Evaluation of pre-trained encoders: cross-lingual sentence retrieval (`retrieval`).

Sentence-pair classification fine-tuning is `xlpretrain.finetune`.
"""
