"""Pool loading for a run: every broken bundle and every task the sandbox backend cannot run, at once.

The expected lines are built from the bundles this test writes (their ids and the causes docs/tasks.md
states), and the check runs before any model is built: ``load_pools`` is the first thing ``build`` does.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from t1.run.pools import PoolProblems, load_pools, pool_problems
from t1_spec import load_recipe
from t1_tasks import load_pool

TINY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"


def _pool(root: Path) -> Path:
    """Six mini tasks, two broken, one in the older Terminal-Bench layout, one with a Docker-only base."""
    for task in list(load_pool("builtin:mini"))[:6]:
        shutil.copytree(task.path, root / task.id)
    shutil.copytree(root / task.id, root / "zz-typo")
    toml = (root / "zz-typo" / "task.toml").read_text()
    (root / "zz-typo" / "task.toml").write_text("source = 1\n" + toml)  # a key of the wrong type
    shutil.copytree(root / task.id, root / "zz-no-tests")
    shutil.rmtree(root / "zz-no-tests" / "tests")
    (root / "zz-old").mkdir()
    (root / "zz-old" / "task.yaml").write_text("instruction: x\n")
    (root / "zz-old" / "run-tests.sh").write_text("pytest\n")
    shutil.copytree(root / task.id, root / "zz-python-base")
    (root / "zz-python-base" / "environment" / "Dockerfile").write_text(
        "FROM python:3.13-slim-bookworm\nWORKDIR /app\nRUN pip install numpy\n"
    )
    return root


def test_every_broken_bundle_is_one_line_of_the_preflight(tmp_path):
    recipe = load_recipe(TINY, [f"pool.source={_pool(tmp_path)}"])
    lines = pool_problems(recipe)
    bundles = [line.split(": ", 2)[1] for line in lines if ": bundle " in line]
    assert bundles == ["bundle zz-no-tests", "bundle zz-old", "bundle zz-typo"], lines
    assert all(line.startswith(f"pool.source '{tmp_path}': ") for line in lines)
    old = next(line for line in lines if "bundle zz-old" in line)
    assert "harbor tasks migrate -i" in old
    assert "field source must be a string" in next(line for line in lines if "zz-typo" in line)


def test_tasks_the_backend_cannot_run_are_named_in_the_same_pass(tmp_path):
    root = _pool(tmp_path)
    for broken in ("zz-typo", "zz-no-tests", "zz-old"):
        shutil.rmtree(root / broken)
    recipe = load_recipe(TINY, [f"pool.source={root}"])
    with pytest.raises(PoolProblems) as info:
        load_pools(recipe)
    lines = info.value.lines
    assert len(lines) == 2, lines  # the base and the pip step of the one task
    assert all("task zz-python-base: sandbox.kind 'local' cannot run it: " in line for line in lines)
    assert "python:3.13-slim-bookworm" in lines[0] and "`sandbox.kind: docker`" in lines[0]
    assert "RUN 'pip install numpy'" in lines[1]
    shutil.rmtree(root / "zz-python-base")
    pool, warmup, _ = load_pools(recipe)  # six runnable tasks: one step of five draws from them
    assert len(pool) == 6 and warmup is pool
