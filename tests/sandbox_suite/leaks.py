"""What a sandbox backend can leave behind, looked up on the host, for the leak suite (``test_leaks.py``).

The test bodies use only the ``Sandbox`` seam; the backend-specific knowledge lives here: how to keep a test's
sandboxes apart from those of other processes on the same machine (`isolate`), and where leftovers show
(`leftovers`): for the local backend, processes of the sandbox uids, sandbox directories, and the sandbox
cgroups (``t1_sandbox.local.cgroups.leftover_cgroups``, checked where that module exists); for the
Docker backend, containers labelled with this test's process or its drivers as owner (``t1.pid``), which
keeps other processes' containers on the same daemon out; for the Daytona backend, the sandboxes its API
(the test's own fake) still lists. A backend added to the suite adds its branch to both.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DRIVER = Path(__file__).with_name("leak_driver.py")


@dataclass
class Leftovers:
    """What is still there after every sandbox of a test was reclaimed; all empty when nothing leaked."""

    processes: list[str] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.processes or self.directories or self.cgroups or self.containers)


def isolate(kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict:
    """Give this test's sandboxes (and those of its driver processes) a namespace of their own.

    Local backend: a private uid range and slot directory, so other processes' sandboxes on this machine
    are never counted, nor swept, as this test's.

    Returns:
        The settings (JSON-ready) that a driver process applies with `apply_isolation`.
    """
    if kind == "daytona":  # the test's own fake API: every sandbox it lists is this test's
        return {"kind": kind, "url": os.environ["DAYTONA_API_URL"], "key": os.environ["DAYTONA_API_KEY"]}
    if kind != "local":
        return {"kind": kind}
    config = {
        "kind": kind,
        "uid_base": 330_000 + (os.getpid() % 500) * 64,
        "uid_slots": 64,
        "slot_dir": str(tmp_path / "slots"),
    }
    apply_isolation(config, monkeypatch.setattr)
    return config


def apply_isolation(config: dict, setattr_=setattr) -> None:
    """Apply `isolate`'s settings in this process (``setattr_``: ``monkeypatch.setattr`` in a test)."""
    if config.get("kind") != "local":
        return
    from t1_sandbox.local import uids

    setattr_(uids, "UID_BASE", config["uid_base"])
    setattr_(uids, "UID_SLOTS", config["uid_slots"])
    setattr_(uids, "SLOT_DIR", Path(config["slot_dir"]))


def leftovers(config: dict, owners: tuple[int, ...] = ()) -> Leftovers:
    """The backend's leftovers in the test's namespace.

    Args:
        config: `isolate`'s settings.
        owners: pids of driver processes of this test (their cgroups count; this process's always do).
    """
    found = Leftovers()
    if config.get("kind") == "docker":
        from t1_sandbox.docker.client import api_client

        mine = {str(os.getpid()), *(str(p) for p in owners)}
        for c in api_client(None).containers(all=True, filters={"label": "t1.sandbox=docker"}):
            if (c.get("Labels") or {}).get("t1.pid") in mine:
                found.containers.append(f"{c['Names'][0]} ({c['State']}, owner pid {c['Labels']['t1.pid']})")
                found.directories.append(c["Id"])  # what a dead driver left: the kill -9 test compares these
        return found
    if config.get("kind") == "daytona":
        import urllib.request

        cursor: str | None = ""
        while cursor is not None:
            ask = urllib.request.Request(
                f"{config['url']}/sandbox?cursor={cursor or 0}",
                headers={"Authorization": f"Bearer {config['key']}"},
            )
            with urllib.request.urlopen(ask, timeout=10) as answer:
                page = json.load(answer)
            for item in page["items"]:
                found.containers.append(f"daytona sandbox {item['id']} ({item['state']})")
                found.directories.append(item["id"])
            cursor = page.get("nextCursor")
        return found
    if config.get("kind") != "local":
        return found
    lo, hi = config["uid_base"], config["uid_base"] + config["uid_slots"]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        uid = int(fields.get("Uid", "-1 ").split()[0])
        if lo <= uid < hi and not fields.get("State", "").strip().startswith("Z"):
            found.processes.append(f"pid {entry} uid {uid}: {fields.get('Name', '').strip()}")
    for path in Path(tempfile.gettempdir()).glob("t1-sbx-*"):
        uid_text = path.name.split("-")[2]
        if uid_text.isdigit() and lo <= int(uid_text) < hi:
            found.directories.append(str(path))
    try:
        from t1_sandbox.local.cgroups import leftover_cgroups
    except ImportError:  # the backend has no cgroups (yet): nothing to look at
        return found
    mine = {os.getpid(), *owners}
    for group in leftover_cgroups():
        owner = group.name.split("-")[1] if group.name.count("-") >= 1 else ""
        if owner.isdigit() and int(owner) in mine:
            found.cgroups.append(str(group))
    return found


def settled(config: dict, owners: tuple[int, ...] = (), timeout_s: float = 10.0) -> Leftovers:
    """`leftovers` once gone, or what is left after ``timeout_s`` (a killed process takes a moment to go)."""
    end = time.monotonic() + timeout_s
    while (found := leftovers(config, owners)) and time.monotonic() < end:
        time.sleep(0.1)
    return found


T1_LAUNCH = (
    "import json, sys; sys.path.insert(0, sys.argv[1]); from leaks import apply_isolation; "
    "apply_isolation(json.loads(sys.argv[2])); sys.argv = ['t1', *sys.argv[3:]]; "
    "from t1.cli import app; app()"
)
"""``python -c`` program: ``t1`` with the sandboxes in the test's own uid range and slot directory."""


def t1_argv(python: str, config: dict, args: list[str]) -> list[str]:
    """The command line of ``t1 <args>`` in a process that applies `isolate`'s settings first."""
    return [python, "-c", T1_LAUNCH, str(Path(__file__).parent), json.dumps(config), *args]


def driver_argv(python: str, config: dict, environment_dir: Path, mode: str) -> list[str]:
    """The command line of a driver process (``leak_driver.py``) in ``mode``."""
    return [python, str(DRIVER), json.dumps(config), str(environment_dir), mode]
