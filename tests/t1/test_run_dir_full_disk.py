"""A run directory on a full disk: every write error names its path, and status.json still ends ``failed``.

On a real full filesystem (a 64 KiB tmpfs mounted for the test; skipped where mounting is not allowed).
"""

from __future__ import annotations

import errno
import json
import subprocess
from pathlib import Path

import pytest

from t1.run.run_dir import RunDir


@pytest.fixture
def full_disk(tmp_path: Path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    command = ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)]
    mounted = subprocess.run(command, capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def _fill(folder: Path) -> None:
    with (folder / "filler").open("wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"x" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def test_a_full_disk_names_the_path_and_leaves_the_status_failed(full_disk):
    run = RunDir.create(full_disk / "runs", "tiny", {"name": "tiny"})
    run.write_status("running", 1, None)
    _fill(full_disk)
    with pytest.raises(OSError, match="No space left") as raised:
        run.append_metrics({"step": 2, "reward": 0.1, "text": "x" * 8192})
    assert str(run.metrics_path) in str(raised.value)
    with pytest.raises(OSError) as raised:
        run.write_trajectory("step-0002", "trial-a", {"messages": ["x" * 8192]})
    assert str(run.root / "trajectories" / "step-0002") in str(raised.value)
    cause = f"OSError: [Errno 28] No space left on device: '{run.metrics_path}'" + " and more" * 150
    run.write_status("failed", 1, cause)
    status = json.loads((run.root / "status.json").read_text())
    assert status["status"] == "failed" and status["steps_completed"] == 1
    assert status["message"].startswith("OSError: [Errno 28]") and status["message"].endswith("...")
    assert not (run.root / "status.json.tmp").exists()


def test_a_status_write_that_fits_nowhere_names_status_json(tmp_path, monkeypatch):
    run = RunDir.create(tmp_path, "tiny", {"name": "tiny"})  # no status.json yet: nothing to overwrite

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError, match="No space left") as raised:
        run.write_status("failed", 0, "boom")
    assert str(run.root / "status.json") in str(raised.value)
