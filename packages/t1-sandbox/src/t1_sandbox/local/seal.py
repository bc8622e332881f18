"""Sealing an uploaded tree from the sandbox: every entry owned by host root, no write bit anywhere.

The local sandbox runs all of its processes as one unprivileged host uid. A tree owned by host root (seen as
``nobody`` inside the sandbox's user namespace) without write bits cannot be written, chmodded, renamed into
or out of, or have entries added or removed by that uid: this is how the held-out tests are mounted read-only
(T1 §10: read-only test mounts). The walk never follows a symbolic link (``os.fwalk`` with
``follow_symlinks=False``, files opened with ``O_NOFOLLOW``), so a link inside the tree cannot make the host
change a file outside it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["seal_tree"]

_READ_ONLY_DIR = 0o555


def seal_tree(root: Path) -> int:
    """Give every entry under ``root`` (``root`` included) to uid and gid 0 and take away its write bits.

    Directories become mode 0555; regular files keep their execute bits and become readable by all (mode
    ``(mode & 0o555) | 0o444``); symbolic links are re-owned without being followed. Call it when no sandbox
    process can reach ``root`` (before it is bound into a launch, or once the sandbox's processes are gone).

    Args:
        root: a host directory (the host side of a sandbox mount).

    Returns:
        The number of entries sealed (``root`` included).

    Raises:
        OSError: an entry cannot be re-owned or re-moded (the caller turns it into a ``SandboxError``).
    """
    count = 0
    for _, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        os.fchown(dirfd, 0, 0)
        os.fchmod(dirfd, _READ_ONLY_DIR)
        count += 1
        for name in (*dirnames, *filenames):
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                continue  # sealed when the walk enters it
            count += 1
            if stat.S_ISLNK(st.st_mode):
                os.chown(name, 0, 0, dir_fd=dirfd, follow_symlinks=False)
                continue
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
            try:
                os.fchown(fd, 0, 0)
                os.fchmod(fd, (st.st_mode & 0o555) | 0o444)
            finally:
                os.close(fd)
    return count
