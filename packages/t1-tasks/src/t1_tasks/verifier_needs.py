"""What a task's held-out ``tests/test.sh`` installs for its tests: packages, pinned versions, a Python.

Read statically from the bundle's own script on the host (never the sandbox's copy): the package
arguments of ``uvx`` / ``uv tool run`` (``-w X``, ``--with X``, ``--with=X``), ``pip install``,
``uv pip install`` and ``uv add``, and the interpreter that ``uvx -p X.Y`` / ``--python X.Y`` asks for.
Terminal-Bench 2's scripts run ``uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest ...``
(harbor_tb.md §1.3).

Two consumers: the scoring rule (``t1_reward.no_run``: a module the tests import that ``test.sh``
itself installs and that was missing before any test ran is a dependency the verifier's environment failed
to provide, not the agent's failure), and the offline verifier toolchain (the wheels to fetch for a pool).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

__all__ = ["VerifierNeeds", "import_name", "read_verifier_needs", "verifier_needs"]

# Distributions whose import name is not their normalized name (a fact of each package's layout).
_IMPORT_NAMES = {
    "beautifulsoup4": "bs4",
    "opencv_python": "cv2",
    "opencv_python_headless": "cv2",
    "pillow": "PIL",
    "pyyaml": "yaml",
    "scikit_learn": "sklearn",
    "scikit_image": "skimage",
    "python_dateutil": "dateutil",
    "pyzmq": "zmq",
}
_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*((?:==|>=|<=|~=|!=|>|<|===).*)?$")
_PY_VERSION = re.compile(r"^(?:cpython-?|python)?(\d+\.\d+)(?:\.\d+)?$")
_VALUE_OPTIONS = {  # options of the installers that take the next word as a value (not a package)
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "-c",
    "--constraint",
    "-r",
    "--requirement",
    "--target",
    "-t",
    "--prefix",
    "--root",
    "--python",
    "-p",
    "--from",
    "--cache-dir",
    "--index-strategy",
}


@dataclass(frozen=True)
class VerifierNeeds:
    """What ``test.sh`` installs for its tests.

    Attributes:
        packages: ``(distribution, version or None)`` in order of first mention; the distribution as
            written (``pytest-json-ctrf``), the version only for an exact ``==`` pin.
        python: the ``X.Y`` interpreter that ``uvx -p`` / ``--python`` asks for, or None.
        uses_uv: the script runs ``uv`` or ``uvx``.
    """

    packages: tuple[tuple[str, str | None], ...] = ()
    python: str | None = None
    uses_uv: bool = False

    @property
    def import_names(self) -> frozenset[str]:
        """The top-level module names the installed distributions provide (`import_name` of each)."""
        return frozenset(import_name(name) for name, _ in self.packages)


def import_name(distribution: str) -> str:
    """The top-level module a distribution installs: its normalized name, or the known exception.

    ``scikit-learn`` -> ``sklearn``, ``Pillow`` -> ``PIL``, ``numpy`` -> ``numpy``.
    """
    norm = re.sub(r"[-_.]+", "_", distribution).lower()
    return _IMPORT_NAMES.get(norm, norm)


def _requirement(word: str) -> tuple[str, str | None] | None:
    m = _REQUIREMENT.match(word.strip())
    if m is None:
        return None
    spec = (m.group(3) or "").strip()
    version = spec[2:].strip() if spec.startswith("==") and not spec.startswith("===") else None
    return m.group(1), (version or None)


def _commands(text: str) -> list[list[str]]:
    """The script's simple commands as words (continuation lines joined, ``;``, ``&&``, ``|`` split)."""
    text = text.replace("\\\n", " ")
    out: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            words = list(lexer)
        except ValueError:  # an unbalanced quote: read the line word by word
            words = line.split()
        command: list[str] = []
        for word in words:
            if word and set(word) <= set(";&|()"):
                if command:
                    out.append(command)
                command = []
            else:
                command.append(word)
        if command:
            out.append(command)
    return out


def verifier_needs(test_sh: str) -> VerifierNeeds:
    """Read what a ``test.sh`` installs for its tests (the module docstring).

    Args:
        test_sh: the script's text.

    Returns:
        The `VerifierNeeds`; empty when the script installs nothing.
    """
    packages: dict[str, str | None] = {}
    python: str | None = None
    uses_uv = False

    def add(word: str) -> None:
        req = _requirement(word)
        if req is not None and req[0] not in packages:
            packages[req[0]] = req[1]

    for words in _commands(test_sh):
        names = [Path(w).name for w in words]
        if not names:
            continue
        start = next((i for i, n in enumerate(names) if n in ("uvx", "uv", "pip", "pip3")), None)
        if start is None:
            if len(names) > 2 and names[0].startswith("python") and names[1:3] == ["-m", "pip"]:
                start = 2
            else:
                continue
        tool, args = names[start], words[start + 1 :]
        if tool in ("uv", "uvx"):
            uses_uv = True
        if tool == "uv":
            if args[:2] == ["tool", "run"]:
                tool, args = "uvx", args[2:]
            elif args[:2] == ["pip", "install"]:
                tool, args = "pip", ["install", *args[2:]]
            elif args[:1] == ["add"]:
                tool, args = "pip", ["install", *args[1:]]
            else:
                continue
        if tool == "uvx":
            i = 0
            while i < len(args):
                arg = args[i]
                if arg in ("-w", "--with") and i + 1 < len(args):
                    add(args[i + 1])
                    i += 2
                    continue
                if arg.startswith("--with="):
                    add(arg.split("=", 1)[1])
                elif arg in ("-p", "--python") and i + 1 < len(args):
                    m = _PY_VERSION.match(args[i + 1])
                    python = m.group(1) if m and python is None else python
                    i += 2
                    continue
                elif arg.startswith("--python="):
                    m = _PY_VERSION.match(arg.split("=", 1)[1])
                    python = m.group(1) if m and python is None else python
                elif arg in _VALUE_OPTIONS:
                    i += 2
                    continue
                elif not arg.startswith("-"):
                    add(arg)  # the tool itself (``uvx pytest``): a package too
                    break
                i += 1
            continue
        if args[:1] != ["install"]:
            continue
        i = 1
        while i < len(args):
            arg = args[i]
            if arg in _VALUE_OPTIONS:
                i += 2
                continue
            if not arg.startswith("-") and "/" not in arg and not arg.startswith("$"):
                add(arg)
            i += 1
    return VerifierNeeds(tuple(packages.items()), python, uses_uv)


def read_verifier_needs(tests_dir: Path) -> VerifierNeeds:
    """`verifier_needs` of ``tests_dir / "test.sh"``; empty when the file cannot be read."""
    try:
        text = (Path(tests_dir) / "test.sh").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return VerifierNeeds()
    return verifier_needs(text)
