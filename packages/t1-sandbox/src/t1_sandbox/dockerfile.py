"""The Dockerfile subset the local sandbox builds: FROM (Debian bookworm), WORKDIR, COPY, ENV, RUN.

Backend-neutral: it imports only the seam's errors (``base.py``), so a Docker or Daytona backend can parse a
task's Dockerfile without importing the bubblewrap code. The local sandbox has no image store: it maps
``debian:bookworm[-slim]`` onto the host's own Debian bookworm userland (read-only), so other bases are
refused, as is every other instruction (by name, with the line number), a ``COPY --flag`` and a multi-stage
build. A task outside this subset runs on the Docker backend (``sandbox.kind: docker``), which builds the
Dockerfile as written; `daemon_downloads` serves it (whether an ``ADD`` makes the daemon download a source
itself). Source: the Dockerfile reference (instruction syntax).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from t1_sandbox.base import UnsupportedDockerfileInstruction

_DIRECTIVE = re.compile(r"^\s*#\s*\w+\s*=")
_ESCAPE_DIRECTIVE = re.compile(r"^\s*#\s*escape\s*=\s*(\S)\s*$", re.IGNORECASE)
_ADD = re.compile(r"^\s*(?:ONBUILD\s+)?ADD\s+(.*)$", re.IGNORECASE | re.DOTALL)

__all__ = [
    "Instruction",
    "daemon_downloads",
    "logical_lines",
    "parse_dockerfile",
    "SUPPORTED_BASES",
    "SUPPORTED_INSTRUCTIONS",
    "SUPPORTED_HINT",
]

SUPPORTED_BASES = ("debian:bookworm-slim", "debian:bookworm", "docker.io/library/debian:bookworm-slim")
SUPPORTED_INSTRUCTIONS = ("FROM", "WORKDIR", "COPY", "ENV", "RUN")
# Appended to every refusal: why the local sandbox cannot build it, and the backend that can.
SUPPORTED_HINT = (
    "the local sandbox has no image store and no network: it runs on this host's own Debian bookworm "
    "userland, read-only, so it builds only FROM debian:bookworm[-slim], WORKDIR, COPY (no flags), ENV "
    "and RUN steps that install and download nothing; set `sandbox.kind: docker` in the recipe to build "
    "this Dockerfile as written"
)


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction.

    Attributes:
        line: 1-based line number where it starts.
        name: upper-case instruction (``RUN``).
        args: for ``FROM``/``WORKDIR``/``RUN`` the single argument string; for ``COPY`` sources then
            destination; for ``ENV`` alternating keys and values.
    """

    line: int
    name: str
    args: tuple[str, ...]


def logical_lines(text: str) -> list[tuple[int, str]]:
    """A Dockerfile's logical lines: continuations (a trailing backslash) joined, comments and blanks dropped.

    A comment line inside a continuation is dropped, as Docker does; the joined parts are stripped and
    separated by one space.

    Args:
        text: the Dockerfile's content.

    Returns:
        ``[(first physical line number, 1-based; logical line)]`` in file order.
    """
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # comment lines inside a continuation are dropped, as docker does
        if not buf:
            start = number
        if raw.rstrip().endswith("\\"):
            buf.append(raw.rstrip()[:-1])
            continue
        buf.append(raw)
        out.append((start, " ".join(part.strip() for part in buf)))
        buf = []
    if buf:
        out.append((start, " ".join(part.strip() for part in buf)))
    return out


def _env_pairs(rest: str, where: str) -> tuple[str, ...]:
    tokens = shlex.split(rest)
    if tokens and "=" not in tokens[0]:
        if len(tokens) < 2:
            raise UnsupportedDockerfileInstruction(f"{where}: ENV needs a value")
        return (tokens[0], rest.split(None, 1)[1].strip())
    pairs: list[str] = []
    for token in tokens:
        key, sep, value = token.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise UnsupportedDockerfileInstruction(f"{where}: ENV expects KEY=VALUE pairs, got {token!r}")
        pairs += [key, value]
    return tuple(pairs)


def parse_dockerfile(path: Path) -> list[Instruction]:
    """Parse a Dockerfile into the supported instruction subset.

    Args:
        path: the Dockerfile.

    Returns:
        The instructions in order; the first is ``FROM`` with a supported base.

    Raises:
        UnsupportedDockerfileInstruction: an instruction outside ``FROM, WORKDIR, COPY, ENV, RUN`` (message
            names it, the file and the line), a ``COPY --flag``, a base image other than Debian bookworm, or
            no ``FROM``.
    """
    instructions: list[Instruction] = []
    for line, text in logical_lines(path.read_text(encoding="utf-8")):
        where = f"{path}:{line}"
        name, _, rest = text.partition(" ")
        name = name.upper()
        rest = rest.strip()
        if name not in SUPPORTED_INSTRUCTIONS:
            raise UnsupportedDockerfileInstruction(
                f"{where}: instruction {name} is not supported; {SUPPORTED_HINT}"
            )
        if name == "FROM":
            base = rest.split()[0] if rest else ""
            if base not in SUPPORTED_BASES:
                raise UnsupportedDockerfileInstruction(
                    f"{where}: base image {base!r} cannot be run by the local sandbox (it maps only "
                    f"{', '.join(SUPPORTED_BASES[:2])} onto the host's Debian bookworm userland); "
                    f"{SUPPORTED_HINT}"
                )
            args: tuple[str, ...] = (base,)
        elif name == "COPY":
            if rest.startswith("["):
                parts = json.loads(rest)
            else:
                parts = shlex.split(rest)
            if any(p.startswith("--") for p in parts):
                raise UnsupportedDockerfileInstruction(
                    f"{where}: COPY flags ({rest}) are not supported; {SUPPORTED_HINT}"
                )
            if len(parts) < 2:
                raise UnsupportedDockerfileInstruction(f"{where}: COPY needs a source and a destination")
            args = tuple(parts)
        elif name == "ENV":
            args = _env_pairs(rest, where)
        else:
            if not rest:
                raise UnsupportedDockerfileInstruction(f"{where}: {name} needs an argument")
            if name == "RUN" and rest.startswith("["):
                rest = shlex.join(json.loads(rest))
            args = (rest,)
        instructions.append(Instruction(line=line, name=name, args=args))
    if not instructions or instructions[0].name != "FROM":
        raise UnsupportedDockerfileInstruction(
            f"{path}: the first instruction must be FROM debian:bookworm-slim; {SUPPORTED_HINT}"
        )
    if any(i.name == "FROM" for i in instructions[1:]):
        bad = next(i for i in instructions[1:] if i.name == "FROM")
        raise UnsupportedDockerfileInstruction(
            f"{path}:{bad.line}: multi-stage builds (a second FROM) are not supported; {SUPPORTED_HINT}"
        )
    return instructions


def daemon_downloads(text: str) -> bool:
    """Whether the Dockerfile ``text`` has an ``ADD`` that may name a remote source (the daemon fetches it).

    The daemon downloads an ``ADD`` source URL itself, whatever the build's network. Read as the daemon
    reads it: the ``escape`` parser directive, continuation lines joined, every source (not only the first),
    ``ONBUILD ADD``, any case. Conservative: a source with a scheme (``://``), a ``git@`` address or a
    variable (``$``: a build argument or ``ENV`` the daemon expands, perhaps to a URL) counts.

    Args:
        text: the Dockerfile as built.
    """
    escape = "\\"
    physical = text.splitlines()
    for raw in physical:  # parser directives: `# key=value` lines before any other line, comment or blank
        if not _DIRECTIVE.match(raw):
            break
        if match := _ESCAPE_DIRECTIVE.match(raw):
            escape = match[1]
    logical, buf = [], []
    for raw in physical:
        stripped = raw.strip()
        if stripped.startswith("#") or (not buf and not stripped):
            continue
        if stripped.endswith(escape):
            buf.append(stripped[: -len(escape)])
            continue
        logical.append(" ".join([*buf, stripped]))
        buf = []
    logical.append(" ".join(buf))
    for line in logical:
        match = _ADD.match(line)
        if match is None:
            continue
        rest = match[1].strip()
        while rest.startswith("--"):  # flags: --chown=..., --checksum=..., --link
            rest = rest.split(None, 1)[1] if len(rest.split(None, 1)) > 1 else ""
        try:
            args = json.loads(rest) if rest.startswith("[") else rest.split()
        except ValueError:
            args = rest.split()
        if any("://" in a or a.startswith("git@") or "$" in a for a in map(str, args[:-1] or args)):
            return True
    return False
