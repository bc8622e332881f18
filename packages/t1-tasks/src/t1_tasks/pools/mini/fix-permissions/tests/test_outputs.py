"""Outcome checks for fix-permissions (modes read with os.stat)."""

import os
import stat
from pathlib import Path

SRV = Path("/app/srv")
EXPECTED_FILES = {
    "bin/start.sh": "#!/bin/bash\necho start\n",
    "bin/stop.sh": "#!/bin/bash\necho stop\n",
    "bin/rotate.sh": "#!/bin/bash\necho rotate\n",
    "conf/app.conf": "name=app\n",
    "conf/db.conf": "name=db\n",
    "conf/cache.conf": "name=cache\n",
    "secrets/api.key": "sk-test-123\n",
    "secrets/db.password": "hunter2\n",
    "uploads/a.txt": "upload\n",
}


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_scripts_are_0755():
    assert {p.name: oct(mode(p)) for p in (SRV / "bin").glob("*.sh")} == {
        n: "0o755" for n in ("start.sh", "stop.sh", "rotate.sh")
    }


def test_conf_files_are_0644():
    assert {p.name: oct(mode(p)) for p in (SRV / "conf").iterdir()} == {
        n: "0o644" for n in ("app.conf", "db.conf", "cache.conf")
    }


def test_secrets_private():
    assert oct(mode(SRV / "secrets")) == "0o700"
    assert {p.name: oct(mode(p)) for p in (SRV / "secrets").iterdir()} == {
        "api.key": "0o600",
        "db.password": "0o600",
    }


def test_nothing_world_writable():
    offenders = [str(p) for p in [SRV, *SRV.rglob("*")] if mode(p) & stat.S_IWOTH]
    assert offenders == []


def test_files_kept_intact():
    assert {str(p.relative_to(SRV)): p.read_text() for p in SRV.rglob("*") if p.is_file()} == EXPECTED_FILES
