"""The Docker image tag's hash never follows a link in the build context and never reads a file whole.

The attack: a task's ``environment/`` holding a link to a 2 GiB host file raised the trainer's peak memory
from 33 to 4,147 MiB while the tag was hashed (and a link's target content entered the tag).
"""

from __future__ import annotations

import os
import re
import threading
import tracemalloc
from pathlib import Path

import pytest

from t1_sandbox.base import SandboxError
from t1_sandbox.docker import images

DOCKERFILE = "FROM t1/debian:bookworm-slim\nWORKDIR /app\n"


class _Daemon:
    """The two calls `resolve_image` makes of the daemon when it has every base."""

    def inspect_image(self, ref: str) -> dict:
        return {"Id": ref}


def _context(tmp_path: Path) -> Path:
    env = tmp_path / "task" / "environment"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text(DOCKERFILE)
    (env / "data.txt").write_text("data\n")
    return env


def _digest_within(env: Path, seconds: float = 20.0) -> str:
    """`context_digest` of ``env``, failing (not hanging) when it blocks on what a link points to."""
    out: list[str] = []
    worker = threading.Thread(target=lambda: out.append(images.context_digest(env, DOCKERFILE)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert out, f"hashing {env} did not finish in {seconds} s: it read through a link"
    return out[0]


def test_a_link_counts_by_its_target_text_not_by_the_linked_content(tmp_path):
    env = _context(tmp_path)
    host_file = tmp_path / "host-file"
    host_file.write_bytes(b"a" * 1000)
    (env / "big").symlink_to(host_file)
    before = _digest_within(env)
    host_file.write_bytes(b"b" * 1000)  # the linked content changes, the context as sent does not
    assert _digest_within(env) == before
    (env / "big").unlink()
    (env / "big").symlink_to(tmp_path / "other")
    assert _digest_within(env) != before


@pytest.mark.parametrize("target", ["/dev/zero", "fifo", "/root/t1-unreadable/none", "/proc/kcore"])
def test_a_link_to_a_device_fifo_or_unreadable_path_hashes_at_once(tmp_path, target):
    env = _context(tmp_path)
    if target == "fifo":
        os.mkfifo(tmp_path / "fifo")
        target = str(tmp_path / "fifo")
    (env / "l").symlink_to(target)
    assert len(_digest_within(env)) == 64


def test_a_fifo_in_the_context_is_not_read(tmp_path):
    env = _context(tmp_path)
    os.mkfifo(env / "pipe")
    assert len(_digest_within(env)) == 64


def test_a_large_context_file_is_streamed_not_read_whole(tmp_path):
    env = _context(tmp_path)
    with open(env / "sparse.bin", "wb") as fh:
        fh.truncate(64 << 20)  # 64 MiB of holes: no disk used, read back as zeros
    tracemalloc.start()
    try:
        _digest_within(env, 60.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"hashing held {peak / 2**20:.0f} MiB at once"


def test_regular_files_hash_as_before_so_existing_tags_stay(tmp_path):
    import hashlib

    env = _context(tmp_path)
    (env / "sub").mkdir()
    (env / "sub" / "x").write_bytes(b"xyz")
    expected = hashlib.sha256(DOCKERFILE.encode())
    for path in sorted(p for p in env.rglob("*") if p.is_file()):
        expected.update(str(path.relative_to(env)).encode() + b"\0" + path.read_bytes())
    assert images.context_digest(env, DOCKERFILE) == expected.hexdigest()


def test_the_tag_of_a_context_with_a_link_to_a_huge_file_is_made_without_reading_it(tmp_path):
    env = _context(tmp_path)
    with open(tmp_path / "huge", "wb") as fh:
        fh.truncate(1 << 40)  # 1 TiB sparse: read whole it would never fit in memory
    (env / "huge").symlink_to(tmp_path / "huge")
    choice, text, _, tag = images.resolve_image(_Daemon(), env, images.TaskEnvironment(), {})
    assert choice is None and tag.startswith("t1-task/task:") and text.startswith("FROM")


def test_a_dockerfile_linked_outside_the_context_is_refused(tmp_path):
    env = _context(tmp_path)
    (tmp_path / "real.Dockerfile").write_text(DOCKERFILE)
    (env / "Dockerfile").unlink()
    (env / "Dockerfile").symlink_to(tmp_path / "real.Dockerfile")
    with pytest.raises(SandboxError, match="links outside the bundle are not followed"):
        images.resolve_image(_Daemon(), env, images.TaskEnvironment(), {})


@pytest.mark.parametrize("folder", ["pool_", "a._b", "__x__", "Ünïcode task", "-.-", "x" * 250])
def test_the_tag_is_a_valid_docker_reference_whatever_the_task_folder_is_called(tmp_path, folder):
    env = tmp_path / folder / "environment"  # the tag's name is the task folder's
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text(DOCKERFILE)
    _, _, _, tag = images.resolve_image(_Daemon(), env, images.TaskEnvironment(), {})
    repo, _, digest = tag.partition(":")
    component = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    assert re.fullmatch(rf"{component}(?:/{component})*", repo), tag
    assert len(repo) <= 255 and re.fullmatch(r"[0-9a-f]{16}", digest), tag
