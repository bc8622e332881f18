"""Outcome checks for fix-backup-script: the script is run on a fresh tree with awkward names."""

import subprocess
import tarfile
import tempfile
from pathlib import Path

FILES = {
    "plain.txt": b"plain\n",
    "my notes.txt": b"notes with spaces\n",
    "sub dir/deep file.md": b"# deep\n",
    "sub dir/nested/x.bin": bytes(range(256)),
    "-dash.txt": b"dash\n",
}
SKIPPED = ["cache.tmp", "sub dir/old.tmp"]


def run_backup() -> tuple[subprocess.CompletedProcess, Path]:
    work = Path(tempfile.mkdtemp(prefix="verify "))
    src, dest = work / "source dir", work / "dest dir"
    for name, data in FILES.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(data)
    for name in SKIPPED:
        (src / name).write_bytes(b"junk")
    proc = subprocess.run(
        ["bash", "/app/backup.sh", str(src), str(dest)], cwd=work, capture_output=True, timeout=30
    )
    return proc, dest / "backup.tar.gz"


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_exits_zero_and_writes_archive():
    proc, archive = run_backup()
    assert proc.returncode == 0, proc.stderr.decode()
    assert archive.is_file()


def test_all_files_saved_including_spaces():
    _, archive = run_backup()
    assert sorted(members(archive)) == sorted(FILES)


def test_tmp_files_skipped():
    _, archive = run_backup()
    assert not [n for n in members(archive) if n.endswith(".tmp")]


def test_contents_identical():
    _, archive = run_backup()
    assert members(archive) == FILES
