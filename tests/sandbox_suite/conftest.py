"""The attack and leak suites run against the ``Sandbox`` seam, once per built backend.

A test here takes ``make_sandbox`` (build an unstarted sandbox of the backend under test from its spec)
and ``environment_dir`` (a minimal task environment), and uses only the seam's methods, so a new backend
registered in ``SANDBOXES`` runs the same suite by adding its spec class to `SPEC_OF_KIND`. A backend
whose preflight fails on this machine (no daemon, no credentials) is skipped with the preflight's reason,
never passed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from t1_rollout.sandbox import SANDBOXES, Sandbox
from t1_spec import LocalSandboxSpec, load_recipe

TINY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"

#: The spec class each built backend is made from (add a backend here when it is registered).
SPEC_OF_KIND: dict[str, type] = {"local": LocalSandboxSpec}


def _preflight_problems(kind: str) -> list[str]:
    recipe = load_recipe(TINY)
    spec = SPEC_OF_KIND[kind]()
    return SANDBOXES.load(kind).preflight(recipe.model_copy(update={"sandbox": spec}))


@pytest.fixture(params=[k for k in SANDBOXES.kinds() if k in SPEC_OF_KIND])
def backend_kind(request: pytest.FixtureRequest) -> str:
    """The sandbox kind under test; skipped (with the reason) where this machine cannot run it."""
    problems = _preflight_problems(request.param)
    if problems:
        pytest.skip("; ".join(problems))
    return request.param


@pytest.fixture
def make_sandbox(backend_kind: str) -> Callable[..., Sandbox]:
    """``make_sandbox(**spec_fields)``: an unstarted sandbox of the backend under test, from its spec."""

    def make(**fields: object) -> Sandbox:
        spec = SPEC_OF_KIND[backend_kind](**fields)
        return SANDBOXES.load(backend_kind).from_spec(spec)

    return make


@pytest.fixture
def environment_dir(tmp_path: Path) -> Path:
    """A minimal task environment: ``FROM debian:bookworm-slim`` with ``WORKDIR /app``."""
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    return env
