"""A run's ``status.json`` as read back: a run whose driver died without writing its end reads ``killed``.

The driver writes ``status.json`` as ``running`` after every step and rewrites it when the run ends
(``finished``, ``failed``, ``interrupted``); a ``kill -9``, the OOM killer or a power cut end it without that
last write. So every write also records the driver (`driver_identity`: host name, pid and the pid's start
time in clock ticks, which a later process reusing the pid does not share), and `read_status` turns a
``running`` whose driver is gone from this host into ``killed``, saying which process died. A status written
on another host, or by a version that recorded no driver, is returned as written (its liveness cannot be
checked from here). Resuming a killed run works as resuming an interrupted one (`t1.run.resume`).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from t1_sandbox.watchdog import process_start_ticks

__all__ = ["KILLED", "driver_alive", "driver_identity", "read_status"]

KILLED = "killed"


def driver_identity() -> dict[str, Any]:
    """This process as ``status.json`` records its driver: ``{"host", "pid", "start"}``."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": process_start_ticks(pid)}


def driver_alive(payload: dict[str, Any]) -> bool | None:
    """Whether the driver recorded in a ``status.json`` payload still runs.

    Returns:
        True or False for a driver of this host; None when it cannot be told (another host, no record).
    """
    driver = payload.get("driver")
    if not isinstance(driver, dict) or driver.get("host") != socket.gethostname():
        return None
    pid, start = driver.get("pid"), driver.get("start")
    if not isinstance(pid, int) or not isinstance(start, str) or not start:
        return None
    return process_start_ticks(pid) == start


def read_status(run_dir: str | Path) -> dict[str, Any]:
    """``run_dir/status.json``, with ``running`` read as ``killed`` when its driver is gone from this host.

    A killed run's payload keeps what was written (``steps_completed``, ``time``, ``driver``) and gets
    ``status: "killed"`` and a ``message`` naming the dead process.

    Raises:
        FileNotFoundError: the run directory has no ``status.json``.
        ValueError: ``status.json`` is not a JSON object (names the file).
    """
    path = Path(run_dir) / "status.json"
    try:
        payload = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(payload, dict):
        raise ValueError(f"{path}: not a JSON object")
    if payload.get("status") == "running" and driver_alive(payload) is False:
        driver = payload["driver"]
        payload = payload | {
            "status": KILLED,
            "message": (
                f"the driver (pid {driver['pid']} on {driver['host']}) is gone without writing how the run "
                "ended (killed: SIGKILL, the OOM killer or a crash) after "
                f"{payload.get('steps_completed', 0)} steps; resume it from its latest checkpoint with "
                "t1 train --resume"
            ),
        }
    return payload
