"""One task bundle in Harbor layout: task.toml, instruction.md, environment/, tests/, solution/.

Source: Harbor task format (``src/harbor/models/task/paths.py``, ``config.py``); T1 §3 (task pools).
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from t1_tasks.assertions import count_test_items

__all__ = ["Task", "TaskError", "bundle_digest", "load_task", "count_assertions", "format_seconds"]

# Harbor's code default for the verifier is 600 s; the agent has no limit in code, the docs say 600 s.
DEFAULT_AGENT_TIMEOUT_S = 600.0
DEFAULT_VERIFIER_TIMEOUT_S = 600.0

# The files every Harbor bundle must have, relative to the bundle directory.
REQUIRED_FILES = (
    "task.toml",
    "instruction.md",
    "environment/Dockerfile",
    "tests/test.sh",
    "solution/solve.sh",
)


class TaskError(ValueError):
    """A task bundle is malformed; the message names the file and the field (or missing path)."""


@dataclass(frozen=True)
class Task:
    """A loaded task bundle (Harbor layout).

    Attributes:
        id: the bundle's directory name.
        path: the bundle directory.
        instruction: the contents of ``instruction.md`` (the agent's prompt).
        category: ``[metadata].category`` (e.g. ``version-control``).
        difficulty: ``[metadata].difficulty`` (``easy | medium | hard | unknown``).
        agent_timeout_s: ``[agent].timeout_sec`` in seconds (default 600, Harbor docs). Only ``t1 tasks
            validate`` applies it (to ``solution/solve.sh``); training applies the recipe's
            ``rollout.agent_deadline_s`` to every task.
        verifier_timeout_s: ``[verifier].timeout_sec`` in seconds (default 600, Harbor code). Only ``t1 tasks
            validate`` applies it; training applies the recipe's ``rollout.verifier_deadline_s``.
        environment_dir: ``environment/`` (holds the Dockerfile and fixtures).
        tests_dir: ``tests/`` (``test.sh`` plus pytest files); held out from the agent.
        solution_dir: ``solution/`` (``solve.sh``, the oracle); held out from the agent.
        n_assertions: number of pytest test items in ``tests/*.py``, counted statically (one assertion each;
            T1 §5.2's P and T): test functions and ``Test*`` class methods, times the cases of literal
            ``@pytest.mark.parametrize`` decorators (``count_assertions``). None when it cannot be known
            without running pytest (parametrize over a non-literal, fixture ``params``, ...): the verifier's
            report then gives the count.
        config: the whole parsed ``task.toml``; ``[environment]`` (cpus, memory_mb, ...) is kept here and
            used by nothing: sandbox limits come from the recipe's ``sandbox`` section.
    """

    id: str
    path: Path
    instruction: str
    category: str
    difficulty: str
    agent_timeout_s: float
    verifier_timeout_s: float
    environment_dir: Path
    tests_dir: Path
    solution_dir: Path
    n_assertions: int | None
    config: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def tags(self) -> list[str]:
        """``[metadata].tags`` (empty when absent)."""
        return list(self.config.get("metadata", {}).get("tags", []))


def _read_text(path: Path) -> str:
    """``path`` as UTF-8 text; an unreadable or non-UTF-8 file is a ``TaskError`` naming it."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TaskError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise TaskError(f"{path}: cannot be read: {exc.strerror or exc}") from exc


def count_assertions(tests_dir: Path) -> int | None:
    """Count the assertions (pytest test items) that the ``*.py`` files under ``tests_dir`` define.

    Counted statically with ``ast`` (nothing is imported): test functions (``def test*``) at module level
    and test methods of ``Test*`` classes without ``__init__``, each multiplied by the number of cases of
    every literal ``@pytest.mark.parametrize(...)`` on it or its class (stacked decorators multiply; a
    ``pytest.param(...)`` entry is one case). ``conftest.py`` defines no tests. Details in
    ``t1_tasks.assertions``.

    Args:
        tests_dir: a bundle's ``tests/`` directory.

    Returns:
        The number of assertions (0 when no ``def test*`` function exists), or None when it cannot be known
        statically (parametrize over a non-literal, a fixture with ``params``, ``pytest_generate_tests``,
        ``unittest.TestCase``, ...); then the verifier's report is the only count.

    Raises:
        TaskError: a test file is not UTF-8, cannot be read or is not valid Python (names it and the line).
    """
    files = {str(p.relative_to(tests_dir)): _read_text(p) for p in sorted(tests_dir.rglob("*.py"))}
    try:
        return count_test_items(files)
    except SyntaxError as exc:
        where = f"{tests_dir / (exc.filename or '')}:{exc.lineno}"
        raise TaskError(f"{where}: not valid Python: {exc.msg}") from exc


def format_seconds(seconds: float) -> str:
    """A duration for messages and tables, without its unit: ``600``, ``0.5``, ``2.25``, ``12.3``.

    Whole numbers print without decimals, others with 3 significant digits (never rounded to ``0``).

    Args:
        seconds: the duration in seconds.

    Returns:
        The number as text; append `` s`` for the unit.
    """
    if float(seconds).is_integer() or abs(seconds) >= 100:
        return f"{seconds:.0f}"
    return f"{seconds:.3g}"


def _number(table: dict[str, Any], key: str, default: float, where: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise TaskError(f"{where}.{key} must be a positive number of seconds, got {value!r}")
    return float(value)


def load_task(path: str | Path) -> Task:
    """Load and check one task bundle.

    Args:
        path: the bundle directory (holds ``task.toml``).

    Returns:
        The ``Task``.

    Fields are named by their dotted TOML path (``metadata.category``), without brackets, so that messages
    survive rich markup on the command line.

    Raises:
        TaskError: missing files (all of them named in one message), unparsable TOML, or a field of the
            wrong type; the message names the file and the field.
    """
    root = Path(path).resolve()
    if not root.is_dir():
        raise TaskError(f"{root}: not a task bundle directory")
    toml_path = root / "task.toml"
    missing = [rel for rel in REQUIRED_FILES if not (root / rel).is_file()]
    if len(missing) == 1:
        raise TaskError(f"{root / missing[0]}: missing (a Harbor task bundle needs {missing[0]})")
    if missing:  # all of them in one message, so a bundle is not fixed one file at a time
        raise TaskError(
            f"{root}: missing {', '.join(missing)} (a Harbor task bundle needs {', '.join(REQUIRED_FILES)})"
        )
    try:
        config = tomllib.loads(_read_text(toml_path))
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"{toml_path}: not valid TOML: {exc}") from exc
    for section in ("metadata", "agent", "verifier", "environment"):
        if not isinstance(config.get(section, {}), dict):
            raise TaskError(f"{toml_path}: field {section} must be a table")
    meta = config.get("metadata", {})
    for key in ("category", "difficulty"):
        if not isinstance(meta.get(key), str) or not meta[key]:
            raise TaskError(f"{toml_path}: field metadata.{key} is missing or not a string")
    if not isinstance(meta.get("tags", []), list):
        raise TaskError(f"{toml_path}: field metadata.tags must be a list of strings")
    agent_timeout = _number(
        config.get("agent", {}), "timeout_sec", DEFAULT_AGENT_TIMEOUT_S, f"{toml_path}: field agent"
    )
    verifier_timeout = _number(
        config.get("verifier", {}), "timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S, f"{toml_path}: field verifier"
    )
    instruction = _read_text(root / "instruction.md").strip()
    if not instruction:
        raise TaskError(f"{root / 'instruction.md'}: empty instruction")
    n_assertions = count_assertions(root / "tests")
    if n_assertions == 0:
        raise TaskError(
            f"{root / 'tests'}: no test functions (def test_... at module level or in a Test* class) found; "
            "the verifier grades nothing"
        )
    return Task(
        id=root.name,
        path=root,
        instruction=instruction,
        category=meta["category"],
        difficulty=meta["difficulty"],
        agent_timeout_s=agent_timeout,
        verifier_timeout_s=verifier_timeout,
        environment_dir=root / "environment",
        tests_dir=root / "tests",
        solution_dir=root / "solution",
        n_assertions=n_assertions,
        config=config,
    )


def bundle_digest(path: str | Path) -> str:
    """SHA-256 of a task bundle's content: every file's relative path and bytes, in sorted order (hex).

    Symbolic links count by their target text, never followed. Two bundles have the same digest exactly when
    they hold the same files with the same bytes, so an audit or a record made for one version of a task
    can be told from a later edit of it.
    """
    root = Path(path)
    digest = hashlib.sha256()
    for item in sorted(p for p in root.rglob("*") if p.is_symlink() or p.is_file()):
        rel = item.relative_to(root).as_posix()
        if "__pycache__" in rel.split("/"):
            continue
        data = os.readlink(item).encode() if item.is_symlink() else item.read_bytes()
        digest.update(f"{len(rel)}:{rel}:{'link' if item.is_symlink() else 'file'}:{len(data)}:".encode())
        digest.update(data)
    return digest.hexdigest()
