"""The Docker sandbox parts that need no daemon: the base map, FROM rewrite, task.toml, seccomp, limits."""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

import pytest

from t1_sandbox import SANDBOXES
from t1_sandbox.base import SandboxError
from t1_sandbox.docker import client as dc
from t1_sandbox.docker import images, toolchain
from t1_sandbox.docker.sandbox import DockerSandbox, _capped
from t1_sandbox.docker.security import CLONE_NEWUSER, seccomp_profile
from t1_sandbox.local.seccomp import DENIED
from t1_spec import DockerSandboxSpec, load_recipe

REPO = Path(__file__).resolve().parents[2]


def test_the_registry_names_the_docker_backend():
    assert SANDBOXES.load("docker") is DockerSandbox


def test_map_base_ignores_the_docker_hub_prefix():
    m = {"python:3.13-slim-bookworm": "t1-local/debian:trixie"}
    assert images.map_base("python:3.13-slim-bookworm", m) == "t1-local/debian:trixie"
    assert images.map_base("docker.io/library/python:3.13-slim-bookworm", m) == "t1-local/debian:trixie"
    assert images.map_base("python:3.12-slim", m) is None


def test_every_from_is_mapped_but_stage_names_and_scratch_are_not(tmp_path):
    df = tmp_path / "Dockerfile"
    df.write_text(
        "FROM --platform=linux/amd64 python:3.13-slim-bookworm AS build\nRUN echo x\n"
        "FROM build\nFROM scratch\nFROM ubuntu:24.04\n"
    )
    text, swaps, kept = images._rewrite(df, {"python:3.13-slim-bookworm": "t1-local/debian:trixie"})
    lines = text.splitlines()
    assert lines[0] == "FROM --platform=linux/amd64 t1-local/debian:trixie AS build"
    assert lines[2] == "FROM build" and lines[3] == "FROM scratch"
    assert swaps == [("python:3.13-slim-bookworm", "t1-local/debian:trixie")]
    assert kept == ["ubuntu:24.04 (line 5)"]  # unmapped: the daemon must have it


def test_a_terminal_bench_2_environment_table_is_read_as_harbor_reads_it(tmp_path):
    (tmp_path / "environment").mkdir()
    (tmp_path / "task.toml").write_text(
        'version = "1.0"\n[environment]\ncpus = 1\nmemory = "2G"\nstorage = "10G"\n'
        'allow_internet = false\ndocker_image = "alexgshaw/fix-git:20251031"\n'
    )
    env = images.task_environment(tmp_path / "environment")
    assert (env.cpus, env.memory_mb, env.storage_mb) == (1.0, 2048, 10240)
    assert env.allow_internet is False and env.docker_image == "alexgshaw/fix-git:20251031"
    assert images.task_environment(tmp_path / "nowhere" / "environment") == images.TaskEnvironment()


def test_a_bad_task_toml_is_a_sandbox_error_naming_the_file(tmp_path):
    (tmp_path / "environment").mkdir()
    (tmp_path / "task.toml").write_text('[environment]\nmemory = "lots"\n')
    with pytest.raises(SandboxError, match="task.toml"):
        images.task_environment(tmp_path / "environment")


def test_the_task_asks_and_the_recipe_caps():
    assert _capped(2048, 512) == 512  # a task asking less gets what it asks
    assert _capped(2048, 8192) == 2048  # never more than the recipe allows
    assert _capped(1024, None) == 1024 and _capped(None, 100) == 100


def test_the_seccomp_profile_refuses_the_local_list_and_nested_user_namespaces():
    profile = json.loads(seccomp_profile())
    denied = next(r for r in profile["syscalls"] if r["names"] == list(DENIED))
    assert (denied["action"], denied["errnoRet"]) == ("SCMP_ACT_ERRNO", 1)
    clone = next(r for r in profile["syscalls"] if r["names"] == ["clone"])
    assert clone["args"][0]["value"] == CLONE_NEWUSER == 0x10000000 and clone["errnoRet"] == 1
    assert next(r for r in profile["syscalls"] if r["names"] == ["clone3"])["errnoRet"] == 38  # ENOSYS


@pytest.mark.parametrize(
    ("driver", "backing", "capped"),
    [("btrfs", "", True), ("overlay2", "xfs", True), ("overlay2", "extfs", False), ("vfs", "", False)],
)
def test_only_drivers_with_quotas_can_cap_the_disk(driver, backing, capped):
    info = {"Driver": driver, "DriverStatus": [["Backing Filesystem", backing]] if backing else []}
    why = dc.disk_cap_problem(info)
    assert (why is None) == capped
    if why:
        assert driver in why and "disk_mb: null" in why


def test_the_interpreter_run_path_becomes_relative_in_place():
    binary = b"\x7fELF...\0/root/.pyenv/versions/3.12.1/lib\0more"
    fixed = toolchain._relative_runpath(binary, "/root/.pyenv/versions/3.12.1")
    assert len(fixed) == len(binary) and b"\0$ORIGIN/../lib\0" in fixed
    assert toolchain._relative_runpath(b"no path here", "/x") == b"no path here"


def test_the_toolchain_archive_has_pytest_its_plugin_uv_and_ends_with_the_marker():
    _, path = toolchain.toolchain_tar()
    with tarfile.open(path) as tar:
        names = tar.getnames()
        root = tar.getmember("verifier")
    assert names[-1] == ".complete"
    assert (root.mode, root.uid, root.gid) == (0o750, 0, toolchain.VERIFIER_GID)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for name in (f"verifier/bin/{ver}", "verifier/bin/uv", "verifier/bin/pytest", "verifier/t1run.py"):
        assert name in names
    assert any(n.startswith("verifier/site-packages/pytest_json_ctrf-") for n in names)
    assert any(n.startswith(f"verifier/lib/{ver}/__pycache__/") for n in names)  # bytecode kept
    assert not any(n.startswith(f"verifier/lib/{ver}/site-packages") for n in names)


def test_preflight_names_a_daemon_that_does_not_answer(tmp_path):
    recipe = load_recipe(REPO / "recipes" / "tiny-docker.yaml")
    spec = DockerSandboxSpec(host=f"unix://{tmp_path}/no-daemon.sock")
    (line,) = DockerSandbox.preflight(recipe.model_copy(update={"sandbox": spec}))
    assert line.startswith("sandbox.kind 'docker': no Docker daemon answers at unix://")


def test_preflight_reads_its_own_section_typed_and_refuses_another_kinds():
    tiny = load_recipe(REPO / "recipes" / "tiny-cpu.yaml")  # sandbox.kind: local, which has no host field
    with pytest.raises(TypeError, match="recipe.sandbox is kind 'local', not 'docker'"):
        DockerSandbox.preflight(tiny)


def test_the_tiny_docker_recipe_maps_every_terminal_bench_2_base():
    recipe = load_recipe(REPO / "recipes" / "tiny-docker.yaml")
    assert recipe.sandbox.kind == "docker"
    tb2_bases = ("python:3.13-slim-bookworm", "ubuntu:24.04", "debian:13.0-slim", "python:3.11-slim")
    tb2_bases += ("python:3.10-slim-bookworm", "debian:bullseye-slim", "python:3.11")
    # Debian and Ubuntu bases map to the Debian images, python:* ones to the python stand-ins
    # (tools/docker/build_python_images.sh), each built here without a registry.
    mapped = {b: recipe.sandbox.images.get(b, "") for b in tb2_bases}
    assert all(
        t.startswith("t1-local/python:" if b.startswith("python:") else "t1-local/debian:")
        for b, t in mapped.items()
    ), mapped


def test_check_environment_refuses_gpus_and_a_task_without_an_image(tmp_path):
    from t1_tasks.harbor import HarborEnvironment

    class Task:
        id = "t"
        environment_dir = tmp_path / "environment"
        environment = HarborEnvironment(gpus=1)

    problems = DockerSandbox.check_environment(Task())
    assert any("gpus = 1" in p for p in problems)
    assert any("docker_image is not set" in p for p in problems)
