"""The run loop with groups of trials per task (GRPO, T1 §9) and the warm-up's epochs (T1 §4.5)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from t1.run import preflight
from t1.run.steps import planned_steps, warmup_steps
from t1_spec import RecipeError, load_recipe
from t1_tasks import StepTasks, load_pool

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
GRPO = RECIPES / "tiny-grpo.yaml"
TINY = RECIPES / "tiny-cpu.yaml"


def test_the_grpo_recipe_is_runnable_here():
    verdict = preflight(load_recipe(GRPO))
    assert verdict.ok, verdict.problems


def test_a_launch_count_that_splits_a_group_is_refused_naming_the_field():
    with pytest.raises(RecipeError) as info:  # refused on every machine: the spec's rule
        load_recipe(GRPO, ["rollout.launched=5"])
    (line,) = [p.message for p in info.value.problems if p.field == "rollout.launched"]
    assert "multiple of ppo.samples_per_task 2" in line and "set it to 4 or 6" in line


@pytest.mark.parametrize(("epochs", "want"), [(1, 3), (3, 9)])
def test_a_step_draws_launched_over_g_tasks(epochs, want):
    # 6 launched in groups of 2 draw 3 tasks a step: the mini pool's 9 tasks make 3 steps a pass
    recipe = load_recipe(GRPO, [f"ppo.epochs={epochs}", "ppo.steps=null"])
    assert planned_steps(recipe, 9) == want


@pytest.mark.parametrize("epochs", [1, 2, 3])
def test_warmup_draws_every_task_of_its_pool_once_per_epoch(epochs):
    recipe = load_recipe(TINY, [f"critic_warmup.epochs={epochs}", "critic_warmup.enabled=true"])
    pool = load_pool("builtin:mini")
    stream = StepTasks.from_spec(pool, recipe.pool)
    drawn = Counter(t.id for _ in range(warmup_steps(recipe, len(pool))) for _, t in stream.draw(5))
    assert set(drawn) == {t.id for t in pool} and min(drawn.values()) >= epochs
    # and no more batches than needed: one fewer would leave a task short of `epochs` draws
    assert (warmup_steps(recipe, len(pool)) - 1) * 5 < len(pool) * epochs
