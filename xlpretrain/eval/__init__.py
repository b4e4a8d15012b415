"""Evaluation of pre-trained encoders: cross-lingual sentence retrieval and bitext mining
(`retrieval`; the measures in `alignment` and `mining`, Tatoeba's and BUCC's files in
`benchmarks`) and sentence-pair classification fine-tuning (`finetune`)."""
