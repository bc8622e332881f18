"""The three shell backends as the shell tests make them: one unstarted sandbox per kind, and a task."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from t1_sandbox.base import Sandbox
from t1_spec import DaytonaSandboxSpec, load_recipe

REPO = Path(__file__).resolve().parents[2]


def environment(tmp_path: Path) -> Path:
    """A task environment ``FROM debian:bookworm-slim`` with ``WORKDIR /app``, under ``tmp_path``."""
    env = tmp_path / "task" / "environment"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (tmp_path / "task" / "task.toml").write_text("")
    return env


def make_sandbox(kind: str, request: pytest.FixtureRequest) -> Sandbox:
    """An unstarted sandbox of ``kind`` (skipped, said why, where this machine cannot run it)."""
    if kind == "local":
        if shutil.which("bwrap") is None or os.geteuid() != 0:
            pytest.skip("the local sandbox needs bubblewrap and root")
        from t1_sandbox.local import LocalSandbox

        return LocalSandbox()
    if kind == "docker":
        from t1_sandbox.docker import DockerSandbox

        recipe = load_recipe(REPO / "recipes" / "tiny-docker.yaml")
        if problems := DockerSandbox.preflight(recipe):
            pytest.skip("; ".join(problems))
        return DockerSandbox.from_spec(recipe.sandbox)
    if shutil.which("bwrap") is None:
        pytest.skip("the fake Daytona API runs commands with bwrap")
    sys.path.insert(0, str(Path(__file__).parent))
    from daytona_fake import FakeDaytona

    from t1_sandbox.daytona import DaytonaSandbox

    tmp = request.getfixturevalue("tmp_path") / "daytona"
    tmp.mkdir()
    server = FakeDaytona(tmp).start()
    request.addfinalizer(server.stop)
    monkeypatch = request.getfixturevalue("monkeypatch")
    monkeypatch.setenv("DAYTONA_API_KEY", "test-key")
    monkeypatch.setenv("DAYTONA_API_URL", server.url)
    return DaytonaSandbox.from_spec(DaytonaSandboxSpec(control_timeout_s=10))
