"""Audit checks that need no model: read the bundle's files and the validation record (T1 §3.2).

Each check maps to a hard reject or to a dimension score, with evidence text naming the file and line:

- ``test_leakage`` (hard reject): the agent can read the tests or the solution before verification: a
  Dockerfile ``COPY``/``ADD`` of ``tests/`` or ``solution/`` (or of a test file or ``solve.sh``), or a test
  file inside ``environment/`` (named like one, or a byte copy of a ``tests/`` script or the solution). A data
  file that ``tests/`` keeps its own copy of (the held-out input the expected values are recomputed from)
  is not a leak.
- ``solution_shortcut`` (hard reject; ``solution_reasonableness`` 1): ``solution/solve.sh`` mentions
  ``/tests``, a ``test_*.py`` file, ``ctrf.json`` or ``/logs/verifier``, so the reference solution reads or
  edits the tests or the verifier's outputs.
- ``weak_verifier`` (hard reject) and ``verifier_coverage``: from the validation record (``t1 tasks
  validate --record``): a do-nothing agent that passes every assertion is a weak verifier; otherwise the
  coverage score is ``1 + round(4 f)`` with ``f`` the fraction of assertions the do-nothing agent fails
  (chosen: every assertion failing scores 5, half of them 3).
- ``solution_correctness``: from the validation record: 5 when the reference solution passes every
  assertion, 1 when it does not (the task cannot be solved as written).
- ``hidden_requirement`` candidate (``instruction_verifier_alignment`` 2, below its critical minimum of 3):
  an absolute path in a string literal of ``tests/*.py`` that the instruction never mentions (neither the
  path, nor its file name, nor a directory above it) and that no ``environment/`` file names (the agent
  could not find it by looking). A candidate is not a hard reject on its own: a path can be implied by
  the instruction in words; the judge's ``hidden_requirement`` flag decides the hard reject. System and
  verifier paths (``/tests``, ``/logs``, ``/tmp``, ``/usr``, ``/bin``, ``/dev``, ``/proc``, ...) are not
  requirements.

Dimensions the static checks score: ``solution_correctness`` and ``verifier_coverage`` (with a validation
record), ``solution_reasonableness`` (only when a shortcut is found) and ``instruction_verifier_alignment``
(only when a hidden-requirement candidate is found). ``verifier_fairness``, ``instruction_clarity``,
``instruction_completeness`` and ``task_value`` are left to the judge.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from t1_tasks.task import Task
from t1_tasks.validation import TaskRecord

__all__ = ["Finding", "StaticAudit", "static_audit"]


@dataclass(frozen=True)
class Finding:
    """One result of a static check.

    Attributes:
        check: the check's name (``test_leakage``, ``solution_shortcut``, ``weak_verifier``,
            ``verifier_coverage``, ``solution_correctness``, ``hidden_requirement_candidate``).
        evidence: what was found and where (file and line).
        hard_reject: the hard reject it raises (a key of ``HARD_REJECTS``), or None.
        dimension: the dimension it scores, or None.
        score: that dimension's score 1-5 (None when ``dimension`` is None).
    """

    check: str
    evidence: str
    hard_reject: str | None = None
    dimension: str | None = None
    score: int | None = None


@dataclass(frozen=True)
class StaticAudit:
    """The static checks of one task.

    Attributes:
        task_id: the task.
        findings: every finding, in check order.
    """

    task_id: str
    findings: tuple[Finding, ...] = field(default=())

    @property
    def scores(self) -> dict[str, int]:
        """Dimension -> score: the lowest score any finding gave it."""
        out: dict[str, int] = {}
        for f in self.findings:
            if f.dimension is not None and f.score is not None:
                out[f.dimension] = min(out.get(f.dimension, f.score), f.score)
        return out

    @property
    def hard_rejects(self) -> dict[str, list[str]]:
        """Hard reject -> the evidence for it."""
        out: dict[str, list[str]] = {}
        for f in self.findings:
            if f.hard_reject is not None:
                out.setdefault(f.hard_reject, []).append(f.evidence)
        return out

    def evidence(self, dimension: str) -> list[str]:
        """The evidence behind ``dimension``'s static score (empty when it is not scored)."""
        return [f.evidence for f in self.findings if f.dimension == dimension]


_TEST_FILE = re.compile(r"^(test_.*\.py|.*_test\.py|conftest\.py|test\.sh|solve\.sh)$")
# a reference solution has no business with the held-out tests or the verifier's report folder (/logs)
_SHORTCUT = re.compile(r"/tests\b|\btest_\w*\.py\b|\bctrf\.json\b|/logs\b|\breward\.(?:json|txt)\b")
_ABS_PATH = re.compile(r"(?<![\w.:/-])/(?:[\w.@+-]+/)*[\w.@+-]+")
_SYSTEM_PREFIXES = (
    "/tests", "/logs", "/tmp", "/var/tmp", "/dev", "/proc", "/sys", "/usr", "/bin", "/sbin", "/lib",
    "/lib64", "/run", "/solution",
)  # fmt: skip


def _rel(task: Task, path: Path) -> str:
    return str(path.relative_to(task.path))


def _dockerfile_instructions(text: str) -> list[tuple[int, str]]:
    """``(line number, instruction)`` pairs with backslash continuations joined and comments dropped."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for n, line in enumerate(text.splitlines(), 1):
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if not buf:
            start = n
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((start, buf + line))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


def _copy_sources(instruction: str) -> list[str]:
    """The source operands of a ``COPY``/``ADD`` instruction (flags and the destination dropped)."""
    rest = instruction.split(None, 1)[1] if len(instruction.split(None, 1)) == 2 else ""
    rest = rest.strip()
    if rest.startswith("["):  # JSON form
        try:
            parts = [str(p) for p in ast.literal_eval(rest)]
        except (ValueError, SyntaxError):
            parts = rest.strip("[]").replace('"', " ").replace(",", " ").split()
    else:
        try:
            parts = shlex.split(rest)
        except ValueError:
            parts = rest.split()
    parts = [p for p in parts if not p.startswith("--")]
    return parts[:-1]


def _leaked_source(src: str) -> bool:
    parts = [p for p in Path(src.replace("\\", "/")).parts if p not in (".", "..", "/")]
    return any(p in ("tests", "solution") for p in parts) or bool(parts and _TEST_FILE.match(parts[-1]))


def _leakage(task: Task) -> list[Finding]:
    out: list[Finding] = []
    dockerfile = task.environment_dir / "Dockerfile"
    for line, instr in _dockerfile_instructions(dockerfile.read_text(encoding="utf-8", errors="replace")):
        if instr.split(None, 1)[0].upper() not in ("COPY", "ADD"):
            continue
        for src in _copy_sources(instr):
            if _leaked_source(src):
                out.append(
                    Finding(
                        "test_leakage",
                        f"{_rel(task, dockerfile)}:{line}: {instr.split(None, 1)[0].upper()} {src} puts the "
                        "held-out tests or solution into the agent's image",
                        hard_reject="test_leakage",
                    )
                )
    held_out = [p for p in task.tests_dir.rglob("*") if p.is_file() and p.suffix in (".py", ".sh")]
    held_out += [p for p in task.solution_dir.rglob("*") if p.is_file()]
    copies = {p.read_bytes(): p for p in held_out}
    for p in sorted(x for x in task.environment_dir.rglob("*") if x.is_file() and x.name != "Dockerfile"):
        if _TEST_FILE.match(p.name):
            why = "is a test file (or the solution) inside environment/, readable by the agent"
        elif (orig := copies.get(p.read_bytes())) is not None:
            why = f"is a byte copy of {_rel(task, orig)}, readable by the agent"
        else:
            continue
        out.append(Finding("test_leakage", f"{_rel(task, p)} {why}", hard_reject="test_leakage"))
    return out


def _shortcut(task: Task) -> list[Finding]:
    # every file of solution/, not only solve.sh: a helper script it runs is the same solution
    files = sorted(p for p in task.solution_dir.rglob("*") if p.is_file() and not p.is_symlink())
    hits = [
        f"{_rel(task, path)}:{n}: {line.strip()[:120]}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if _SHORTCUT.search(line)
    ]
    if not hits:
        return []
    evidence = "; ".join(hits)
    return [
        Finding(
            "solution_shortcut",
            evidence,
            hard_reject="solution_shortcut",
            dimension="solution_reasonableness",
            score=1,
        )
    ]


def _validated(record: TaskRecord) -> list[Finding]:
    out: list[Finding] = []
    oracle, nop = record.oracle, record.nop
    if oracle is not None:
        ok = oracle.error is None and oracle.total > 0 and oracle.passed == oracle.total
        expected = record.static_assertions
        if ok and expected is not None and oracle.total != expected:
            ok = False
        what = (
            f"the reference solution passed {oracle.passed}/{oracle.total} assertions"
            + (f" (tests/ define {expected})" if expected is not None else "")
            + (f"; error: {oracle.error}" if oracle.error else "")
            + " (validation record)"
        )
        out.append(
            Finding("solution_correctness", what, dimension="solution_correctness", score=5 if ok else 1)
        )
    if nop is not None and nop.error is None and nop.total > 0:
        failed = nop.total - nop.passed
        what = f"a do-nothing agent passed {nop.passed}/{nop.total} assertions (validation record)"
        if failed == 0:
            out.append(Finding("weak_verifier", what, hard_reject="weak_verifier"))
        score = 1 + int(4 * failed / nop.total + 0.5)
        out.append(Finding("verifier_coverage", what, dimension="verifier_coverage", score=score))
    return out


def _string_literals(source: str) -> list[tuple[int, str]]:
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def _mentioned(path: str, instruction: str, named: list[str]) -> bool:
    name = path.rsplit("/", 1)[-1]
    if path in instruction or (len(name) >= 3 and name in instruction):
        return True
    return any(path.startswith(m.rstrip("/") + "/") or m.startswith(path + "/") for m in named)


def _hidden(task: Task) -> list[Finding]:
    named = _ABS_PATH.findall(task.instruction)
    env_text = "\n".join(
        p.read_text(encoding="utf-8", errors="replace")
        for p in task.environment_dir.rglob("*")
        if p.is_file() and p.stat().st_size < 1_000_000
    )
    hits: dict[str, str] = {}
    for test in sorted(task.tests_dir.rglob("*.py")):
        for line, text in _string_literals(test.read_text(encoding="utf-8", errors="replace")):
            for path in _ABS_PATH.findall(text):
                if path == "/" or any(path == p or path.startswith(p + "/") for p in _SYSTEM_PREFIXES):
                    continue
                if _mentioned(path, task.instruction, named) or path in env_text:
                    continue
                hits.setdefault(path, f"{_rel(task, test)}:{line}")
    return [
        Finding(
            "hidden_requirement_candidate",
            f"{where}: the tests require {path}, which instruction.md never mentions and no environment/ "
            "file names",
            dimension="instruction_verifier_alignment",
            score=2,
        )
        for path, where in hits.items()
    ]


def static_audit(task: Task, record: TaskRecord | None = None) -> StaticAudit:
    """Run every static check on ``task`` (T1 §3.2: the hard rejects and the dimensions files can show).

    Args:
        task: a loaded task bundle.
        record: the task's row of a validation record (``t1_tasks.validation``), or None; without it the
            weak-verifier, correctness and coverage checks do not run.

    Returns:
        The ``StaticAudit``: its findings, the dimension scores they set and the hard rejects they raise.

    Raises:
        SyntaxError: a ``tests/*.py`` file is not valid Python (``load_task`` refuses such bundles first).
    """
    findings = _leakage(task) + _shortcut(task) + _hidden(task)
    if record is not None:
        findings += _validated(record)
    return StaticAudit(task.id, tuple(findings))
