"""The README's second command, `configs/demo.py:xlco`, run as written (600 steps): held-out
retrieval learns what the first command's token-level objectives do not teach. A file of its
own, so that it runs beside tests/test_demo_runs.py, not after it."""

import re

from tests.test_demo_runs import retrieval_by_script, train_as_the_readme_does
from xlpretrain.training.metrics import read_metrics


def test_the_xlco_demo_learns_to_retrieve_translations(tmp_path):
    """`configs/demo.py:xlco` (the demo with the contrastive objective) as the README gives it:
    held-out retrieval rises far above its step-0 value, on the pairs across scripts too, where
    the untrained model is near chance."""
    result = train_as_the_readme_does("configs/demo.py:xlco", tmp_path, cpu=1)
    held_out = re.search(r"held-out at step 600: (.*)", result.stdout).group(1)
    retrieval, start = map(float, re.search(
        r"retrieval@1 ([\d.]+) \(step 0 ([\d.]+)", held_out
    ).groups())  # fmt: skip
    assert retrieval > start + 0.15, held_out
    loss, chance = map(
        float, re.search(r"xlco loss ([\d.]+) \(chance ([\d.]+)\)", held_out).groups()
    )
    assert loss < chance / 2, held_out
    across, across_start = retrieval_by_script(held_out, read_metrics(tmp_path)[-1])[
        "across_scripts"
    ]
    assert across > 0.2 and across > across_start + 0.15, held_out
