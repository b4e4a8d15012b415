"""Fine-tuning's rows: the task examples that XTREME's and a user's files are read into
(`task_examples`), and per kind of task how an example is laid out as encoder rows and how the
rows' predictions come back (sentence pairs, tagged words, question-answering windows)."""
