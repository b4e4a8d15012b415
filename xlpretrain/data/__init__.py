"""The data layer, grouped by job: `tokenizer` (text to ids and back, which every group reads);
`corpora` (where a run's text comes from); `pretraining` (its rows, masked and served by step);
`finetuning` (the task examples and their rows); `xtreme` (XTREME's files); `prepare` (the
store's builder, `python -m xlpretrain.data.prepare`); `demo_corpus` (the demo corpus, and the
tasks made from it, `python -m xlpretrain.data.demo_corpus`)."""
