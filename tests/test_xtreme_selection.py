"""XTREME's schedule and checkpoint selection side by side with ours (issue 44, items 2, 3, 11).

Ported, small and faithful, from google-research/xtreme (scripts/train_{xnli,pawsx,panx,udpos,
qa}.sh; third_party/run_classify.py, run_tag.py, run_squad.py) and transformers'
`get_linear_schedule_with_warmup` (optimization.py's LambdaLR factor), then run beside
`configs/xtreme.py:base`'s plans on the same inputs."""

import jax.numpy as jnp
import numpy as np
import pytest

from configs import xtreme as xtreme_config
from xlpretrain.core.errors import ConfigError
from xlpretrain.finetune.plan import resolve
from xlpretrain.finetune.schema import check as check_run_config
from xlpretrain.finetune.task_run import BestParams, selected_step

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
    the best so far (from 0: where every score is 0 the final predicts). save_steps -1
    (train_qa.sh): no checkpoint, the final predicts."""
    best_score, best = 0, None
    for step in range(1, t_total + 1):
        if save_steps > 0 and step % save_steps == 0 and scores[step] > best_score:
            best_score, best = scores[step], step
    chosen, best_score = (best if best is not None else t_total), 0
    for candidate in ([best] if best is not None else []) + [t_total]:
        if scores[candidate] > best_score:
            chosen, best_score = candidate, scores[candidate]
    return chosen


def xtreme_t_total(rows, per_gpu_train_batch_size, gradient_accumulation_steps, epochs):
    """run_*.py's `t_total = len(train_dataloader) // args.gradient_accumulation_steps *
    args.num_train_epochs` on one GPU (a RandomSampler's DataLoader, the last batch short), and
    the updates its loop makes: `(step + 1) % gradient_accumulation_steps == 0` in each of
    `int(num_train_epochs)` epochs."""
    batches = -(-rows // per_gpu_train_batch_size)  # len(train_dataloader)
    t_total = batches // gradient_accumulation_steps * epochs
    updates = sum(
        (step + 1) % gradient_accumulation_steps == 0
        for _ in range(int(epochs))
        for step in range(batches)
    )
    assert updates == t_total
    return int(t_total)


# --- ours ------------------------------------------------------------------------------------


def plan(task, rows, preset="base"):
    cfg = xtreme_config.get_config(preset)
    cfg.init.path, cfg.data.dir = "model", "xtreme"
    check_run_config(cfg)
    return resolve(cfg).task_plan(task, rows)


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
    [("pawsx", 49_401, 0), ("xquad", 88_641, 500), ("panx", 20_000, 0), ("udpos", 21_253, 0)],
)
def test_a_normal_tasks_every_rate_is_xtremes(task, rows, warmup):
    p = plan(task, rows)
    assert p.optim.warmup_steps == warmup
    ours = our_rates(p)
    lr, steps = p.optim.learning_rate, p.loop.steps
    tags = task in ("panx", "udpos")  # run_tag.py steps the scheduler first: update k at k + 1
    theirs = xtreme_rates(lr, warmup, steps, scheduler_first=tags)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6 * lr)
    if tags:  # the first update already decays; the last trains at 0
        assert 0 < ours[0] < lr and ours[-1] == 0.0


# Row counts on either side of a step's edge: 8 × 4 × 210 rows, one more (a loader batch of
# one row, no update), 8 × 3 more (three loader batches, still none), and the real tasks'.
EDGES = (6_720, 6_721, 6_744, 6_752, 49_401, 392_702, 20_000, 21_253)


@pytest.mark.parametrize("preset", ["base", "large"])
def test_each_tasks_step_count_is_the_scripts(preset):
    scripts = {  # task: (per_gpu_train_batch_size, gradient_accumulation_steps, epochs)
        "xnli": (8, 4, 5.0),
        "pawsx": (8, 4, 5.0),
        "panx": (8, 4, 10.0),
        "udpos": (8, 4, 10.0),
        "xquad": (4, 8, 3.0),
        "mlqa": (4, 8, 3.0),
        "tydiqa": (4, 8, 3.0),
    }
    if preset == "large":  # train_{xnli,pawsx,panx,udpos}.sh's xlm-roberta-large branch
        scripts.update({t: (2, 16, scripts[t][2]) for t in ("xnli", "pawsx", "panx", "udpos")})
    for task, (per_gpu, accumulation, epochs) in scripts.items():
        for rows in EDGES:
            theirs = xtreme_t_total(rows, per_gpu, accumulation, epochs)
            assert plan(task, rows, preset).loop.steps == theirs, (task, rows)


def test_a_loader_batch_that_does_not_divide_the_step_is_refused():
    cfg = xtreme_config.get_config("base")
    cfg.init.path, cfg.data.dir = "model", "xtreme"
    cfg.panx.loader_batch_size = 12
    with pytest.raises(ConfigError, match=r"'panx.loader_batch_size' \(12\) must divide"):
        check_run_config(cfg)


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
    "every score 0": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    "0 until the final": [0.0, 0.0, 0.0, 0.0, 0.0, 0.1],
}
EXPECTED = {
    "a peak": 400,
    "a later tie": 400,
    "final better": 1050,
    "final ties the best": 400,
    "rises late": 1000,
    "every score 0": 1050,
    "0 until the final": 1050,
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


def test_a_score_of_0_is_never_kept(tmp_path):
    """XTREME's best_score starts at 0: nothing kept, the final parameters predict."""
    best = BestParams(str(tmp_path))
    assert not best.offer({"w": np.zeros(2, np.float32)}, 2, 0.0)
    assert best.read() is None and selected_step(best, 6) == 6
