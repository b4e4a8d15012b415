"""A run from its config: the plan, the step, the loop, the pre-training and fine-tuning tasks on
it, checkpoints, the optimizer and schedules, evaluation, warm start, preemption, divergence,
metrics, the workdir, and the command-line plumbing of the programs that read a config.
"""
