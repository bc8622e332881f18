"""The local sandbox's ``check_environment``: what of a task it cannot run, with the real cause, up front.

Expected causes come from what the local sandbox is (docs/tasks.md: the host's Debian bookworm userland,
read-only, no network, no image store); the Dockerfiles are the shapes Terminal-Bench 2 tasks use
(``FROM python:3.13-slim-bookworm``, ``RUN apt-get``, ``pip install``; harbor_tb.md §5).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from t1_sandbox.base import Sandbox
from t1_sandbox.local import LocalSandbox
from t1_sandbox.local.environment import run_step_hint
from t1_spec import load_recipe
from t1_tasks import load_pool, load_task

TINY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"
TB2_DOCKERFILE = """\
FROM python:3.13-slim-bookworm

RUN apt-get update && apt-get install -y git curl && rm -rf /var/lib/apt/lists/*
WORKDIR /app
RUN pip install --no-cache-dir numpy==2.1.0
COPY data.csv /app/data.csv
"""


def _task(root: Path, dockerfile: str | None, toml: str = "") -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text(toml)
    (root / "instruction.md").write_text("do it\n")
    if dockerfile is not None:
        (root / "environment" / "Dockerfile").write_text(dockerfile)
    (root / "environment" / "data.csv").write_text("a\n")
    (root / "tests" / "test.sh").write_text("pytest /tests/test_outputs.py\n")
    (root / "tests" / "test_outputs.py").write_text("def test_a():\n    assert True\n")
    return root


def test_the_seam_has_check_environment_and_the_default_finds_nothing(tmp_path):
    task = load_task(_task(tmp_path / "t", TB2_DOCKERFILE))
    assert Sandbox.check_environment(task) == []  # a backend that builds any Dockerfile


def test_a_terminal_bench_2_dockerfile_is_refused_with_each_real_cause_and_the_docker_backend(tmp_path):
    task = load_task(_task(tmp_path / "tb2", TB2_DOCKERFILE))
    lines = LocalSandbox.check_environment(task)
    assert len(lines) == 3, lines  # the base, the apt-get step and the pip step, all at once
    base, apt, pip = lines
    assert "Dockerfile:1: base image 'python:3.13-slim-bookworm' cannot be run by the local sandbox" in base
    assert "no image store and no network" in base and "read-only" in base
    assert "Dockerfile:3: RUN 'apt-get update" in apt and "read-only, and there is no network" in apt
    assert "Dockerfile:5: RUN 'pip install" in pip and "from the network" in pip
    assert all("`sandbox.kind: docker`" in line for line in lines)


def test_apt_get_on_the_supported_base_is_refused_before_it_runs(tmp_path):
    dockerfile = "FROM debian:bookworm-slim\nWORKDIR /app\nRUN apt-get install -y jq\n"
    (line,) = LocalSandbox.check_environment(load_task(_task(tmp_path / "t", dockerfile)))
    assert line.startswith(f"{tmp_path / 't' / 'environment' / 'Dockerfile'}:3: RUN 'apt-get install -y jq'")
    assert "/usr, /etc and /var are this host's, read-only" in line


@pytest.mark.parametrize(
    "command",
    [
        "pip install requests",
        "python3 -m pip install x",
        "uv pip install x",
        "curl -LsSf https://astral.sh/uv/install.sh | sh",
        "npm install",
        "git clone https://github.com/a/b",
        "apk add bash",
    ],
)
def test_install_and_download_steps_are_named(command):
    assert run_step_hint(command) is not None


@pytest.mark.parametrize(
    "command", ["bash /app/setup.sh && rm /app/setup.sh", "chmod +x /app/x.sh", "git init"]
)
def test_local_steps_are_not(command):
    assert run_step_hint(command) is None


def test_every_bundled_mini_task_is_runnable_locally():
    for task in load_pool("builtin:mini"):
        assert LocalSandbox.check_environment(task) == [], task.id


def test_a_prebuilt_image_without_a_dockerfile_names_the_image_and_the_docker_backend(tmp_path):
    toml = '[environment]\ndocker_image = "alexgshaw/fix-git:20260403"\n'
    (line,) = LocalSandbox.check_environment(load_task(_task(tmp_path / "img", None, toml)))
    assert "environment/Dockerfile: missing" in line and "'alexgshaw/fix-git:20260403'" in line
    assert "no image store" in line and "`sandbox.kind: docker`" in line


def test_gpus_workdir_and_network_policy_the_local_sandbox_cannot_keep_are_named(tmp_path):
    ok = "FROM debian:bookworm-slim\nWORKDIR /app\n"
    gpus = load_task(_task(tmp_path / "g", ok, "[environment]\ngpus = 1\n"))
    assert any("environment.gpus = 1" in line for line in LocalSandbox.check_environment(gpus))
    wd = load_task(_task(tmp_path / "w", ok, '[environment]\nworkdir = "/srv"\n'))
    assert any("environment.workdir = '/srv' differs" in line for line in LocalSandbox.check_environment(wd))
    same = load_task(_task(tmp_path / "s", ok, '[environment]\nworkdir = "/app"\n'))
    assert LocalSandbox.check_environment(same) == []
    offline = load_task(_task(tmp_path / "n", ok, "[environment]\nallow_internet = false\n"))
    networked = load_recipe(TINY, ["sandbox.network=true"])
    assert LocalSandbox.check_environment(offline, load_recipe(TINY)) == []
    (line,) = LocalSandbox.check_environment(offline, networked)
    assert "environment.network_mode = 'no-network'" in line and "sandbox.network" in line
