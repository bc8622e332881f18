"""One task bundle in Harbor layout: task.toml, instruction.md, environment/, tests/, solution/.

Source: Harbor task format (``src/harbor/models/task/paths.py``, ``config.py``); T1 §3 (task pools).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Task", "TaskError", "load_task", "count_assertions"]

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

_TEST_DEF = re.compile(r"^\s*(?:async\s+)?def\s+test_\w*\s*\(", re.MULTILINE)


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
        n_assertions: number of ``def test_`` functions in ``tests/*.py`` (one assertion each; T1 §5.2's P
            and T).
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
    n_assertions: int
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


def count_assertions(tests_dir: Path) -> int:
    """Count the test functions (``def test_...``) in every ``*.py`` file under ``tests_dir``.

    Args:
        tests_dir: a bundle's ``tests/`` directory.

    Returns:
        The number of assertions; each test function is one assertion by the pool's convention.

    Raises:
        TaskError: a test file is not UTF-8 or cannot be read (names it).
    """
    return sum(len(_TEST_DEF.findall(_read_text(p))) for p in sorted(tests_dir.rglob("*.py")))


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
            f"{root / 'tests'}: no test functions (def test_...) found; the verifier grades nothing"
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
