"""Host-side file operations on a sandbox's own directories that never follow a link out of them.

Everything inside a local sandbox's writable mounts is the agent's (or a task's ``RUN`` step's) to shape: any
name may be a symbolic link to a host path, a directory may be 3,000 levels deep or have mode 000. The host
(root) still writes there during the build (``COPY``, ``WORKDIR``), when it gives the verifier its folders
back, and when it deletes the sandbox. Each such operation here walks from a directory the host created, one
component at a time, with directory descriptors opened ``O_NOFOLLOW`` (``openat``), so a link is never
followed: a link where a directory is needed is refused with a `SandboxError`, a link being replaced or
deleted is the link itself. The delete is iterative (no recursion limit, two descriptors open whatever the
depth) and fixes the permissions of folders it cannot read or write.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from t1_sandbox.base import SandboxError

__all__ = ["copy_inside", "make_dirs_inside", "open_dir_inside", "remove_entry", "remove_tree"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NOT_A_DIR = (errno.ELOOP, errno.ENOTDIR)  # what O_NOFOLLOW | O_DIRECTORY says of a link or a file
_RESCANS = 5  # times a folder that refills while it is being deleted is emptied again before giving up


def _refused(where: str, path: str) -> SandboxError:
    return SandboxError(
        f"{where}: {path} is a symbolic link or not a directory; the local sandbox never follows links "
        "when it writes from the host"
    )


def open_dir_inside(root: Path, parts: Sequence[str], *, uid: int | None = None, where: str = "") -> int:
    """Open the directory ``root/parts...`` without following a link, creating missing levels when ``uid``.

    Args:
        root: a directory the host created (a sandbox mount); opened normally, it is trusted.
        parts: the path below ``root``, one component each (no ``..``, no empty part).
        uid: when given, missing directories are created (mode 0755) and every directory on the path,
            ``root`` excluded, is given to ``uid:uid``; when None, a missing one raises FileNotFoundError.
        where: the call or Dockerfile line, for messages.

    Returns:
        An open ``O_RDONLY | O_DIRECTORY`` descriptor; the caller closes it.

    Raises:
        SandboxError: a component is a symbolic link, or exists and is not a directory.
        FileNotFoundError: a component is missing and ``uid`` is None.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            if part in ("", ".", "..") or "/" in part:
                raise SandboxError(f"{where}: path component {part!r} is not a plain name")
            try:
                nxt = os.open(part, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if uid is None:
                    raise
                with contextlib.suppress(FileExistsError):  # a file or link of that name: refused below
                    os.mkdir(part, 0o755, dir_fd=fd)
                try:
                    nxt = os.open(part, _DIR, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in _NOT_A_DIR:
                        raise _refused(where, "/".join(parts[: i + 1])) from None
                    raise
            except OSError as exc:
                if exc.errno in _NOT_A_DIR:
                    raise _refused(where, "/".join(parts[: i + 1])) from None
                raise
            os.close(fd)
            fd = nxt
            if uid is not None:
                os.fchown(fd, uid, uid)
        return fd
    except BaseException:
        os.close(fd)
        raise


def make_dirs_inside(root: Path, parts: Sequence[str], *, uid: int, where: str = "") -> None:
    """``mkdir -p root/parts...`` without following links; every level below ``root`` becomes ``uid``'s.

    Raises:
        SandboxError: a component is a symbolic link or not a directory (names it).
    """
    os.close(open_dir_inside(root, parts, uid=uid, where=where))


def _copy_file(src: Path, dir_fd: int, name: str, uid: int, where: str) -> None:
    """Write a fresh file ``name`` in ``dir_fd`` with ``src``'s bytes, mode (no setuid bits) and times.

    Whatever held the name before (a file, possibly a hard link to another file, or a link) is unlinked
    first and the new file is created ``O_EXCL | O_NOFOLLOW``, so the write never lands in another inode.
    """
    _clear_name(dir_fd, name, where)
    st = os.stat(src)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    out = os.open(name, flags, 0o600, dir_fd=dir_fd)
    try:
        with open(src, "rb") as fin, open(out, "wb", closefd=False) as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
        os.fchown(out, uid, uid)
        os.fchmod(out, stat.S_IMODE(st.st_mode) & 0o1777)
        os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(out)


def _clear_name(dir_fd: int, name: str, where: str) -> None:
    """Unlink a non-directory ``name`` in ``dir_fd``; refuse an existing directory; quiet if missing."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise SandboxError(f"{where}: cannot copy a file over the directory {name!r}")
    os.unlink(name, dir_fd=dir_fd)


def _copy_link(src: Path, dir_fd: int, name: str, uid: int, where: str) -> None:
    """Recreate the link ``src`` as ``name`` (its target is only ever resolved inside the sandbox)."""
    _clear_name(dir_fd, name, where)
    os.symlink(os.readlink(src), name, dir_fd=dir_fd)
    os.chown(name, uid, uid, dir_fd=dir_fd, follow_symlinks=False)


def _copy_tree(src: Path, dest_fd: int, uid: int, where: str) -> None:
    """Copy the contents of the host directory ``src`` into ``dest_fd`` (links as links, no special files).

    Depth first with an explicit stack (one descriptor per level of the source, whose depth is bounded by
    the host's path length), so a deep source tree raises no RecursionError.
    """
    stack: list[tuple[Path, int]] = [(src, os.dup(dest_fd))]
    try:
        while stack:
            here, fd = stack.pop()
            try:
                with os.scandir(here) as it:
                    entries = sorted(it, key=lambda e: e.name)
                for entry in entries:
                    path = Path(entry.path)
                    if entry.is_symlink():
                        _copy_link(path, fd, entry.name, uid, where)
                    elif entry.is_dir():
                        child = open_dir_inside_fd(fd, entry.name, uid=uid, where=where)
                        stack.append((path, child))
                    elif entry.is_file():
                        _copy_file(path, fd, entry.name, uid, where)
                    # fifos, sockets and devices are not copied: a sandbox has no use for them
            finally:
                os.close(fd)
    finally:
        for _, fd in stack:
            os.close(fd)


def open_dir_inside_fd(dir_fd: int, name: str, *, uid: int, where: str) -> int:
    """Open (creating, mode 0755) the directory ``name`` in ``dir_fd`` without following a link; own it.

    Raises:
        SandboxError: ``name`` is a symbolic link or not a directory.
    """
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=dir_fd)
    try:
        fd = os.open(name, _DIR, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _NOT_A_DIR:
            raise _refused(where, name) from None
        raise
    os.fchown(fd, uid, uid)
    return fd


def copy_inside(
    src: Path, root: Path, parts: Sequence[str], *, uid: int, into: bool, where: str = ""
) -> None:
    """Docker's ``COPY src dest`` onto ``root/parts...`` from the host, never following a link in ``root``.

    A directory ``src`` has its contents copied into the destination directory (created). A file ``src`` is
    written at the destination itself, or under its own name inside it when ``into`` (several sources, a
    trailing ``/``) or when the destination is an existing directory. Missing directories are created; every
    directory on the destination path and everything copied belongs to ``uid:uid``.

    Args:
        src: a host file or directory of the build context (already checked to be inside it).
        root: the sandbox mount the destination lies in (host-created, trusted).
        parts: the destination below ``root``, one component each (empty: ``root`` itself).
        uid: the sandbox's host uid.
        into: the destination is a directory even if it does not exist yet.
        where: the Dockerfile line, for messages.

    Raises:
        SandboxError: a component of the destination, or a name the copy would write through, is a symbolic
            link or not a directory (the sandbox's ``RUN ln -s /etc /app/l`` then ``COPY f /app/l/f``).
    """
    if src.is_dir() and not src.is_symlink():
        fd = open_dir_inside(root, parts, uid=uid, where=where)
        try:
            _copy_tree(src, fd, uid, where)
        finally:
            os.close(fd)
        return
    if not parts:
        into = True
    if not into:
        parent = open_dir_inside(root, parts[:-1], uid=uid, where=where)
        try:
            st = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        finally:
            os.close(parent)
        into = st is not None and stat.S_ISDIR(st.st_mode)
    dir_parts, name = (list(parts), src.name) if into else (list(parts[:-1]), parts[-1])
    fd = open_dir_inside(root, dir_parts, uid=uid, where=where)
    try:
        _copy_file(src, fd, name, uid, where)
    finally:
        os.close(fd)


# ---------------------------------------------------------------- delete


def remove_tree(path: Path | str) -> None:
    """Delete ``path`` (a directory tree, a file or a link) without following links; quiet if missing.

    ``path``'s parent is trusted (the host made it); below it nothing is: links are removed, never followed,
    and folders the host cannot read or write (mode 000) are made so first. Iterative: the depth of the tree
    is bounded by nothing, the open descriptors are at most three.

    Raises:
        OSError: a folder could not be emptied (e.g. it keeps refilling), or another I/O error.
    """
    path = Path(path)
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:  # an empty folder (a sandbox's root once its tmpfs is unmounted) in one call; a link fails
            os.rmdir(path.name, dir_fd=parent)
            return
        except FileNotFoundError:
            return
        except OSError:
            pass
        remove_entry(parent, path.name)
    finally:
        os.close(parent)


def remove_entry(dir_fd: int, name: str) -> None:
    """Delete ``name`` inside the open directory ``dir_fd`` like `remove_tree` (quiet if missing)."""
    for _ in range(_RESCANS):
        if not _remove_once(dir_fd, name):
            return
    if _remove_once(dir_fd, name):
        raise OSError(errno.ENOTEMPTY, f"folder refilled {_RESCANS} times while it was being deleted", name)


def _remove_once(dir_fd: int, name: str) -> bool:
    """One pass of `remove_entry`; True when ``name`` was a folder that refilled and is still there."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        _unlink(dir_fd, name)
        return False
    try:
        cur = _open_child(dir_fd, name)
    except FileNotFoundError:
        return False
    top = os.fstat(cur)
    # one frame per level: (name in its parent, device, inode, subfolders still to delete or None)
    stack: list[list] = [[name, top.st_dev, top.st_ino, None]]
    rescans = 0
    while True:
        frame = stack[-1]
        if frame[3] is None:
            frame[3] = _clear_files(cur)
        if frame[3]:
            child_name = frame[3].pop()
            try:
                child = _open_child(cur, child_name)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno not in _NOT_A_DIR:
                    raise
                _unlink(cur, child_name)  # no longer a directory: it goes like a file
                continue
            st = os.fstat(child)
            os.close(cur)
            cur = child
            stack.append([child_name, st.st_dev, st.st_ino, None])
            continue
        stack.pop()
        if not stack:
            os.close(cur)
            try:
                os.rmdir(name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno != errno.ENOTEMPTY:
                    raise
                return True
            return False
        cur = _parent_of(cur, dir_fd, stack)
        try:
            os.rmdir(frame[0], dir_fd=cur)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY or rescans >= _RESCANS:
                raise
            rescans += 1
            stack[-1][3].append(frame[0])  # refilled meanwhile: empty it again


def _parent_of(cur: int, top_parent: int, stack: list[list]) -> int:
    """The descriptor of the folder at ``stack[-1]``, reached from its child ``cur`` (closed here).

    ``..`` is checked against the inode recorded on the way down; if the child was moved meanwhile, the
    folder is opened again from the top by its names, never by following a link.
    """
    parent = os.open("..", _DIR, dir_fd=cur)
    os.close(cur)
    st = os.fstat(parent)
    if (st.st_dev, st.st_ino) == (stack[-1][1], stack[-1][2]):
        return parent
    os.close(parent)
    fd = os.dup(top_parent)
    for frame in stack:
        nxt = _open_child(fd, frame[0])
        os.close(fd)
        fd = nxt
    return fd


def _open_child(dir_fd: int, name: str) -> int:
    """Open the subfolder ``name`` without following a link, giving it mode 0700 if it cannot be read."""
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except PermissionError:
        _fix_mode(dir_fd, name)
        return os.open(name, _DIR, dir_fd=dir_fd)


def _fix_mode(dir_fd: int, name: str) -> None:
    """``chmod 0700`` the folder ``name`` in ``dir_fd`` through an ``O_PATH`` descriptor (never a link)."""
    pfd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.chmod(f"/proc/self/fd/{pfd}", 0o700)
    finally:
        os.close(pfd)


def _clear_files(fd: int) -> list[str]:
    """Unlink every non-directory in the open folder ``fd``; return the names of its subfolders."""
    try:
        entries = list(os.scandir(fd))
    except PermissionError:
        os.fchmod(fd, 0o700)
        entries = list(os.scandir(fd))
    folders = []
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            folders.append(entry.name)
        else:
            _unlink(fd, entry.name)
    return folders


def _unlink(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except PermissionError:  # the folder is not writable by us (not root): make it so, once
        os.fchmod(dir_fd, 0o700)
        os.unlink(name, dir_fd=dir_fd)
