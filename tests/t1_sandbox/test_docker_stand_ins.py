"""Local stand-ins behave like the images they stand for where Debian allows, and say where they do not.

The python images put CPython under ``/usr/local`` with no PEP 668 marker and no ``/usr/bin/python``; a
Debian userland stand-in has Debian's Python there instead (``pip install`` refused, a task's ``ln -s
/usr/local/bin/python3 /usr/bin/python`` failing). ``tools/docker/build_python_images.sh`` builds
``t1-local/python:X.Y-slim-<suite>``; a stand-in that differs is named with what differs.
"""

from __future__ import annotations

import logging
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from t1_sandbox.base import SandboxError
from t1_sandbox.docker import images
from t1_sandbox.docker.stand_ins import base_facts, differences

PY_BOOKWORM = "t1-local/python:3.13-slim-bookworm"
DEBIAN_LABELS = {"org.t1.base": "debian:trixie", "org.t1.python": "3.13.5"}
PYTHON_LABELS = {"org.t1.base": "python:3.13-slim-bookworm", "org.t1.python": "3.13.0"}


@pytest.mark.parametrize(
    ("ref", "facts"),
    [
        ("python:3.13-slim-bookworm", ("debian", "bookworm", "3.13")),
        ("docker.io/library/python:3.12.4-slim@sha256:abc", ("debian", None, "3.12")),
        ("python:3.11-alpine", ("alpine", None, "3.11")),
        ("debian:12-slim", ("debian", "bookworm", None)),
        ("public.ecr.aws/docker/library/debian:trixie-slim", ("debian", "trixie", None)),
        ("ubuntu:24.04", ("ubuntu", "24.04", None)),
    ],
)
def test_a_base_reference_says_its_distribution_suite_and_python(ref, facts):
    got = base_facts(ref)
    assert (got.distribution, got.suite, got.python) == facts


def test_a_debian_stand_in_for_a_python_base_lists_the_suite_python_and_marker():
    found = differences("python:3.13-slim-bookworm", DEBIAN_LABELS)
    assert len(found) == 2
    assert found[0].startswith("Debian trixie, not bookworm") and "openssl" in found[0]
    assert "/usr/bin/python exists" in found[1] and "EXTERNALLY-MANAGED" in found[1]


def test_the_python_stand_in_on_its_suite_is_faithful():
    assert differences("python:3.13-slim-bookworm", PYTHON_LABELS) == []
    assert differences("docker.io/library/python:3.13-slim-bookworm", PYTHON_LABELS) == []


def test_another_minor_version_another_distribution_and_unlabelled_images():
    assert differences("python:3.12-slim-bookworm", PYTHON_LABELS) == ["CPython 3.13.0, not 3.12"]
    assert differences("ubuntu:24.04", DEBIAN_LABELS) == ["a Debian trixie userland, not ubuntu"]
    assert differences("debian:bookworm-slim", {"org.t1.base": "debian:bookworm"}) == []
    assert differences("python:3.13-slim-bookworm", {}) == []  # not T1's image: not judged


# --- against the Docker daemon -------------------------------------------------------------------------


def _has(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0


def _run(image: str, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", "run", "--rm", "--network", "none", image, "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _api():
    import docker

    return docker.APIClient(version="auto")


@pytest.mark.docker
def test_the_python_stand_in_has_the_python_images_layout_on_bookworm():
    if not _has(PY_BOOKWORM):
        pytest.skip(f"{PY_BOOKWORM} not built (tools/docker/build_python_images.sh 3.13-bookworm)")
    done = _run(
        PY_BOOKWORM,
        "command -v python3 python pip; python3 -c 'import sys; print(sys.version_info[:2])'; "
        "cat /etc/debian_version; ls /usr/bin/python* /usr/lib/python3*/EXTERNALLY-MANAGED "
        "/usr/local/lib/python3*/EXTERNALLY-MANAGED 2>/dev/null | wc -l; "
        "pip install --no-index t1-absent-package 2>&1 | tail -1; "
        "ln -s /usr/local/bin/python3 /usr/bin/python && echo linked",
    )
    lines = done.stdout.splitlines()
    assert lines[:3] == ["/usr/local/bin/python3", "/usr/local/bin/python", "/usr/local/bin/pip"], done
    assert lines[3] == "(3, 13)" and lines[4].startswith("12."), done.stdout  # bookworm is Debian 12
    assert lines[5] == "0", done.stdout  # no /usr/bin/python*, no EXTERNALLY-MANAGED marker
    assert "No matching distribution" in lines[6] and "externally" not in done.stdout, done.stdout
    assert lines[7] == "linked"


@pytest.mark.docker
def test_a_python_task_dockerfile_builds_on_its_stand_in_and_warns_on_the_debian_one(tmp_path, caplog):
    if not (_has(PY_BOOKWORM) and _has("t1-local/debian:trixie")):
        pytest.skip("needs t1-local/python:3.13-slim-bookworm and t1-local/debian:trixie")
    env = tmp_path / "py-task" / "environment"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text(
        "FROM python:3.13-slim-bookworm\n"
        "RUN ln -s /usr/local/bin/python3 /usr/bin/python\n"
        "RUN pip install --no-index t1-absent 2>&1 | grep -q 'No matching distribution'\n"
    )
    task_env = images.TaskEnvironment()
    with caplog.at_level(logging.WARNING, logger="t1.sandbox.docker"):
        _, text, swaps, tag = images.resolve_image(
            _api(), env, task_env, {"python:3.13-slim-bookworm": PY_BOOKWORM}
        )
    assert not [r for r in caplog.records if "faithful" in r.getMessage()]
    tag = f"t1-test/stand-in:{uuid.uuid4().hex[:8]}"
    try:
        images.build_image(None, env, text, tag, swaps, network=False, timeout_s=300)
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
    with caplog.at_level(logging.WARNING, logger="t1.sandbox.docker"):
        images.resolve_image(_api(), env, task_env, {"python:3.13-slim-bookworm": "t1-local/debian:trixie"})
    said = [r.getMessage() for r in caplog.records if "faithful" in r.getMessage()]
    assert len(said) == 1 and str(env) in said[0] and "Debian trixie, not bookworm" in said[0], said
    assert "EXTERNALLY-MANAGED" in said[0]


@pytest.mark.docker
def test_a_stand_in_missing_from_the_daemon_names_the_script_that_builds_it(tmp_path):
    env = tmp_path / "task" / "environment"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text("FROM python:3.99-slim-bookworm\n")
    with pytest.raises(SandboxError, match="build_python_images.sh"):
        images.resolve_image(
            _api(), env, images.TaskEnvironment(), {"python:3.99-slim-bookworm": "t1-local/python:3.99-x"}
        )


@pytest.mark.docker
def test_a_failed_build_prints_its_step_exit_code_and_last_lines(tmp_path):
    if not _has("t1-local/debian:bookworm"):
        pytest.skip("t1-local/debian:bookworm not built (tools/docker/build_base_images.sh)")
    env = tmp_path / "task" / "environment"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text(
        "FROM t1-local/debian:bookworm\nRUN echo one-line-before; echo the-last-line >&2; exit 7\n"
    )
    tag = f"t1-test/fails:{uuid.uuid4().hex[:8]}"
    with pytest.raises(SandboxError) as caught:
        images.build_image(
            None, env, env.joinpath("Dockerfile").read_text(), tag, [], network=False, timeout_s=300
        )
    said = str(caught.value)
    assert re.search(r"build failed at step 2/\d+ `RUN echo one-line-before", said), said
    assert "exit code 7" in said and "the-last-line" in said.split("its last lines:")[1], said
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
    assert Path(env).is_dir()


@pytest.mark.docker
def test_every_python_base_of_the_docker_recipe_has_a_faithful_stand_in():
    from t1_spec import load_recipe

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "tiny-docker.yaml")
    pythons = {b: t for b, t in recipe.sandbox.images.items() if b.startswith("python:")}
    assert pythons and all(t.startswith("t1-local/python:") for t in pythons.values()), pythons
    api = _api()
    for base, target in sorted(pythons.items()):
        if not _has(target):
            pytest.skip(f"{target} not built (tools/docker/build_python_images.sh)")
        labels = api.inspect_image(target)["Config"]["Labels"]
        assert differences(base, labels) == [], (base, target)
