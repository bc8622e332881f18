"""The local sandbox's Dockerfile subset: refusals say what is supported and that no other backend exists."""

from pathlib import Path

import pytest

from t1_sandbox.base import UnsupportedDockerfileInstruction
from t1_sandbox.dockerfile import parse_dockerfile


def _dockerfile(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("FROM debian:bookworm-slim\nWORKDIR /app\nUSER nobody\n", "Dockerfile:3: instruction USER"),
        ("FROM python:3.12-slim\n", "Dockerfile:1: base image 'python:3.12-slim'"),
        ("FROM debian:bookworm-slim\nCOPY --chown=1:1 a /a\n", "Dockerfile:2: COPY flags"),
        ("FROM debian:bookworm-slim\nFROM debian:bookworm\n", "Dockerfile:2: multi-stage"),
        ("RUN true\n", "first instruction must be FROM"),
    ],
)
def test_a_refusal_lists_the_supported_subset_and_says_no_other_sandbox_is_built(tmp_path, text, where):
    with pytest.raises(UnsupportedDockerfileInstruction) as info:
        parse_dockerfile(_dockerfile(tmp_path, text))
    message = str(info.value)
    assert where in message
    assert "FROM debian:bookworm[-slim], WORKDIR, COPY" in message and "ENV and RUN" in message
    # The real cause (no image store, no network, the host's read-only userland) and the backend that runs it.
    assert "no image store and no network" in message and "read-only" in message
    assert "set `sandbox.kind: docker` in the recipe" in message


def test_the_supported_subset_parses(tmp_path):
    text = "FROM debian:bookworm\nWORKDIR /app\nENV A=1\nCOPY x /app/x\nRUN echo hi\n"
    names = [i.name for i in parse_dockerfile(_dockerfile(tmp_path, text))]
    assert names == ["FROM", "WORKDIR", "ENV", "COPY", "RUN"]


def test_local_sandbox_docs_say_limits_and_deadlines_come_from_the_recipe_not_task_toml():
    import t1_sandbox as sandbox_pkg
    import t1_sandbox.local as local

    doc = " ".join((local.__doc__ or "").split())
    for words in (
        "``LocalSandbox.from_spec``",
        "``rollout.agent_deadline_s``",
        "``rollout.verifier_deadline_s``",
        "``[environment]`` table (``cpus``, ``memory_mb``",
        "is not read here",
    ):
        assert words in doc, words
    seam = " ".join(sandbox_pkg.__doc__.split())
    assert "``DockerSandbox`` (``docker/``)" in seam and "``DaytonaSandbox`` (``daytona/``" in seam
    assert "Not built yet: the harbor sandbox" in seam
