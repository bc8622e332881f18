"""`t1 train` refuses a training pool with a near-duplicate in the recipe's evaluation pools (T1 §3)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from t1.run import preflight
from t1.run.preflight import eval_overlap_problems
from t1_spec import load_recipe
from t1_tasks.pool import builtin_pool_dir

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "tiny-cpu.yaml"
MINI = builtin_pool_dir("mini")


def _disjoint_pool(root: Path) -> Path:
    """Two mini tasks copied, their instruction and tests rewritten so that no word 5-gram is left."""
    for name, instruction, test in (
        ("csv-region-totals", "Compose a haiku about autumn leaves and save it in poem.txt.", "poem"),
        ("fix-permissions", "Draw an ASCII lighthouse with a lamp on top into art.txt please.", "art"),
    ):
        task = root / f"new-{name}"
        shutil.copytree(MINI / name, task)
        (task / "instruction.md").write_text(instruction + "\n")
        (task / "tests" / "test_outputs.py").write_text(
            f"def test_{test}():\n    assert open('{test}.txt')\n"
        )
    return root


def test_the_mini_pool_is_refused_when_it_is_also_the_evaluation_suite():
    recipe = load_recipe(TINY, ["evaluation.suites=[builtin:mini]"])
    assert recipe.pool.source == "builtin:mini" and not recipe.evaluation.enabled
    started = time.perf_counter()
    (line,) = eval_overlap_problems(recipe)
    assert time.perf_counter() - started < 1.0  # cheap: the preflight runs it on every validate and train
    first = sorted(t.name for t in MINI.iterdir() if (t / "task.toml").is_file())[0]
    assert line.startswith(f"pool: task {first} of builtin:mini is a near-duplicate of task {first} of ")
    assert "Jaccard 1.00" in line and f">= pool.max_eval_overlap {recipe.pool.max_eval_overlap:g}" in line
    assert "9 pairs in all" in line
    assert line in preflight(recipe).problems


def test_a_disjoint_directory_suite_is_accepted(tmp_path):
    recipe = load_recipe(TINY, [f"evaluation.suites=[{_disjoint_pool(tmp_path / 'heldout')}]"])
    assert eval_overlap_problems(recipe) == []
    assert not [p for p in preflight(recipe).problems if "near-duplicate" in p]


def test_the_threshold_and_the_pool_limit_are_the_recipe_s(tmp_path):
    recipe = load_recipe(
        TINY, ["evaluation.suites=[builtin:mini]", "pool.limit=2", "pool.max_eval_overlap=1"]
    )
    (line,) = eval_overlap_problems(recipe)
    assert "2 pairs in all" in line and ">= pool.max_eval_overlap 1;" in line


def test_suites_that_do_not_load_are_skipped_here(tmp_path):
    missing = tmp_path / "no-such-pool"
    assert (
        eval_overlap_problems(load_recipe(TINY, [f"evaluation.suites=[{missing},terminal-bench@2.1]"])) == []
    )
    (line,) = eval_overlap_problems(load_recipe(TINY, [f"evaluation.suites=[{missing},builtin:mini]"]))
    assert "near-duplicate" in line
    assert eval_overlap_problems(load_recipe(TINY)) == []  # no suites, nothing compared
