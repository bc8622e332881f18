"""The Docker sandbox against a real daemon: builds, stand-ins, task resources, network, launches, sweeps.

Each test skips with the backend's preflight lines where no daemon answers (or the local base images are
missing); ``.ci/run`` starts a daemon and builds the images.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from t1_sandbox.base import SandboxError
from t1_sandbox.docker import DockerSandbox
from t1_sandbox.docker import client as dc
from t1_spec import DockerSandboxSpec, load_recipe

REPO = Path(__file__).resolve().parents[2]
RECIPE = load_recipe(REPO / "recipes" / "tiny-docker.yaml")
pytestmark = pytest.mark.docker


@pytest.fixture(autouse=True)
def daemon():
    problems = DockerSandbox.preflight(RECIPE)
    if problems:
        pytest.skip("; ".join(problems))


def _sandbox(**fields) -> DockerSandbox:
    return DockerSandbox.from_spec(RECIPE.sandbox.model_copy(update=fields))


def _task(tmp_path: Path, dockerfile: str, toml: str | None = None, files: dict | None = None) -> Path:
    env = tmp_path / "task" / "environment"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text(dockerfile)
    for name, text in (files or {}).items():
        (env / name).write_text(text)
    if toml is not None:
        (tmp_path / "task" / "task.toml").write_text(toml)
    return env


def _inspect(sb: DockerSandbox) -> dict:
    return dc.api_client(None).inspect_container(sb.container_id)


async def test_a_terminal_bench_style_dockerfile_builds_on_its_stand_in_with_the_tasks_resources(tmp_path):
    env = _task(
        tmp_path,
        "FROM python:3.13-slim-bookworm\nWORKDIR /app\nENV GREETING=hello\nCOPY data.txt /app/data.txt\n"
        "RUN python3 -c \"print('built')\" > /app/built.txt\n",
        '[environment]\ncpus = 0.5\nmemory = "512M"\nstorage = "64M"\n',
        {"data.txt": "42\n"},
    )
    async with _sandbox() as sb:
        await sb.start(env, timeout_s=600)
        r = await sb.exec("python3 --version; cat data.txt built.txt; echo $GREETING; id -u", timeout_s=60)
        host = _inspect(sb)["HostConfig"]
        labels = _inspect(sb)["Config"]["Labels"]
    assert r.ok, r.stderr
    assert r.stdout.split()[0] == "Python" and r.stdout.split()[1].startswith("3.13.")
    assert r.stdout.split()[2:] == ["42", "built", "hello", "1000"]
    assert labels["t1.stand_in"] == "python:3.13-slim-bookworm -> t1-local/python:3.13-slim-bookworm"
    assert sb.choice is not None and sb.choice.stand_ins == (
        ("python:3.13-slim-bookworm", "t1-local/python:3.13-slim-bookworm"),
    )
    # the task's requests, each under the recipe's cap (cpus 1, 1024 MiB, 1024 MiB of disk)
    assert host["NanoCpus"] == 500_000_000 and host["Memory"] == host["MemorySwap"] == 512 << 20
    # the recipe's disk_mb is null (this daemon's overlay2 on ext4 cannot cap): the task's 64M is not applied
    assert sb.limits["disk_mb"] is None and not host.get("StorageOpt") and host["NetworkMode"] == "none"
    assert host["CapAdd"] and "ALL" in host["CapDrop"]


async def test_a_task_asking_more_than_the_recipe_gets_the_recipes_limit(tmp_path):
    env = _task(tmp_path, "FROM debian:bookworm-slim\n", '[environment]\ncpus = 4\nmemory = "8G"\n')
    async with _sandbox() as sb:
        await sb.start(env, timeout_s=600)
        host = _inspect(sb)["HostConfig"]
    assert host["NanoCpus"] == 1_000_000_000 and host["Memory"] == 1024 << 20
    assert sb.limits["memory_mb"] == 1024 and sb.task_root == "/app"  # no WORKDIR: Harbor's /app


async def test_the_tasks_docker_image_is_used_when_the_daemon_has_it(tmp_path):
    env = tmp_path / "task" / "environment"
    env.mkdir(parents=True)  # no Dockerfile at all
    (tmp_path / "task" / "task.toml").write_text('[environment]\ndocker_image = "t1-local/debian:bookworm"\n')
    async with _sandbox() as sb:
        await sb.start(env, timeout_s=600)
        r = await sb.exec("python3 --version", timeout_s=60)
    assert sb.choice.source == "docker_image" and sb.choice.image == "t1-local/debian:bookworm"
    assert r.stdout.split()[:2] == ["Python", "3.11.2"]


async def test_an_unmapped_base_the_daemon_lacks_names_the_image_map(tmp_path):
    env = _task(tmp_path, "FROM registry.invalid/nothing:1\n")
    sb = _sandbox(images={})
    with pytest.raises(SandboxError, match=r"registry.invalid/nothing:1 \(line 1\).*sandbox.images"):
        await sb.start(env, timeout_s=120)
    assert sb.container_id is None


async def test_a_build_step_that_needs_the_network_says_the_build_has_none(tmp_path):
    env = _task(tmp_path, "FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y cowsay\n")
    sb = _sandbox()
    with pytest.raises(SandboxError, match="the build has no network"):
        await sb.start(env, timeout_s=600)


async def test_no_network_inside_by_default(tmp_path):
    env = _task(tmp_path, "FROM debian:bookworm-slim\nWORKDIR /app\n")
    async with _sandbox() as sb:
        await sb.start(env, timeout_s=600)
        r = await sb.exec("cat /proc/net/dev | tail -n +3 | cut -d: -f1", timeout_s=60)
    assert r.stdout.split() == ["lo"]


async def test_background_jobs_and_double_forks_die_with_their_exec(tmp_path):
    env = _task(tmp_path, "FROM debian:bookworm-slim\nWORKDIR /app\n")
    async with _sandbox() as sb:
        await sb.start(env, timeout_s=600)
        first = await sb.exec("sleep 301 & (setsid sleep 302 &) ; echo started", timeout_s=60)
        later = await sb.exec("ps -eo args | grep -c '^sleep 30[12]' || true", timeout_s=60)
    assert first.ok and first.stdout.strip() == "started"
    assert later.stdout.strip() == "0"


async def test_a_missing_working_directory_is_a_sandbox_error(tmp_path):
    env = _task(tmp_path, "FROM debian:bookworm-slim\nWORKDIR /app\n")
    async with _sandbox() as sb:
        await sb.start(env, timeout_s=600)
        with pytest.raises(SandboxError, match="working directory '/nowhere' is not usable"):
            await sb.exec("true", timeout_s=60, cwd="/nowhere")


async def test_a_read_only_upload_under_a_folder_the_agent_can_write_is_refused(tmp_path):
    env = _task(tmp_path, "FROM debian:bookworm-slim\nWORKDIR /app\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("true\n")
    async with _sandbox() as sb:
        await sb.start(env, timeout_s=600)
        with pytest.raises(SandboxError, match="writable by others: /app"):
            await sb.upload(tests, "/app/tests", read_only=True)
        await sb.upload(tests, "/tests", read_only=True)
        r = await sb.exec("stat -c '%U %a' /tests /tests/test.sh", timeout_s=60)
    assert r.stdout.split() == ["root", "555", "root", "444"]


async def test_containers_of_a_dead_owner_are_removed_by_the_next_start(tmp_path):
    api = dc.api_client(None)
    dead = dc.owner_labels("dead-run") | {"t1.pid": str(2**22 + 17), "t1.pid_start": "1"}
    orphan = api.create_container("t1-local/debian:bookworm", command=["true"], labels=dead)["Id"]
    dc._SWEPT.discard(None)
    env = _task(tmp_path, "FROM debian:bookworm-slim\n")
    async with _sandbox() as sb:
        await sb.start(env, timeout_s=600)
        mine = sb.container_id
        gone = not api.containers(all=True, filters={"id": orphan})
        assert api.containers(all=True, filters={"id": mine})  # a live owner's container stays
    assert gone


async def test_reclaim_removes_every_container_of_a_run(tmp_path):
    env = _task(tmp_path, "FROM debian:bookworm-slim\n")
    sb = _sandbox()
    sb.run_id = f"reclaim-{os.getpid()}"
    await sb.start(env, timeout_s=600)
    container = sb.container_id
    removed = DockerSandbox.reclaim(sb.run_id)
    assert removed and not dc.api_client(None).containers(all=True, filters={"id": container})
    await sb.close()  # the container is gone already: close stays quiet


def test_the_spec_defaults_are_the_constructors():
    sb = DockerSandbox()
    spec = DockerSandboxSpec()
    assert (sb.cpus, sb.memory_mb, sb.pids_limit, sb.disk_mb) == (
        spec.cpus,
        spec.memory_mb,
        spec.pids_limit,
        spec.disk_mb,
    )


async def test_a_disk_cap_the_storage_driver_cannot_enforce_is_refused_not_ignored(tmp_path):
    why = dc.disk_cap_problem(dc.daemon_info(None))
    if why is None:
        pytest.skip("this daemon's storage driver enforces disk quotas")
    recipe = RECIPE.model_copy(update={"sandbox": RECIPE.sandbox.model_copy(update={"disk_mb": 1024})})
    assert f"sandbox.disk_mb: {why}" in DockerSandbox.preflight(recipe)
    env = _task(tmp_path, "FROM debian:bookworm-slim\n")
    sb = _sandbox(disk_mb=1024)
    with pytest.raises(SandboxError, match="the daemon refused the container"):
        await sb.start(env, timeout_s=600)
    assert sb.container_id is None
