"""The attack and leak suites run against the ``Sandbox`` seam, once per built backend.

A test here takes ``make_sandbox`` (build an unstarted sandbox of the backend under test from its spec)
and ``environment_dir`` (a minimal task environment), and uses only the seam's methods, so a new backend
registered in ``SANDBOXES`` runs the same suite by adding its spec class to `SPEC_OF_KIND`. A backend
whose preflight fails on this machine (no daemon, no credentials) is skipped with the preflight's reason,
never passed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pytest

from t1_rollout.sandbox import SANDBOXES, Sandbox
from t1_spec import DockerSandboxSpec, LocalSandboxSpec, load_recipe

TINY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"
TINY_DOCKER = TINY.with_name("tiny-docker.yaml")

#: The spec class each built backend is made from (add a backend here when it is registered).
#: Docker: the tiny recipe's base-image map, so that the suite's ``FROM debian:bookworm-slim`` builds offline.
SPEC_OF_KIND: dict[str, Callable[..., object]] = {
    "local": LocalSandboxSpec,
    "docker": functools.partial(
        DockerSandboxSpec,
        images=load_recipe(TINY_DOCKER).sandbox.images,
        disk_mb=load_recipe(TINY_DOCKER).sandbox.disk_mb,
    ),
}


def _preflight_problems(kind: str) -> list[str]:
    recipe = load_recipe(TINY)
    spec = SPEC_OF_KIND[kind]()
    return SANDBOXES.load(kind).preflight(recipe.model_copy(update={"sandbox": spec}))


#: Marks of a backend's runs (``-m docker`` selects the Docker ones, as .ci/run runs them).
MARKS = {"docker": [pytest.mark.docker]}


@pytest.fixture(
    params=[pytest.param(k, marks=MARKS.get(k, [])) for k in SANDBOXES.kinds() if k in SPEC_OF_KIND]
)
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
        if (
            fields
        ):  # a limit this machine's backend cannot enforce (a disk cap without quotas): skip, said why
            recipe = load_recipe(TINY).model_copy(update={"sandbox": spec})
            if problems := SANDBOXES.load(backend_kind).preflight(recipe):
                pytest.skip("; ".join(problems))
        return SANDBOXES.load(backend_kind).from_spec(spec)

    return make


@pytest.fixture
def environment_dir(tmp_path: Path) -> Path:
    """A minimal task environment: ``FROM debian:bookworm-slim`` with ``WORKDIR /app``."""
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    return env
