"""Fixtures shared by every test package, and the ``unit`` tier.

The tiny Qwen3.5-MoE's shape is declared once, in the ``model:`` section of `recipes/tiny-cpu.yaml`; tests
take it from `tiny_model_spec`, and a variant from ``tiny_model_spec.model_copy(update={...})``.

``unit`` is given here, at collection, to every test that needs no daemon, cluster, GPU or recipe run and is
not among the measured slowest (`UNIT_EXCLUDED_DIRS`, `UNIT_EXCLUDED_MARKERS`, `UNIT_EXCLUDED_FILES`):
``uv run pytest -m unit`` is the check a developer runs before every commit (under 5 minutes on 2 cores;
the README gives the measured time). A new test is in the tier unless it is marked or placed otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from t1_spec import ModelSpec, load_recipe

REPO_ROOT = Path(__file__).resolve().parents[1]
TINY_RECIPE = REPO_ROOT / "recipes" / "tiny-cpu.yaml"
TESTS = Path(__file__).resolve().parent

UNIT_EXCLUDED_MARKERS = ("e2e", "docker", "ray", "slow", "gpu")
"""A test with one of these markers is not a unit test: it runs a recipe, or needs a daemon, cluster, GPU."""

UNIT_EXCLUDED_DIRS = ("e2e", "sandbox_suite")
"""Directories under ``tests/`` whose every test starts sandboxes or runs recipes."""

UNIT_EXCLUDED_FILES = (
    # Measured with --durations over the whole tier (2,300 tests in 17.5 min on the 2-core box at a load
    # average of 20, beside other work): these files held 800 s of it. Each starts sandboxes, a child
    # process per test, or trains and decodes the tiny model several times.
    "tools/test_device_check.py",
    "tools/test_bench_memory.py",
    "t1_sandbox/test_sandbox.py",
    "t1_sandbox/test_one_terminal.py",
    "t1_sandbox/test_sandbox_verifier_guard.py",
    "t1_sandbox/test_daytona_sandbox.py",
    "t1_sandbox/test_daytona_shell.py",
    "t1_sandbox/test_sandbox_hostfs.py",
    "t1_sandbox/test_sandbox_watchdog.py",
    "t1_rollout/test_validate.py",
    "t1_rollout/test_engine_batching.py",
    "t1_rollout/test_verify.py",
    "t1_rollout/test_verify_caps.py",
    "t1_rollout/test_shell_died.py",
    "t1_rollout/test_evaluate.py",
    "t1_rollout/test_sglang_engine.py",
    "t1_rollout/test_engine.py",
    "t1/test_cli_tasks.py",
    "t1/test_cli_eval.py",
    "t1/test_plots.py",
    "t1_trainer/test_update_golden.py",
    "t1_trainer/test_torch_backend.py",
    "t1_trainer/test_checkpoint.py",
    "t1_trainer/test_off_policy.py",
    "t1_trainer/test_continued_samples.py",
    "t1_trainer/test_staleness.py",
    "t1_trainer/test_mismatch.py",
    "t1_trainer/test_gap_cadence.py",
    "t1_trainer/test_megatron_backend.py",
    "t1_trainer/test_ev_and_groups.py",
    # measured again at a load average of 4 (2,177 tests in 4 min 40 s): two gloo ranks per test, and a
    # prompt-marker attack per backend
    "t1_trainer/test_distributed.py",
    "t1_sandbox/test_shell_completion_attacks.py",
    # four tiny-model PPO steps packed against unpacked, one through a gloo rank (about 4 min at load 15)
    "t1_trainer/test_packing_step.py",
    # four gloo rank groups (tp, pp, ep x dp, cp) against one rank: 20 to 45 s each
    "t1_trainer/test_megatron_parallel.py",
)
"""Test files under ``tests/`` left out of the tier, the slowest measured (a test checks that each exists)."""


def is_unit(item: pytest.Item) -> bool:
    """Whether a collected test belongs to the ``unit`` tier (see the module docstring)."""
    if any(item.get_closest_marker(name) for name in UNIT_EXCLUDED_MARKERS):
        return False
    rel = item.path.resolve().relative_to(TESTS).as_posix()
    return rel.split("/")[0] not in UNIT_EXCLUDED_DIRS and rel not in UNIT_EXCLUDED_FILES


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of the ``unit`` tier ``unit``."""
    for item in items:
        if is_unit(item):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(autouse=True, scope="module")
def _no_process_group_outlives_its_module():
    """Tear down a torch.distributed group (and megatron's parallel state) a test module left behind.

    The Megatron backend keeps its one-process group for the process's life (its groups are reused by a
    second backend); in the shared pytest process that group would make a later module's own rendezvous
    fail ("a torch.distributed process group already exists").
    """
    yield
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    ps = sys.modules.get("megatron.core.parallel_state")
    if ps is not None:
        ps.destroy_model_parallel()
    dist.destroy_process_group()


@pytest.fixture(scope="session")
def tiny_model_spec() -> ModelSpec:
    """The frozen `ModelSpec` of `recipes/tiny-cpu.yaml` (path from the repo root, not the cwd)."""
    return load_recipe(TINY_RECIPE).model
