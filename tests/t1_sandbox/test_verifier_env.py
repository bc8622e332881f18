"""The verifier's lean environment: a task's pytest loads pytest-json-ctrf and no plugin of the project.

The project's environment holds hypothesis, pytest-asyncio, anyio, platformdirs, each a pytest plugin
through its entry point; mounted into the verifier, every ``test.sh`` loaded them (seconds per start, and a
different test order). The per-assertion reports of the mini pool stay what they were with the full
environment.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from t1_sandbox.base import SandboxError
from t1_sandbox.local import LocalSandbox
from t1_sandbox.local import bwrap as bwrap_module
from t1_sandbox.local import sandbox as sandbox_module
from t1_sandbox.local.toolchain import TOOLCHAIN_MOUNT, toolchain
from t1_sandbox.verifier_env import INSTALL_HINT, distributions, lean_site

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)
LEAN = {"iniconfig", "packaging", "pluggy", "pygments", "pytest", "pytest-json-ctrf"}


def test_the_lean_set_is_pytest_its_report_plugin_and_their_dependencies():
    names = {d.metadata["Name"].lower() for d in distributions()}
    assert names == LEAN  # on Python 3.11+: no exceptiongroup or tomli, no extra's dependency (hypothesis)


def test_a_missing_distribution_is_named_with_the_command_that_installs_it():
    with pytest.raises(SandboxError) as caught:
        distributions(("t1-no-such-distribution",))
    assert "'t1-no-such-distribution'" in str(caught.value) and INSTALL_HINT in str(caught.value)


def test_the_lean_site_holds_only_those_distributions_with_bytecode_for_the_mount(tmp_path):
    site = lean_site(tmp_path / "cache", "/opt/x/site-packages")
    infos = {p.name.removesuffix(".dist-info").rsplit("-", 1)[0].lower() for p in site.glob("*.dist-info")}
    assert {n.replace("_", "-") for n in infos} == LEAN
    assert not (site / "hypothesis").exists() and not (site / "anyio").exists()
    assert list((site / "_pytest" / "__pycache__").glob("*.pyc"))
    assert lean_site(tmp_path / "cache", "/opt/x/site-packages") == site  # built once, then reused
    assert all(p.stat().st_mode & 0o004 for p in site.rglob("*"))  # the sandbox's uid reads it all


async def _started(tmp_path: Path) -> LocalSandbox:
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    sandbox = LocalSandbox()
    await sandbox.start(env, timeout_s=60)
    return sandbox


def _plugins(version_output: str) -> list[str]:
    """The names pytest ``--version --version`` lists under "registered third-party plugins"."""
    lines = version_output.splitlines()
    if "registered third-party plugins:" not in lines:
        return []
    start = lines.index("registered third-party plugins:") + 1
    return [line.split()[0] for line in lines[start:] if line.startswith("  ")]


@needs_bwrap
async def test_the_verifiers_pytest_lists_no_plugin_of_the_project(tmp_path):
    async with await _started(tmp_path) as sb:
        run = await sb.exec_verifier("python3 -m pytest --version --version", timeout_s=120)
        assert run.ok, run.stderr
        plugins = _plugins(run.stdout + run.stderr)
        assert [p.rsplit("-", 1)[0] for p in plugins] == ["pytest-json-ctrf"], run.stdout
        points = await sb.exec_verifier(
            "python3 -c 'import importlib.metadata as m; "
            'print(sorted(d.metadata["Name"] for d in m.distributions()))\'',
            timeout_s=60,
        )
        assert {n.lower() for n in json.loads(points.stdout.strip().replace("'", '"'))} == LEAN


def _full_environment():
    """The toolchain as it was: the project's whole ``site-packages`` mounted for the verifier."""
    tc = toolchain()
    full = str(Path(pytest.__file__).resolve().parent.parent)
    mount = f"{TOOLCHAIN_MOUNT}/site-packages"
    binds = tuple((full if dest == mount else src, dest) for src, dest in tc.binds)
    return dataclasses.replace(tc, binds=binds, site=full)


def _report(out: Path) -> list[tuple[str, str]]:
    tests = json.loads((out / "ctrf.json").read_text())["results"]["tests"]
    return sorted((t["name"], t["status"]) for t in tests)


@needs_bwrap
@pytest.mark.slow
async def test_the_mini_pools_per_assertion_reports_are_unchanged(tmp_path, monkeypatch):
    from t1_rollout.validate import run_check
    from t1_tasks import load_pool

    pool = load_pool("builtin:mini")
    lean: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for task in pool.tasks:
        for kind in ("oracle", "nop"):
            check = await run_check(task, kind, sandbox_factory=LocalSandbox, work_dir=tmp_path / "lean")
            assert check.per_assertion_report, (task.id, kind, check.error)
            lean[task.id, kind] = _report(tmp_path / "lean" / task.id / kind)
        assert lean[task.id, "oracle"] and all(s == "passed" for _, s in lean[task.id, "oracle"])
    full = _full_environment()
    monkeypatch.setattr(bwrap_module, "toolchain", lambda: full)
    monkeypatch.setattr(sandbox_module, "toolchain", lambda: full)
    async with await _started(tmp_path) as sb:  # the comparison is with the whole environment indeed
        run = await sb.exec_verifier("python3 -m pytest --version --version", timeout_s=120)
        assert "hypothesis" in " ".join(_plugins(run.stdout + run.stderr)), run.stdout
    for task in pool.tasks:
        for kind in ("oracle", "nop"):
            await run_check(task, kind, sandbox_factory=LocalSandbox, work_dir=tmp_path / "full")
            assert _report(tmp_path / "full" / task.id / kind) == lean[task.id, kind], (task.id, kind)


@pytest.mark.docker
async def test_the_docker_verifiers_pytest_lists_no_plugin_of_the_project(tmp_path):
    from t1_sandbox.docker import DockerSandbox
    from t1_spec import load_recipe

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "tiny-docker.yaml")
    env = tmp_path / "task" / "environment"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    async with DockerSandbox.from_spec(recipe.sandbox) as sb:
        await sb.start(env, timeout_s=600)
        run = await sb.exec_verifier("python3 -m pytest --version --version", timeout_s=120)
    assert run.ok, run.stderr
    assert [p.rsplit("-", 1)[0] for p in _plugins(run.stdout + run.stderr)] == ["pytest-json-ctrf"], (
        run.stdout
    )
