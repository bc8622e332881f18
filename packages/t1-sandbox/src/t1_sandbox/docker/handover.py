"""Whether the toolchain's ``pytest`` command may hand over to an image's ``pytest``: only root can change it.

Run in the Docker verifier's box by the toolchain's own Python (``python3 -I -S handover.py PATH``, so that
nothing of the image is read to decide): exit 0 when the ``pytest`` script at ``PATH``, the Python its ``#!``
line names, and every folder that Python reads its standard library, site folders and ``.pth`` files from
(every ``lib/python3*``, ``lib64/python3*`` and ``local/lib/python3*`` of the interpreter's prefix as written
and as resolved, of ``/usr``, of ``/usr/local`` and of a venv's ``home``), every ``pyvenv.cfg`` it reads, and
all their contents (and what each link there names), are root's and writable by no group or other; exit 1
otherwise. A root-owned script alone is not enough: an image that gave its site folder to the agent's uid lets
a ``.pth`` there run as root before any test (a forged report), one that gave it a venv's ``pyvenv.cfg`` lets
it point ``home`` at a standard library of its own, and a root-owned ``.pth`` naming the agent's folder (an
editable install of ``/app``) lets it leave a ``pytest11`` entry point there: every folder a ``.pth`` file
there names must be root's through and through too. The Python must be a binary (ELF): a root-owned wrapper
script named ``python3`` may run a Python the agent replaced. A ``#!`` through ``env`` resolves on ``PATH``
(the toolchain's ``python3`` comes first there). Standard library only.
Source: the ``site`` module's documentation (site folders, ``.pth`` files run at start) and the ``venv``
module's (``pyvenv.cfg`` beside the interpreter or one folder up, its ``home`` key).
"""

from __future__ import annotations

import glob
import os
import shutil
import stat
import sys


def _changeable(path: str) -> bool:
    """``path`` (not followed) is not root's, or a group or other may write it (a link's mode is moot)."""
    st = os.lstat(path)
    return st.st_uid != 0 or (not stat.S_ISLNK(st.st_mode) and bool(st.st_mode & 0o022))


def _changeable_up(path: str) -> bool:
    """``path`` or a folder above it up to ``/`` is `_changeable`."""
    path = os.path.abspath(path)
    while True:
        if _changeable(path):
            return True
        if path == "/":
            return False
        path = os.path.dirname(path)


def _changeable_tree(top: str, seen: set[str] | None = None) -> bool:
    """``top``, a folder above it (as written or resolved) or anything below it is `_changeable`.

    A link below ``top`` is judged by what it names too (that file or folder and the folders above it, a
    folder's tree in turn, once each): a root-owned link in a site folder to a ``.pth`` in the agent's
    folder is the agent's file.
    """
    seen = set() if seen is None else seen
    real = os.path.realpath(top)
    if real in seen:
        return False
    seen.add(real)
    if _changeable_up(top) or _changeable_up(real):
        return True
    for here, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(here, name)
            if _changeable(path):
                return True
            if os.path.islink(path) and os.path.exists(path):
                if os.path.isdir(path) and _changeable_tree(path, seen):
                    return True
                if _changeable_up(os.path.realpath(path)):
                    return True
    return False


def _pth_folders(top: str) -> list[str]:
    """The folders that the ``.pth`` files under ``top`` put on the module path (those that exist).

    ``site`` adds each line of a site folder's ``.pth`` file that is not a comment nor an ``import`` line
    as a folder (relative to the file's) when it exists: an editable install (``pip install -e .`` in the
    image) names the project's folder there, and whatever that folder holds (a ``pytest11`` entry point of
    a ``*.dist-info``, a module shadowing one pytest imports) is read by pytest at start.
    """
    folders = []
    for here, _dirs, files in os.walk(top):
        for name in files:
            if not name.endswith(".pth"):
                continue
            with open(os.path.join(here, name), encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    line = line.rstrip()
                    if not line or line.startswith(("#", "import ", "import\t")):
                        continue
                    folder = os.path.join(here, line)
                    if os.path.exists(folder):
                        folders.append(folder)
    return folders


def _venv_homes(interpreter: str) -> list[str] | None:
    """The ``home`` folders of the ``pyvenv.cfg`` files ``interpreter`` reads at start; None: not trusted.

    Python looks for ``pyvenv.cfg`` in the folder of the interpreter as invoked (a venv's link, not its
    target) and in the folder above, and takes its standard library from the prefix above ``home``: an
    agent that may change that file chooses the code that runs as root. Each file found must be root's and
    writable by no group or other (through any link), and ``home`` absolute; an empty list: no venv.
    """
    homes: list[str] = []
    here = os.path.dirname(interpreter)
    for folder in (here, os.path.dirname(here)):
        cfg = os.path.join(folder, "pyvenv.cfg")
        if not os.path.lexists(cfg):
            continue
        if _changeable_up(cfg) or _changeable_up(os.path.realpath(cfg)):
            return None
        with open(cfg, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, sep, value = line.partition("=")
                if sep and key.strip().lower() == "home":
                    home = value.strip()
                    if not os.path.isabs(home) or _changeable_up(home):
                        return None
                    homes.append(home)
    return homes


def trusted(script: str, toolchain_bin: str) -> bool:
    """Whether only root can change ``script``, its interpreter and what that interpreter reads at start."""
    try:
        if _changeable_up(script):
            return False
        with open(script, "rb") as fh:
            first = fh.readline(512)
        if not first.startswith(b"#!"):
            return False
        words = first[2:].decode("utf-8", "replace").split()
        if words and os.path.basename(words[0]) == "env":
            names = [w for w in words[1:] if not w.startswith("-")]
            found = shutil.which(names[0]) if names else None
            words = [found] if found else []
        if not words or not os.path.isabs(words[0]):
            return False
        interpreter = words[0]
        real = os.path.realpath(interpreter)
        if os.path.dirname(real) == toolchain_bin:
            return True  # the toolchain's own Python
        if not os.path.basename(real).startswith("python") or _changeable_up(interpreter):
            return False
        with open(real, "rb") as fh:
            if fh.read(4) != b"\x7fELF":
                return False  # a wrapper script: what it runs is not checked
        if _changeable_up(real):
            return False
        homes = _venv_homes(interpreter)
        if homes is None:
            return False
        bases = {os.path.dirname(os.path.dirname(p)) for p in (interpreter, real)} | {"/usr", "/usr/local"}
        bases |= {os.path.dirname(h) for h in homes} | {os.path.dirname(os.path.realpath(h)) for h in homes}
        for base in bases:
            for sub in ("lib", "lib64", "local/lib"):
                for top in glob.glob(os.path.join(base, sub, "python3*")):
                    if _changeable_tree(top) or any(map(_changeable_tree, _pth_folders(top))):
                        return False
        return True
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(0 if trusted(sys.argv[1], os.path.dirname(os.path.realpath(sys.executable))) else 1)
