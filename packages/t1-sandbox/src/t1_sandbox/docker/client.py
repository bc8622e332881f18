"""The Docker daemon as the Docker sandbox sees it: the SDK client, the daemon's abilities, labels and sweeps.

The ``docker`` SDK (the ``t1-sandbox[docker]`` extra) is imported on first use only. Every container of a
sandbox carries the labels of `LABELS`: ``t1.sandbox=docker``, ``t1.run`` (the run id), ``t1.host`` and
``t1.pid`` / ``t1.pid_start`` (the owning process and its start time, so a reused pid is not taken for the
owner). `sweep_dead_owners` removes the containers of this host whose owner process is gone (a ``kill -9``
of an earlier run), `reclaim_run` every container of one run id, `reclaim_owner` those of one dead process
(its watchdog's call, ``t1_sandbox.watchdog``), and `LIVE` with an ``atexit`` hook the containers
this process still holds when the interpreter exits.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import socket
import threading
from typing import Any

from t1_sandbox.base import SandboxError

__all__ = [
    "LABEL",
    "LIVE",
    "api_client",
    "daemon_problems",
    "disk_cap_problem",
    "owner_labels",
    "reclaim_owner",
    "reclaim_run",
    "sweep_dead_owners",
]

LABEL = "t1.sandbox"
HOSTNAME = socket.gethostname()
#: container id -> docker host of the containers this process created and has not removed yet
LIVE: dict[str, str | None] = {}
_LIVE_LOCK = threading.Lock()
_SWEPT: set[str | None] = set()


def _sdk() -> Any:
    try:
        import docker
    except ImportError as exc:  # the extra is not installed
        raise SandboxError(
            "sandbox.kind 'docker' needs the docker SDK: install the t1-sandbox[docker] extra "
            "(uv sync --all-packages installs it)"
        ) from exc
    return docker


@functools.cache
def api_client(host: str | None, timeout: float = 60.0) -> Any:
    """A low-level ``docker.APIClient`` for ``host`` (``None``: ``DOCKER_HOST`` or the local socket).

    Cached per ``(host, timeout)``; its connection pool holds 64 connections so that many trials' calls
    (each blocking call runs in a worker thread) do not queue behind one another.

    Raises:
        SandboxError: the SDK is not installed.
    """
    docker = _sdk()
    kwargs = docker.utils.kwargs_from_env() if host is None else {"base_url": host}
    return docker.APIClient(version="auto", timeout=timeout, max_pool_size=64, **kwargs)


def _start_ticks(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def owner_labels(run_id: str) -> dict[str, str]:
    """The labels of a container created now by this process for run ``run_id``."""
    pid = os.getpid()
    return {
        LABEL: "docker",
        "t1.run": run_id,
        "t1.host": HOSTNAME,
        "t1.pid": str(pid),
        "t1.pid_start": _start_ticks(pid),
    }


def _owner_alive(labels: dict[str, str]) -> bool:
    pid = labels.get("t1.pid", "")
    if not pid.isdigit():
        return False
    return _start_ticks(int(pid)) == labels.get("t1.pid_start") != ""


def _remove(api: Any, container_id: str) -> None:
    docker = _sdk()
    try:
        api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if "already in progress" not in str(exc):
            raise SandboxError(f"removing container {container_id[:12]} failed: {exc}") from exc


def _remove_sealed(api: Any, labels: list[str], keep: Any = None) -> None:
    """Remove the sealed verifier's tests volumes and committed images labelled ``labels`` (``t1.sealed``).

    Best effort, after the containers that use them are gone; ``keep(labels)`` true spares one.
    """
    filters = {"label": [*labels, "t1.sealed"]}
    for volume in api.volumes(filters=filters).get("Volumes") or []:
        if keep is None or not keep(volume.get("Labels") or {}):
            with contextlib.suppress(Exception):
                api.remove_volume(volume["Name"], force=True)
    for image in api.images(filters=filters):
        if keep is None or not keep(image.get("Labels") or {}):
            with contextlib.suppress(Exception):
                api.remove_image(image["Id"], force=True)


def sweep_dead_owners(host: str | None) -> list[str]:
    """Remove the T1 containers of this host whose owning process is gone; once per process and daemon.

    The sealed verifier's tests volumes and committed images of those processes go with them.

    Called before this process's every container is created, it also arms this process's watchdog for the
    daemon (`t1_sandbox.watchdog.arm_docker`), which removes its containers after a ``kill -9``.

    Returns:
        The names of the removed containers.
    """
    from t1_sandbox.watchdog import arm_docker

    arm_docker(host)  # before this process creates a container there (idempotent)
    if host in _SWEPT:
        return []
    api = api_client(host)
    found = api.containers(all=True, filters={"label": [f"{LABEL}=docker", f"t1.host={HOSTNAME}"]})
    removed = []
    for c in found:
        if not _owner_alive(c.get("Labels") or {}):
            _remove(api, c["Id"])
            removed += [n.lstrip("/") for n in c.get("Names") or [c["Id"][:12]]]
    _remove_sealed(api, [f"{LABEL}=docker", f"t1.host={HOSTNAME}"], keep=_owner_alive)
    _SWEPT.add(host)
    return removed


def reclaim_owner(pid: int, start: str, host: str | None) -> list[str]:
    """Remove every T1 container of this host created by the process ``pid`` started at ``start`` ticks.

    The sandbox watchdog's call once that process is gone (``t1_sandbox.watchdog``): a container
    whose ``t1.pid_start`` differs belongs to another process that had the same pid, and is left alone.

    Returns:
        The names of the removed containers.
    """
    api = api_client(host)
    labels = [f"{LABEL}=docker", f"t1.host={HOSTNAME}", f"t1.pid={pid}", f"t1.pid_start={start}"]
    found = api.containers(all=True, filters={"label": labels})
    for c in found:
        _remove(api, c["Id"])
    _remove_sealed(api, labels)
    return [(c.get("Names") or [c["Id"][:12]])[0].lstrip("/") for c in found]


def reclaim_run(run_id: str, host: str | None = None) -> list[str]:
    """Remove every T1 container labelled ``t1.run=run_id`` (a dead run's), whichever process made it.

    The run's sealed verifier volumes and images go with them.

    Returns:
        The names of the removed containers.
    """
    api = api_client(host)
    found = api.containers(all=True, filters={"label": [f"{LABEL}=docker", f"t1.run={run_id}"]})
    for c in found:
        _remove(api, c["Id"])
    _remove_sealed(api, [f"{LABEL}=docker", f"t1.run={run_id}"])
    return [(c.get("Names") or [c["Id"][:12]])[0].lstrip("/") for c in found]


def track(container_id: str, host: str | None) -> None:
    """Record a container this process must remove (`forget` once it is gone)."""
    with _LIVE_LOCK:
        LIVE[container_id] = host


def forget(container_id: str) -> None:
    """Drop a removed container from `LIVE`."""
    with _LIVE_LOCK:
        LIVE.pop(container_id, None)


def remove_container(container_id: str, host: str | None) -> None:
    """Remove a container with its processes and anonymous volumes (idempotent), then `forget` it.

    Raises:
        SandboxError: the daemon refused the removal (the container stays in `LIVE` for the exit hook).
    """
    _remove(api_client(host), container_id)
    forget(container_id)


@atexit.register
def _remove_all_live() -> None:
    with _LIVE_LOCK:
        left = list(LIVE.items())
    for container_id, host in left:
        with contextlib.suppress(Exception):
            remove_container(container_id, host)


@functools.cache
def daemon_info(host: str | None) -> dict[str, Any]:
    """``docker info`` of the daemon at ``host`` (cached per process).

    Raises:
        SandboxError: no daemon answers, or the SDK is missing.
    """
    try:
        client = api_client(host, 10.0)
        return dict(client.info())
    except SandboxError:
        raise
    except Exception as exc:  # connection refused, socket missing, TLS errors: all say "no daemon"
        raise SandboxError(f"no Docker daemon answers at {host or 'the default socket'}: {exc}") from exc


def daemon_problems(host: str | None) -> list[str]:
    """Why no sandbox can run on the daemon at ``host``, one line each (empty: it answers)."""
    try:
        daemon_info(host)
    except SandboxError as exc:
        daemon_info.cache_clear()
        return [f"{exc}; start one (`dockerd &`, as root) or set sandbox.host (docs/backends/docker.md)"]
    return []


def disk_cap_problem(info: dict[str, Any]) -> str | None:
    """Why this daemon cannot cap a container's disk (``--storage-opt size``), or ``None`` when it can.

    Docker caps the writable layer on the ``btrfs`` driver (quota on), ``zfs``, ``devicemapper``, and
    ``overlay2`` over xfs mounted with ``pquota``; not on ``overlay2`` over ext4 or the ``vfs`` driver.
    """
    driver = info.get("Driver", "")
    status = dict(tuple(pair) for pair in info.get("DriverStatus") or [] if len(pair) == 2)
    backing = status.get("Backing Filesystem", "")
    if driver in ("btrfs", "zfs", "devicemapper", "windowsfilter"):
        return None
    if driver == "overlay2" and backing == "xfs":
        return None  # needs the pquota mount option; a daemon without it refuses the create, named then
    where = f"{driver} on {backing}" if backing else driver
    return (
        f"the daemon's storage driver ({where}) cannot cap a container's disk; run dockerd on btrfs with "
        "quota enabled or on overlay2 over xfs with pquota (docs/backends/docker.md), or set "
        "sandbox.disk_mb: null to run without a disk cap"
    )
