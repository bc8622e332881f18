"""``pool.tasks``: a named split of the pool, in stored order; unknown ids and conflicting cuts refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from t1.run.pools import load_one, load_pools, pool_problems
from t1_spec import RecipeError, load_recipe
from t1_tasks import load_pool

TINY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"
SPLIT = "[git-recover-branch,csv-region-totals,find-large-files,fix-permissions,log-5xx-report]"


def test_the_split_keeps_the_named_tasks_in_the_pools_stored_order():
    recipe = load_recipe(TINY, overrides=[f"pool.tasks={SPLIT}"])
    stored = [t.id for t in load_pool("builtin:mini")]
    pool = load_one("pool", recipe.pool)
    named = set(SPLIT.strip("[]").split(","))
    assert [t.id for t in pool] == [i for i in stored if i in named]  # not the listed order
    assert len(pool) == 5 and pool.source == "builtin:mini"
    main, warm, _ = load_pools(recipe)
    assert [t.id for t in warm] == [t.id for t in main]  # the warm-up pool is the same split


def test_an_id_the_pool_does_not_hold_is_named():
    recipe = load_recipe(TINY, overrides=["pool.tasks=[fix-permissions,no-such-task,other-typo]"])
    with pytest.raises(
        ValueError, match=r"pool\.tasks: \['no-such-task', 'other-typo'\] not in 'builtin:mini'"
    ):
        load_one("pool", recipe.pool)
    assert any("no-such-task" in line for line in pool_problems(recipe))


def test_a_split_smaller_than_one_step_names_the_cut():
    recipe = load_recipe(TINY, overrides=["pool.tasks=[fix-permissions,log-5xx-report]"])  # 5 launched
    (line,) = pool_problems(recipe)
    assert "exceeds the 2 tasks of pool" in line and "pool.tasks (2 ids)" in line


@pytest.mark.parametrize(
    ("override", "rule"),
    [
        ("pool.tasks=[]", "tasks is empty"),
        ("pool.tasks=[fix-permissions,fix-permissions]", "more than once"),
    ],
)
def test_bad_lists_are_refused_by_the_spec(override, rule):
    with pytest.raises(RecipeError, match=rule):
        load_recipe(TINY, overrides=[override])


def test_tasks_and_limit_together_are_refused():
    with pytest.raises(RecipeError, match="tasks and limit both cut the pool"):
        load_recipe(TINY, overrides=[f"pool.tasks={SPLIT}", "pool.limit=3"])
