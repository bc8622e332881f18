"""On the host, the sandboxes never read a file through a link of the task's: COPY, uploads of tests/solution.

Task loading refuses a bundle with a link leaving it (``t1_tasks.task.bundle_link_problems``); these are the
sandbox side's own checks, for an environment or a folder handed to a sandbox directly.
"""

from __future__ import annotations

import os
import shutil
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from t1_sandbox.base import SandboxError
from t1_sandbox.transfer import upload_plan

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0, reason="needs bubblewrap and root"
)


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "host-secret"
    path.write_text("TOKEN=hunter2\n")
    return path


def test_an_upload_of_a_folder_archives_a_link_as_a_link_never_its_target(tmp_path, secret):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("exit 0\n")
    (tests / "leak").symlink_to(secret)
    payload, _ = upload_plan(tests, "/tests", owner_uid=0, read_only=True)
    assert b"hunter2" not in payload
    with tarfile.open(fileobj=BytesIO(payload)) as tar:
        leak = tar.getmember("./leak")
    assert leak.issym() and leak.linkname == str(secret)


def test_an_upload_of_a_linked_file_or_folder_is_refused_by_name(tmp_path, secret):
    (tmp_path / "solve.sh").symlink_to(secret)
    with pytest.raises(SandboxError, match="never follow a link on the host") as info:
        upload_plan(tmp_path / "solve.sh", "/solution/solve.sh", owner_uid=0)
    assert str(secret) in str(info.value)
    (tmp_path / "real").mkdir()
    (tmp_path / "solution").symlink_to(tmp_path / "real")
    with pytest.raises(SandboxError, match="never follow a link on the host"):
        upload_plan(tmp_path / "solution", "/solution", owner_uid=0)


def test_an_upload_of_a_fifo_is_refused_rather_than_read(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(SandboxError, match="not a regular file or directory"):
        upload_plan(tmp_path / "pipe", "/tests/pipe", owner_uid=0)


@needs_bwrap
async def test_a_copy_source_linked_outside_the_context_is_named_as_a_link_not_missing(tmp_path, secret):
    from t1_sandbox.local import LocalSandbox

    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\nCOPY data /app/data\n")
    (env / "data").symlink_to(secret)
    async with LocalSandbox() as sb:
        with pytest.raises(SandboxError) as info:
            await sb.start(env, timeout_s=30)
    message = str(info.value)
    assert "links outside the bundle are not followed" in message and str(secret) in message
    assert "not found" not in message
