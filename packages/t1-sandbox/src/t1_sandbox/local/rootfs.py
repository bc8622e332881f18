"""The local sandbox's disk: its host directory on a size-limited tmpfs of its own.

A sandbox's writable trees (the task root, ``/tmp``, ``/logs``, ``/home/agent``, ``/tests``, ``/solution``)
are subdirectories of one host directory; `mount_root` mounts a fresh tmpfs there, ``disk_mb`` MiB large,
so the sandbox can never write more than that in total (``ENOSPC`` past it), whatever the number of files,
and nothing it writes reaches the host disk. The pages the sandbox's processes write are charged to its
memory cgroup too, so its files and its processes share ``memory_mb``; files the host side writes (the
Dockerfile's ``COPY``) count against ``disk_mb`` only. Subdirectories are laid out at their sandbox paths
(``<root>/app`` is ``/app``), so the mount table seen inside (``/proc/self/mountinfo``) names a tmpfs called
``t1-sandbox`` and the sandbox paths themselves, never a host directory. `release_root` lazily unmounts
it, which frees every file at once (no tree walk). These run as root on the host.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from pathlib import Path

from t1_sandbox.base import SandboxError

__all__ = ["FS_NAME", "mount_root", "mounted_roots", "release_root", "resize_root", "unmount_own_root"]

FS_NAME = "t1-sandbox"  # the mount source shown in the host's and the sandbox's mount tables
_MS_NOSUID, _MS_NODEV, _MS_REMOUNT = 0x2, 0x4, 0x20
_MNT_DETACH = 0x2
_UMOUNT_NOFOLLOW = 0x8
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def mount_root(path: Path, disk_mb: int) -> None:
    """Mount a ``disk_mb`` MiB tmpfs (mode 0700, no setuid or device files) on the empty directory ``path``.

    Raises:
        SandboxError: the mount failed (not root, or no tmpfs); names the directory and the error.
    """
    options = f"size={int(disk_mb)}m,mode=0700".encode()
    if _LIBC.mount(FS_NAME.encode(), os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
        err = ctypes.get_errno()
        raise SandboxError(
            f"cannot mount the sandbox's {disk_mb} MiB tmpfs on {path}: {os.strerror(err)} "
            "(the local sandbox caps its disk with a tmpfs of its own and needs root for that)"
        )


def resize_root(path: Path, disk_mb: int) -> None:
    """Give the sandbox tmpfs mounted at ``path`` a size of ``disk_mb`` MiB, keeping its files (a remount).

    Raises:
        SandboxError: the remount failed; names the directory and the error.
    """
    options = f"size={int(disk_mb)}m,mode=0700".encode()
    flags = _MS_REMOUNT | _MS_NOSUID | _MS_NODEV
    if _LIBC.mount(FS_NAME.encode(), os.fsencode(path), b"tmpfs", flags, options) != 0:
        err = ctypes.get_errno()
        raise SandboxError(
            f"cannot resize the sandbox's tmpfs at {path} to {disk_mb} MiB: {os.strerror(err)}"
        )


def mounted_roots(under: Path | None = None) -> list[Path]:
    """Mount points of sandbox tmpfs (source `FS_NAME`) in this mount namespace (only those in ``under``)."""
    found = []
    with open("/proc/self/mounts") as fh:
        for line in fh:
            source, point, fstype, *_ = line.split()
            if source == FS_NAME and fstype == "tmpfs":
                p = Path(point.replace("\\040", " "))
                if under is None or p.parent == under:
                    found.append(p)
    return found


def release_root(path: Path) -> None:
    """Lazily unmount the sandbox tmpfs at ``path`` (every mount stacked there), freeing its files at once.

    Quiet when nothing is mounted there; the (then empty) directory itself is left for the caller to remove.
    """
    target = os.fsencode(path)
    for _ in range(8):  # a tmpfs mounted twice on one directory (a retried start) is stacked
        if Path(path) not in mounted_roots(Path(path).parent):
            return
        if _LIBC.umount2(target, _MNT_DETACH) != 0:
            return


def unmount_own_root(path: Path) -> None:
    """Lazily unmount every tmpfs stacked on ``path``, a sandbox's own directory that `mount_root` mounted.

    For the sandbox's own reclaim: ``path`` is its directory, which only root can mount on, so what is
    mounted there is its tmpfs; unmounted until the kernel says nothing is (``EINVAL``), without reading the
    mount table (`release_root` reads it twice; it serves the sweeps, where a directory is a guess). The
    (then empty) directory itself is left for the caller to remove.

    Raises:
        SandboxError: an unmount failed for another reason than nothing being mounted there.
    """
    target = os.fsencode(path)
    for _ in range(8):  # a tmpfs mounted twice on one directory (a retried start) is stacked
        if _LIBC.umount2(target, _MNT_DETACH | _UMOUNT_NOFOLLOW) != 0:
            err = ctypes.get_errno()
            if err in (errno.EINVAL, errno.ENOENT):
                return
            raise SandboxError(f"cannot unmount the sandbox's tmpfs at {path}: {os.strerror(err)}")
