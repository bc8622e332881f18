"""Tar transfer of files into and out of a sandbox through its own shell (any backend with ``bash -c``).

An upload is a payload fed on the standard input of a command that runs inside the sandbox (``tar -x`` for a
directory, ``cat >`` for a file), so the write happens as the sandbox's user: a symlink planted by the agent
cannot redirect it onto the host. A download is an archive written by ``tar -c`` inside the sandbox and
unpacked on the host with links dropped and tarfile's ``data`` filter, so sandbox contents cannot write
outside the destination. Nothing here starts a process: a backend runs the commands with its own ``exec``.
"""

from __future__ import annotations

import os
import stat
import tarfile
from collections.abc import Callable
from io import BytesIO
from pathlib import Path, PurePosixPath

from t1_sandbox.base import SandboxError

__all__ = ["download_command", "owned_by", "regular_only", "shell_quote", "unpack_download", "upload_plan"]


def shell_quote(text: str) -> str:
    r"""``text`` as one single-quoted bash word: each ``'`` inside becomes ``'\\''``."""
    return "'" + text.replace("'", "'\\''") + "'"


def owned_by(uid: int) -> Callable[[tarfile.TarInfo], tarfile.TarInfo]:
    """A ``tarfile.add`` filter recording every member as owned by ``uid:uid``, with no user or group name."""

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = uid
        info.uname = info.gname = ""
        return info

    return owned


def regular_only(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """A ``tarfile.extractall`` filter that drops links and applies tarfile's ``data`` filter to the rest.

    A link made in the sandbox must not make the host read or write elsewhere; the ``data`` filter refuses
    absolute paths, device files and setuid bits.
    """
    if member.issym() or member.islnk():
        return None
    return tarfile.data_filter(member, dest)


def upload_plan(local: Path, remote: str, *, owner_uid: int, read_only: bool = False) -> tuple[bytes, str]:
    """The payload and the in-sandbox bash command that writes ``local`` at the absolute path ``remote``.

    Args:
        local: an existing host file or directory.
        remote: the absolute destination inside the sandbox (checked by the caller).
        owner_uid: the uid recorded in a directory's archive (the sandbox user's; unpacked with
            ``--no-same-owner``, so the files belong to whoever runs the command).
        read_only: also take every write bit off what was written (``chmod -R a-w``). That alone does not
            seal the copy from a process running as its owner (an owner may ``chmod`` it back): the backend
            then gives the files to an identity the sandbox's processes do not run as (the local sandbox
            does it from the host; a container backend runs this command as its root for a non-root agent).

    Returns:
        ``(payload, command)``: feed ``payload`` on the command's standard input. A directory becomes a tar
        archive of its contents unpacked into ``remote`` (a link inside it is archived as a link, never
        followed on the host); a file is written with ``cat`` and keeps its mode (less its write bits with
        ``read_only``).

    Raises:
        SandboxError: ``local`` is itself a link (never followed on the host), or neither a regular file nor
            a directory (a FIFO would block the read).
    """
    if local.is_symlink():
        raise SandboxError(
            f"upload {local} -> {remote}: {local} is a link to {os.readlink(local)}; uploads never follow a "
            "link on the host (links outside the bundle are not followed)"
        )
    quoted = shell_quote(remote)
    if local.is_dir():
        buf = BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(local, arcname=".", filter=owned_by(owner_uid))
        payload = buf.getvalue()
        cmd = f"mkdir -p {quoted} && tar -x --no-same-owner -f - -C {quoted}"
        if read_only:
            cmd += f" && chmod -R a-w {quoted}"
    else:
        # no link swapped in since the check; O_NONBLOCK: opening a FIFO must not wait for a writer
        fd = os.open(local, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise SandboxError(f"upload {local} -> {remote}: not a regular file or directory")
            payload = fh.read()
        parent = shell_quote(str(PurePosixPath(remote).parent))
        mode = local.stat().st_mode & (0o555 if read_only else 0o777)
        cmd = f"mkdir -p {parent} && cat > {quoted} && chmod {oct(mode)[2:]} {quoted}"
    return payload, cmd


def download_command(remote: str) -> str:
    """The in-sandbox bash command writing ``remote`` (a directory's contents or a file) as tar on stdout."""
    return (
        f"if [ -d {shell_quote(remote)} ]; then tar -c -f - -C {shell_quote(remote)} .; "
        f"else tar -c -f - -C {shell_quote(str(PurePosixPath(remote).parent))} "
        f"{shell_quote(PurePosixPath(remote).name)}; fi"
    )


def unpack_download(archive: bytes, remote: str, local: Path) -> None:
    """Unpack the output of `download_command` on the host.

    One regular file (and a ``remote`` without a trailing ``/``) is written at ``local`` itself; otherwise
    ``local`` is created as a directory and receives the contents through `regular_only`.
    """
    with tarfile.open(fileobj=BytesIO(archive), mode="r") as tar:
        members = tar.getmembers()
        if len(members) == 1 and members[0].isfile() and not remote.endswith("/"):
            local.parent.mkdir(parents=True, exist_ok=True)
            extracted = tar.extractfile(members[0])
            assert extracted is not None
            local.write_bytes(extracted.read())
        else:
            local.mkdir(parents=True, exist_ok=True)
            tar.extractall(local, filter=regular_only)
