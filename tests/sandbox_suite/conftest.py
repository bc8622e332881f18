"""The attack and leak suites run against the ``Sandbox`` seam, once per built backend.

A test here takes ``make_sandbox`` (build an unstarted sandbox of the backend under test from its spec)
and ``environment_dir`` (a minimal task environment), and uses only the seam's methods, so a new backend
registered in ``SANDBOXES`` runs the same suite by adding its spec class to `SPEC_OF_KIND`. A backend
whose preflight fails on this machine (no daemon, no credentials) is skipped with the preflight's reason,
never passed. The Daytona backend runs its real SDK code against the local fake of the Daytona API
(``tests/t1_sandbox/daytona_fake.py``, one per test, started by `daytona_api`); the fake runs commands on this
host under a plain bubblewrap, so the modules that test isolation and resource limits (Daytona's, not T1's)
are skipped for it with that reason (`NOT_ON_THE_FAKE`), and what remains checks T1's side: the verifier
run, the report's integrity checks, and that nothing is left on every exit path.
"""

from __future__ import annotations

import functools
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from t1_sandbox import SANDBOXES, Sandbox
from t1_spec import DaytonaSandboxSpec, DockerSandboxSpec, LocalSandboxSpec, load_recipe

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
    "daytona": functools.partial(DaytonaSandboxSpec, control_timeout_s=60),  # the fake's /proc is the host's
}

_FAKE_PROVIDER = (
    "the fake Daytona API runs commands on this host under a plain bwrap (no pid, user or network namespace, "
    "no limits): "
)
#: Test modules that check what only a real Daytona runner enforces, each with the reason it is skipped.
NOT_ON_THE_FAKE = {
    "test_hardening": _FAKE_PROVIDER + "isolation (syscalls, namespaces, mounts) is the provider's",
    "test_resource_attacks": _FAKE_PROVIDER + "memory, pid, disk and CPU limits are the provider's, from the "
    "create's resources (asserted in tests/t1_sandbox/test_daytona_sandbox.py)",
}


def _preflight_problems(kind: str) -> list[str]:
    recipe = load_recipe(TINY)
    spec = SPEC_OF_KIND[kind]()
    return SANDBOXES.load(kind).preflight(recipe.model_copy(update={"sandbox": spec}))


#: Marks of a backend's runs (``-m docker`` selects the Docker ones, as .ci/run runs them).
MARKS = {"docker": [pytest.mark.docker]}

_ROOT = "the fake runs the sandbox's commands as the test's user, root here (Daytona's task images run as "
_ROOT += "root too): a read-only mode does not bind root, so the attack's premise does not hold"
_NET = "the fake has this host's network and no network namespace: the offline verifier path is not "
_NET += "reproduced"
#: Single tests of the suite that the fake cannot run as written, each with its reason (not passed: skipped).
NOT_ON_THE_FAKE_TESTS = {
    "test_a_forged_read_only_report_of_200_entries_is_refused": _ROOT,
    "test_an_unwritable_report_plus_a_forged_reward_file_scores_zero": _ROOT,
    "test_the_agent_cannot_modify_the_tests": _ROOT,
    "test_tests_are_read_only_and_unchanged_for_the_agents_uid": _ROOT,
    "test_a_pth_in_the_agents_user_site_never_runs_as_root": _ROOT,
    "test_a_link_from_the_agents_logs_to_a_system_folder_is_not_followed_as_root": _ROOT,
    "test_filling_the_disk_after_pytest_scores_zero_not_dropped": _FAKE_PROVIDER + "no disk limit",
    "test_a_bootstrap_that_cannot_reach_astral_sh_is_verified_offline_or_infrastructure_never_a_zero": _NET,
    "test_a_fake_dns_failure_does_not_turn_the_agents_zero_into_a_dropped_trial": _NET,
    "test_the_offline_verifier_scores_an_honest_run_by_its_assertions": _NET,
}


@pytest.fixture
def daytona_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A fake Daytona API of this test (``DAYTONA_API_URL`` and ``DAYTONA_API_KEY`` point at it)."""
    if shutil.which("bwrap") is None:
        pytest.skip("the fake Daytona API runs commands with bwrap, which this machine lacks")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "t1_sandbox"))
    from daytona_fake import FakeDaytona

    server = FakeDaytona(tmp_path / "daytona", image_toolchain=True)
    server.base.mkdir()
    server.start()
    monkeypatch.setenv("DAYTONA_API_KEY", "test-key")
    monkeypatch.setenv("DAYTONA_API_URL", server.url)
    yield server
    server.stop()


@pytest.fixture(
    params=[pytest.param(k, marks=MARKS.get(k, [])) for k in SANDBOXES.kinds() if k in SPEC_OF_KIND]
)
def backend_kind(request: pytest.FixtureRequest) -> str:
    """The sandbox kind under test; skipped (with the reason) where this machine cannot run it."""
    if request.param == "daytona":
        module = request.node.module.__name__.rsplit(".", 1)[-1]
        if module in NOT_ON_THE_FAKE:
            pytest.skip(NOT_ON_THE_FAKE[module])
        if request.node.originalname in NOT_ON_THE_FAKE_TESTS:
            pytest.skip(NOT_ON_THE_FAKE_TESTS[request.node.originalname])
        request.getfixturevalue("daytona_api")
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
