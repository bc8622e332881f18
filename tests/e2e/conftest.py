"""Shared checks of the end-to-end tests on a local Ray cluster (`test_tiny_ray.py`, `test_ray_faults.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TINY_RAY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-ray.yaml"


def _alive(pids) -> list[int]:
    """The processes of ``pids`` that still run (a zombie has exited; its parent has not reaped it yet)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def assert_no_ray_left(run) -> None:
    """Every actor and cluster process of a finished or failed Ray run is gone, and Ray is shut down.

    ``run`` is the `t1.run.driver.Run`; its runtime (`t1.run.ray.runtime.RayRuntime`) keeps the pids.
    """
    from t1.run.ray.placement import session_processes

    ray_runtime = run.runtime
    assert ray_runtime.actor_pids and ray_runtime.cluster is not None and ray_runtime.cluster.pids
    assert _alive(ray_runtime.actor_pids) == []
    assert _alive(ray_runtime.cluster.pids) == []
    assert session_processes() == ()
    import ray

    assert not ray.is_initialized()


def metrics_rows(run_dir: Path) -> list[dict]:
    """The rows of a run directory's ``metrics.jsonl``."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def run_tiny_ray(tmp_path: Path, overrides: list[str], recipe_path: Path = TINY_RAY):
    """Run ``recipe_path`` (default ``recipes/tiny-ray.yaml``) here; skip with the reason if Ray cannot start.

    Returns:
        ``(run, summary)``: the `t1.run.driver.Run` (on the Ray runtime) and its `RunSummary`.
    """
    pytest.importorskip("ray", reason="the ray package (t1[ray] extra) is not installed")
    from t1.run.driver import Run
    from t1_spec import load_recipe

    recipe = load_recipe(recipe_path, [*overrides, f"logging.run_root={tmp_path}"])
    assert recipe.runtime.kind == "ray", recipe_path
    run = Run(recipe, recipe.model_dump(mode="json", by_alias=True))
    try:
        summary = run.run()
    except RuntimeError as exc:
        if "did not start" in str(exc):
            pytest.skip(f"a local Ray cluster cannot start on this machine: {exc}")
        raise
    return run, summary


@pytest.fixture
def tiny_ray():
    """`run_tiny_ray`."""
    return run_tiny_ray


@pytest.fixture
def no_ray_left():
    """`assert_no_ray_left`, for tests that run Ray."""
    return assert_no_ray_left


@pytest.fixture
def rows_of():
    """`metrics_rows`."""
    return metrics_rows
