"""Fine-tuning, every task and data layout, in one home above `training`: the program
(`python -m xlpretrain.finetune run|score`, `__main__`), the task registry (`registry`: a task
is a kind of `xlpretrain.tasks`, a source — XTREME's layout (`xtreme_source`) or a user's folder
(`folder_source`) — a writer and its defaults), the config schema made from it (`schema`), the
plan resolved from a config (`plan`), one task's run (`task_run`: prepare, build, loop, select,
predict) on kind-neutral batches (`batches`) with layer-wise learning-rate decay
(`layer_decay`), and a suite of tasks under a protocol (`suite`)."""
