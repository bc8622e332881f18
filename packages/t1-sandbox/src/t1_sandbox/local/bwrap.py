"""Bubblewrap for the local sandbox: finding ``bwrap``, what this machine lacks, the ``bwrap`` command line.

Every process of a local sandbox is one ``bwrap`` launch built by `bwrap_argv`: all namespaces unshared and
no nested user namespaces (``--disable-userns``), an unprivileged uid (`INNER_UID`) with every capability
dropped, the host's ``/usr`` and ``/etc`` read-only, the verifier toolchain read-only in the verifier's launch
only, T1's installed task bundles covered by empty tmpfs, the sandbox's own writable directories bound at
their sandbox paths, ``/dev/shm`` a tmpfs of `SHM_MB` MiB, and ``/`` and ``/dev`` read-only once built. The
seccomp filter (``seccomp.py``) is added on a pipe by the launcher (``process.py``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from t1_sandbox.base import SandboxError
from t1_sandbox.local.toolchain import toolchain

__all__ = [
    "INNER_UID",
    "SHM_MB",
    "SYSTEM_PATHS",
    "bwrap_argv",
    "bwrap_path",
    "inner_path",
    "is_under",
    "local_sandbox_problems",
]

INNER_UID = 1000  # the uid (and gid) every sandbox process has inside its user namespace
# Paths the sandbox never lets a mount, upload or WORKDIR shadow.
SYSTEM_PATHS = ("/usr", "/etc", "/bin", "/lib", "/lib64", "/sbin", "/proc", "/dev", "/opt/t1-verifier")
SHM_MB = 64  # size of /dev/shm (MiB): Docker's default --shm-size; its pages count against memory_mb too


def bwrap_path() -> str:
    """Path of the ``bwrap`` executable.

    Raises:
        SandboxError: bubblewrap is not installed (says how to install it).
    """
    found = shutil.which("bwrap")
    if not found:
        raise SandboxError(
            "bubblewrap (bwrap) is not installed; the local sandbox needs it: "
            "run `apt-get install bubblewrap`"
        )
    return found


def local_sandbox_problems() -> list[str]:
    """What this machine lacks to start local sandboxes, one line each saying how to fix it (empty: ready).

    The local sandbox needs bubblewrap, and root: it gives each sandbox its own unprivileged host uid.
    """
    problems = []
    try:
        bwrap_path()
    except SandboxError as exc:  # its message says how to install it
        problems.append(str(exc))
    if os.geteuid() != 0:
        problems.append(
            "the local sandbox must run as root (it gives each sandbox its own unprivileged host uid); "
            "run as root, e.g. with sudo or in a container"
        )
    return problems


def inner_path(path: str, where: str) -> str:
    """``path`` normalized as a sandbox path.

    Raises:
        SandboxError: ``path`` is relative or contains ``..`` (``where`` names the call or Dockerfile line).
    """
    p = PurePosixPath(path)
    if not p.is_absolute() or ".." in p.parts:
        raise SandboxError(f"{where}: sandbox path {path!r} must be absolute without '..'")
    return str(p)


def is_under(path: str, root: str) -> bool:
    """Whether the sandbox path ``path`` is ``root`` or inside it."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _host_path(inner: str, binds: Sequence[tuple[str, str]]) -> str:
    """The host path a sandbox path shows: through the deepest of ``binds`` holding it, else the same."""
    for host, dest in sorted(binds, key=lambda b: len(b[1]), reverse=True):
        if is_under(inner, dest):
            return host + inner[len(dest) :]
    return inner


def bwrap_argv(
    command: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    mounts: Mapping[str, Path],
    network: bool,
    new_session: bool = True,
    verifier: bool = False,
    masks: Sequence[str] = (),
) -> list[str]:
    """The ``bwrap`` command line that runs ``command`` in a fresh sandbox process over ``mounts``.

    Args:
        command: the program and its arguments inside the sandbox.
        cwd: working directory inside the sandbox.
        env: the whole environment of the command (``--clearenv`` drops the host's).
        mounts: ``sandbox path -> host directory``, bound writable (parents are bound before children).
        network: share the host's network namespace (off: only a down loopback).
        new_session: start the command in a new session, so it has no controlling terminal to inject
            keystrokes into (``TIOCSTI``); off for the interactive shell, which owns its pseudo-terminal.
        verifier: bind the verifier toolchain (the verifier's launch; never the agent's).
        masks: sandbox paths covered by an empty read-only tmpfs (T1's installed task bundles,
            ``toolchain.bundle_masks``); one whose directory no longer exists at this call is skipped.
    """
    argv = [
        bwrap_path(),
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--uid", str(INNER_UID),
        "--gid", str(INNER_UID),
        "--cap-drop", "ALL",
        "--die-with-parent",
        "--proc", "/proc",
        "--dev", "/dev",
        "--clearenv",
        "--ro-bind", "/usr", "/usr",
        "--ro-bind", "/etc", "/etc",
    ]  # fmt: skip
    for link in ("bin", "lib", "lib64", "sbin"):
        if os.path.islink(f"/{link}"):
            argv += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
        elif os.path.isdir(f"/{link}"):
            argv += ["--ro-bind", f"/{link}", f"/{link}"]
    if network:
        argv.append("--share-net")
    if new_session:
        argv.append("--new-session")  # no controlling terminal to inject keystrokes into (TIOCSTI)
    binds: tuple[tuple[str, str], ...] = ()
    if verifier:
        tc = toolchain()
        binds = tc.binds
        for host, inner in binds:
            argv += ["--ro-bind", host, inner]
        for target, inner in tc.symlinks:
            argv += ["--symlink", target, inner]
    for inner in sorted(mounts):  # parents before children
        argv += ["--bind", str(mounts[inner]), inner]
    for inner in masks:
        # a bundle directory removed since it was listed (a package uninstalled or reinstalled) has nothing
        # left to hide, and bwrap cannot create its mount point in the read-only bind: skipped
        if os.path.isdir(_host_path(inner, binds)):
            argv += ["--perms", "0555", "--size", "4096", "--tmpfs", inner, "--remount-ro", inner]
    # /dev/shm sized (bwrap's /dev tmpfs has no size: half the host's RAM); / and /dev read-only
    argv += ["--perms", "1777", "--size", str(SHM_MB * 1024 * 1024), "--tmpfs", "/dev/shm"]
    argv += ["--remount-ro", "/dev", "--remount-ro", "/"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv += ["--chdir", cwd, *command]
    return argv
