"""XTREME's schedule and checkpoint selection side by side with ours (issue 44, items 2, 3, 11).

Ported, small and faithful, from google-research/xtreme (scripts/train_{xnli,pawsx,panx,udpos,
qa}.sh; third_party/run_classify.py, run_tag.py, run_squad.py) and transformers'
`get_linear_schedule_with_warmup` (optimization.py's LambdaLR factor), then run beside
`configs/xtreme.py:base`'s plans on the same inputs."""

import jax.numpy as jnp
import numpy as np
import pytest

from configs import xtreme as xtreme_config
from xlpretrain.training.task_config import check_run_config, task_config
from xlpretrain.training.task_plan import resolve_task
from xlpretrain.training.task_tuning import BestParams, selected_step

# --- xtreme's side ---------------------------------------------------------------------------


def linear_schedule_with_warmup(num_warmup_steps, num_training_steps):
    """transformers.optimization.get_linear_schedule_with_warmup's lr_lambda: never capped."""

    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        return max(
            0.0,
            float(num_training_steps - current_step)
            / float(max(1, num_training_steps - num_warmup_steps)),
        )

    return lr_lambda


def xtreme_rates(lr, warmup, t_total, scheduler_first=False):
    """Each update's rate: run_classify.py and run_squad.py call optimizer.step() then
    scheduler.step() (update k at lr_lambda(k)); run_tag.py scheduler.step() first (k + 1)."""
    f = linear_schedule_with_warmup(warmup, t_total)
    return np.array([lr * f(k + scheduler_first) for k in range(t_total)])


def xtreme_selected(scores, t_total, save_steps):
    """The step whose model predicts. train(): every `save_steps` steps English dev is scored and
    checkpoint-best/ written when `acc` (`f1`) > best_score, which starts at 0. main(): the final
    model is saved in output_dir; --eval_all_checkpoints scores sorted(glob(output_dir/**/
    pytorch_model.bin)), checkpoint-best/ before output_dir's own file ('c' < 'p'), each replacing
    best_checkpoint (initially checkpoint-best/ if it exists, else output_dir) only when `>`
    the best so far (from 0; where every score is 0 the final predicts, here the first
    evaluated: docs/xtreme.md lists it). save_steps -1 (train_qa.sh): no checkpoint, the final
    predicts."""
    best_score, best = 0, None
    for step in range(1, t_total + 1):
        if save_steps > 0 and step % save_steps == 0 and scores[step] > best_score:
            best_score, best = scores[step], step
    chosen, best_score = (best if best is not None else t_total), 0
    for candidate in ([best] if best is not None else []) + [t_total]:
        if scores[candidate] > best_score:
            chosen, best_score = candidate, scores[candidate]
    return chosen


# --- ours ------------------------------------------------------------------------------------


def plan(task, rows, preset="base"):
    cfg = xtreme_config.get_config(preset)
    cfg.init.path, cfg.data.dir = "model", "xtreme"
    check_run_config(cfg)
    return resolve_task(task_config(cfg, task, rows))


def our_rates(p):
    return np.asarray(p.optim.learning_rates()(jnp.arange(p.loop.steps)), dtype=np.float64)


def our_selected(p, scores, workdir):
    """The loop's evaluations (every `eval_every` steps and at the last: loop.py) offered to
    BestParams as task_tuning's keep_best does, then `selected_step`; `none`, or no evaluation
    during training: the final."""
    steps, every = p.loop.steps, p.loop.eval_every
    if p.select == "none" or every == 0:
        return steps
    best = BestParams(str(workdir))
    for step in range(1, steps + 1):
        if step % every == 0 or step == steps:
            best.offer({"w": np.full(2, step, np.float32)}, step, scores[step])
    return selected_step(best, steps)


# --- the schedules ---------------------------------------------------------------------------

TYDIQA_ROWS = 3_744  # about TyDiQA-GoldP English's training windows: 117 steps an epoch, 351


def test_tydiqa_warms_up_500_steps_over_351_and_never_decays():
    p = plan("tydiqa", TYDIQA_ROWS)
    assert (p.loop.steps, p.optim.warmup_steps, p.optim.learning_rate) == (351, 500, 3e-5)
    lr, ours, theirs = 3e-5, our_rates(p), xtreme_rates(3e-5, 500, 351)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6 * lr)
    assert theirs.max() == pytest.approx(3e-5 * 350 / 500)  # the last update's: no decay


@pytest.mark.parametrize(
    ("task", "rows", "warmup"),
    [("pawsx", 49_401, 0), ("xquad", 88_641, 500), ("panx", 20_000, 0)],
)
def test_a_normal_tasks_every_rate_is_xtremes(task, rows, warmup):
    p = plan(task, rows)
    assert p.optim.warmup_steps == warmup
    ours = our_rates(p)
    lr, steps = p.optim.learning_rate, p.loop.steps
    if task == "panx":  # run_tag.py steps the scheduler first: its update k takes our k + 1
        theirs = xtreme_rates(lr, warmup, steps, scheduler_first=True)
        np.testing.assert_allclose(ours[1:], theirs[:-1], rtol=1e-5, atol=1e-6 * lr)
        assert theirs[-1] == 0.0 and ours[0] == pytest.approx(lr)  # docs/xtreme.md lists it
    else:
        np.testing.assert_allclose(ours, xtreme_rates(lr, warmup, steps), rtol=1e-5, atol=1e-6 * lr)


# --- the selection ---------------------------------------------------------------------------


def test_cadence_selection_and_seed_are_the_scripts():
    expected = {  # task: (--save_steps as our eval_every, select, --seed)
        "xnli": (100, "best_then_final", 42),
        "pawsx": (200, "best_then_final", 42),
        "panx": (1000, "best_then_final", 1),
        "udpos": (500, "best_then_final", 1),
        "xquad": (0, "none", 42),
        "mlqa": (0, "none", 42),
        "tydiqa": (0, "none", 42),
    }
    for preset in ("base", "large"):
        for task, (every, select, seed) in expected.items():
            p = plan(task, 50_000, preset)
            assert (p.loop.eval_every, p.select, p.loop.seed) == (every, select, seed), task


PAWSX_ROWS = 32 * 210  # 5 epochs of 210 steps: 1,050; dev at 200 … 1,000 and the final
SCRIPTED = {  # dev scores at 200, 400, 600, 800, 1000, then the final model's at 1050
    "a peak": [0.5, 0.7, 0.6, 0.65, 0.6, 0.62],
    "a later tie": [0.5, 0.7, 0.7, 0.6, 0.7, 0.6],
    "final better": [0.5, 0.7, 0.6, 0.6, 0.6, 0.75],
    "final ties the best": [0.5, 0.7, 0.6, 0.6, 0.6, 0.7],
    "rises late": [0.0, 0.1, 0.2, 0.3, 0.4, 0.3],
}
EXPECTED = {
    "a peak": 400,
    "a later tie": 400,
    "final better": 1050,
    "final ties the best": 400,
    "rises late": 1000,
}


@pytest.mark.parametrize("name", SCRIPTED)
def test_the_selected_step_is_xtremes(name, tmp_path):
    p = plan("pawsx", PAWSX_ROWS)
    assert (p.loop.steps, p.loop.eval_every) == (1050, 200)
    points = [200, 400, 600, 800, 1000, 1050]
    scores = dict.fromkeys(range(1, 1051), -1.0)  # never read: no evaluation there
    scores.update(zip(points, SCRIPTED[name], strict=True))
    theirs = xtreme_selected(scores, 1050, 200)
    assert our_selected(p, scores, tmp_path) == theirs == EXPECTED[name]


def test_qa_predicts_with_the_final_model(tmp_path):
    p = plan("tydiqa", TYDIQA_ROWS)
    scores = dict.fromkeys(range(1, 352), 0.5)
    assert our_selected(p, scores, tmp_path) == xtreme_selected(scores, 351, -1) == 351


def test_a_later_equal_score_does_not_replace_the_kept_one(tmp_path):
    """Issue 44 item 11's third rule, on BestParams itself."""
    best = BestParams(str(tmp_path))
    assert best.offer({"w": np.zeros(2, np.float32)}, 2, 0.5)
    assert not best.offer({"w": np.ones(2, np.float32)}, 4, 0.5)
    assert best.read()["step"] == 2 and selected_step(best, 6) == 2
    assert (tmp_path / "best" / "step_2").is_dir() and not (tmp_path / "best" / "step_4").exists()
