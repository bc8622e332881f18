"""One task bundle in Harbor layout: task.toml, instruction.md, environment/, tests/, solution/.

Source: Harbor task format (``src/harbor/models/task/paths.py``, ``config.py``); T1 §3 (task pools).
"""

from __future__ import annotations

import hashlib
import os
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from t1_tasks.assertions import count_test_items
from t1_tasks.harbor import (
    DEFAULT_AGENT_TIMEOUT_S,
    DEFAULT_VERIFIER_TIMEOUT_S,
    HarborEnvironment,
    TaskError,
    parse_task_config,
)

__all__ = [
    "DEFAULT_AGENT_TIMEOUT_S",
    "DEFAULT_VERIFIER_TIMEOUT_S",
    "Task",
    "TaskError",
    "bundle_digest",
    "count_assertions",
    "format_seconds",
    "bundle_link_problems",
    "load_task",
    "read_bundle_text",
]

# The files every Harbor bundle must have, relative to the bundle directory; ``environment/Dockerfile`` may
# be left out when ``[environment].docker_image`` names a prebuilt image (Harbor 0.7+).
REQUIRED_FILES = ("task.toml", "instruction.md", "environment/Dockerfile", "tests/test.sh")
#: Needed only to run the oracle (``t1 tasks validate``); training and evaluation never read it.
SOLUTION_FILE = "solution/solve.sh"
#: Files of the older Terminal-Bench layout (``tb run``); a folder with ``task.yaml`` and no ``task.toml``
#: is that layout, converted by Harbor's ``harbor tasks migrate``.
TB1_MARKERS = ("task.yaml", "run-tests.sh", "solution.sh", "docker-compose.yaml")
#: The category and difficulty of a task whose ``[metadata]`` gives none (Harbor's difficulty enum has it).
UNKNOWN = "unknown"
#: What names the conversion, in every refusal of the older layout (Harbor ``cli/tasks.py`` ``migrate``).
MIGRATE_COMMAND = "harbor tasks migrate -i {src} -o {dst}"


@dataclass(frozen=True)
class Task:
    """A loaded task bundle (Harbor layout).

    Attributes:
        id: the bundle's directory name.
        path: the bundle directory.
        instruction: the contents of ``instruction.md`` (the agent's prompt).
        category: ``[metadata].category`` (e.g. ``version-control``); ``unknown`` when absent (Harbor does
            not require it; ``harbor tasks init`` writes none).
        difficulty: ``[metadata].difficulty`` (``easy | medium | hard | unknown``); ``unknown`` when absent.
        agent_timeout_s: ``[agent].timeout_sec`` in seconds (default 600, Harbor docs). Only ``t1 tasks
            validate`` applies it (to ``solution/solve.sh``); training applies the recipe's
            ``rollout.agent_deadline_s`` to every task.
        verifier_timeout_s: ``[verifier].timeout_sec`` in seconds (default 600, Harbor code). Only ``t1 tasks
            validate`` applies it; training applies the recipe's ``rollout.verifier_deadline_s``.
        environment_dir: ``environment/`` (holds the Dockerfile and fixtures).
        tests_dir: ``tests/`` (``test.sh`` plus pytest files); held out from the agent.
        solution_dir: ``solution/`` (``solve.sh``, the oracle); held out from the agent. It may be absent
            (Harbor allows it; `has_solution`): ``t1 tasks validate`` then runs the do-nothing check alone
            (verdict ``unproven``), ``t1 eval --policy oracle`` and ``t1 sft`` skip the task.
        n_assertions: number of pytest test items in ``tests/*.py``, counted statically (one assertion each;
            T1 §5.2's P and T): test functions and ``Test*`` class methods, times the cases of literal
            ``@pytest.mark.parametrize`` decorators (``count_assertions``). None when it cannot be known
            without running pytest (parametrize over a non-literal, fixture ``params``, ...): the verifier's
            report then gives the count.
        environment: ``[environment]`` as Harbor defines it, legacy keys mapped (``memory = "2G"`` is
            ``memory_mb = 2048``): the prebuilt ``docker_image``, resources, network policy, build timeout and
            working directory, for the sandbox backend that runs the task (``t1_tasks.harbor``).
        name: ``[task].name`` (``org/name``), None when absent.
        schema_version: ``schema_version`` or its legacy spelling ``version``, None when absent.
        config: the whole parsed ``task.toml`` as written (every key of it is read by
            ``t1_tasks.harbor.parse_task_config``).
        warnings: keys of ``task.toml`` that Harbor's task model does not have, ignored as Harbor ignores
            them, one line each naming the file and the key (``[task] format``).
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
    environment: HarborEnvironment = field(default_factory=HarborEnvironment)
    name: str | None = None
    schema_version: str | None = None
    config: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    warnings: tuple[str, ...] = field(default=(), compare=False, hash=False)

    @property
    def tags(self) -> list[str]:
        """``[metadata].tags`` (empty when absent)."""
        return list(self.config.get("metadata", {}).get("tags", []))

    @property
    def dockerfile(self) -> Path:
        """``environment/Dockerfile`` (it may be absent when ``environment.docker_image`` is set)."""
        return self.environment_dir / "Dockerfile"

    @property
    def has_solution(self) -> bool:
        """Whether the bundle has ``solution/solve.sh``, the oracle (``t1 tasks validate``, ``t1 eval``)."""
        return (self.path / SOLUTION_FILE).is_file()


def read_bundle_text(path: Path) -> str:
    """A bundle file's text, read as UTF-8.

    Args:
        path: a file of a task bundle (``instruction.md``, ``task.toml``, a test file).

    Returns:
        The file's content.

    Raises:
        TaskError: the file is not UTF-8 or cannot be read (names the file, and the byte or the OS reason).
    """
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
    files = {str(p.relative_to(tests_dir)): read_bundle_text(p) for p in sorted(tests_dir.rglob("*.py"))}
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


def _is_inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def bundle_link_problems(root: Path) -> list[str]:
    """Every entry of the bundle ``root`` that task loading refuses: links that leave it, special files.

    The bundle's files (``instruction.md``, ``task.toml``, ``solution/``, ``tests/``, ``environment/``) are
    read by the trainer on the host, so a link in them to a host file (``instruction.md -> /etc/shadow``)
    would put that file in the agent's prompt, the image's hash or the uploaded tests. The walk follows no
    link: each link's target is resolved as text and refused when it leaves ``root``; a link that stays
    inside the bundle is kept (the sandbox copies it as a link). FIFOs, sockets and device files are refused
    too: reading one blocks or never ends.

    Args:
        root: the bundle directory, already resolved (``Path.resolve``).

    Returns:
        One line per refused entry, naming it and its target (empty: nothing refused).
    """
    base = str(root)
    problems: list[str] = []
    for here, dirs, files in os.walk(base, followlinks=False):
        for name in sorted(dirs + files):
            path = os.path.join(here, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue  # vanished during the walk
            if stat.S_ISLNK(mode):
                target = os.readlink(path)
                resolved = os.path.realpath(path)
                if not _is_inside(resolved, base):
                    problems.append(
                        f"{path}: a link to {target} (resolves to {resolved}), outside the bundle; "
                        "links outside the bundle are not followed"
                    )
            elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                problems.append(f"{path}: not a regular file, directory or link (a FIFO, socket or device)")
    return problems


def _older_layout(root: Path) -> TaskError | None:
    """The refusal of a bundle in the older Terminal-Bench layout (``task.yaml``), or None when it is not."""
    if (root / "task.toml").is_file() or not (root / "task.yaml").is_file():
        return None
    seen = [m for m in TB1_MARKERS if (root / m).exists()]
    command = MIGRATE_COMMAND.format(src=root, dst="<harbor tasks dir>")
    return TaskError(
        f"{root}: a task in the older Terminal-Bench layout ({', '.join(seen)}), not Harbor's (task.toml, "
        f"instruction.md, environment/, tests/test.sh); convert it with `{command}` (Harbor's CLI; "
        "`-i` also takes a folder of such tasks) and load the converted folder"
    )


def load_task(path: str | Path, *, require_solution: bool = False) -> Task:
    """Load and check one task bundle.

    Args:
        path: the bundle directory (holds ``task.toml``).
        require_solution: also require ``solution/solve.sh`` (a caller that needs the oracle); every T1
            command loads bundles without it, as Harbor does.

    Returns:
        The ``Task``.

    Fields are named by their dotted TOML path (``metadata.category``), without brackets, so that messages
    survive rich markup on the command line. Every key of ``task.toml`` is read by
    ``t1_tasks.harbor.parse_task_config``: honoured, kept for the sandbox backend, or refused by name.

    Raises:
        TaskError: a link in the bundle that resolves outside it, or a FIFO, socket or device file
            (`bundle_link_problems`, all of them in one message); missing files (all of them named in one
            message), a bundle in the older Terminal-Bench layout (one message naming ``harbor tasks
            migrate``), unparsable TOML, a key of the wrong type, a key T1 cannot honour or one Harbor's
            model does not have; the message names the file and the key.
    """
    root = Path(path).resolve()
    if not root.is_dir():
        raise TaskError(f"{root}: not a task bundle directory")
    refused = bundle_link_problems(root)
    if refused:
        raise TaskError("; ".join(refused))
    older = _older_layout(root)
    if older is not None:
        raise older
    toml_path = root / "task.toml"
    config: dict[str, Any] = {}
    if toml_path.is_file():
        try:
            config = tomllib.loads(read_bundle_text(toml_path))
        except tomllib.TOMLDecodeError as exc:
            raise TaskError(f"{toml_path}: not valid TOML: {exc}") from exc
    image = (
        config.get("environment", {}).get("docker_image")
        if isinstance(config.get("environment"), dict)
        else None
    )
    required = [r for r in REQUIRED_FILES if not (image and r == "environment/Dockerfile")]
    required += [SOLUTION_FILE] if require_solution else []
    missing = [rel for rel in required if not (root / rel).is_file()]
    needs = ", ".join(required)
    if len(missing) == 1:
        raise TaskError(f"{root / missing[0]}: missing (a Harbor task bundle needs {needs})")
    if missing:  # all of them in one message, so a bundle is not fixed one file at a time
        raise TaskError(f"{root}: missing {', '.join(missing)} (a Harbor task bundle needs {needs})")
    harbor = parse_task_config(config, str(toml_path))
    instruction = read_bundle_text(root / "instruction.md").strip()
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
        category=harbor.metadata.get("category") or UNKNOWN,
        difficulty=harbor.metadata.get("difficulty") or UNKNOWN,
        agent_timeout_s=harbor.agent_timeout_s,
        verifier_timeout_s=harbor.verifier_timeout_s,
        environment_dir=root / "environment",
        tests_dir=root / "tests",
        solution_dir=root / "solution",
        n_assertions=n_assertions,
        environment=harbor.environment,
        name=harbor.name,
        schema_version=harbor.schema_version,
        config=config,
        warnings=harbor.warnings,
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
