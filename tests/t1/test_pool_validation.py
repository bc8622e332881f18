"""``pool.validation``: the run holds each trial's report to the counts ``t1 tasks validate`` observed."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from t1.run.build import validated_rows
from t1.run.pools import load_validation, pool_problems
from t1_spec import load_recipe
from t1_tasks import load_pool
from t1_tasks.validation import CheckRecord, TaskRecord, ValidationRecord, write_record

TINY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"


def _record(pool: str, task_ids: list[str], total: int = 3) -> ValidationRecord:
    oracle = CheckRecord(passed=total, total=total, report_source="ctrf", verifier_s=1.0, duration_s=2.0)
    return ValidationRecord(
        pool=pool,
        created=datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC),
        t1_version="0.1.0",
        duration_s=1.0,
        tasks=tuple(TaskRecord(id=t, verdict="ok", oracle=oracle) for t in task_ids),
    )


def test_a_record_of_the_pool_gives_every_task_its_observed_count(tmp_path):
    pool = load_pool("builtin:mini")
    ids = [t.id for t in pool][:2]
    path = write_record(_record("builtin:mini", ids, total=7), tmp_path / "v.json")
    recipe = load_recipe(TINY, overrides=[f"pool.validation={path}"])
    rows = validated_rows(recipe, pool, pool, recipe.pool)
    assert set(rows) == set(ids)  # tasks the record does not hold have no row (static count then)
    assert {r.observed_assertions for r in rows.values()} == {7}
    assert pool_problems(recipe) == []


def test_a_record_of_another_pool_is_refused_naming_the_field(tmp_path):
    path = write_record(_record("/elsewhere", ["x"]), tmp_path / "v.json")
    recipe = load_recipe(TINY, overrides=[f"pool.validation={path}"])
    (problem,) = pool_problems(recipe)
    assert problem.startswith(f"pool.validation '{path}'")
    assert "validation record of pool '/elsewhere' given for pool 'builtin:mini'" in problem
    with pytest.raises(ValueError, match=r"^pool\.validation"):
        load_validation("pool", recipe.pool, load_pool("builtin:mini"))


def test_an_unreadable_record_is_refused_naming_the_field(tmp_path):
    bad = tmp_path / "v.json"
    bad.write_text("{not json")
    recipe = load_recipe(TINY, overrides=[f"pool.validation={bad}"])
    (problem,) = pool_problems(recipe)
    assert problem.startswith("pool.validation")


def test_without_a_record_no_task_has_a_row():
    recipe = load_recipe(TINY)
    pool = load_pool("builtin:mini")
    assert validated_rows(recipe, pool, pool, recipe.pool) == {}
