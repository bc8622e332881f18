"""The data of a generated task: its steps, each step's shell commands and its checks (one pytest test each).

A generated instance is a list of `Step` objects over a set of input files. A step is one instruction
bullet, the shell lines that carry it out (the reference solution) and the `Check` objects that verify it,
each rendered as one pytest test function, so the task's assertion count is the sum of its steps' checks and
grows with the instance's parameters (more steps, more files a step touches). The dense reward P / S
credits every check that holds (T1 §5.2, Eq. 20).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["APP", "Check", "CheckKind", "Instance", "Step"]

APP = "/app"
"""The working directory of every generated task (the Dockerfile's ``WORKDIR``)."""

CheckKind = Literal["exists", "line_count", "lines", "text", "absent", "content", "executable"]


@dataclass(frozen=True)
class Check:
    """One assertion on the final state of the task's files, rendered as one pytest test.

    Attributes:
        name: the test's name without ``test_`` (a Python identifier, unique in the task).
        kind: ``exists`` (a regular file), ``line_count`` (its number of lines equals ``expected``),
            ``lines`` (its lines, without the newline, equal the list ``expected``), ``text`` (its content
            stripped of surrounding whitespace equals ``expected``), ``absent`` (no file at ``path``),
            ``content`` (a regular file whose exact content is ``expected``), ``executable`` (a regular
            file with an execute bit for its owner).
        path: the file, relative to `APP`.
        expected: the value compared; ``None`` for ``exists``, ``absent`` and ``executable``.
    """

    name: str
    kind: CheckKind
    path: str
    expected: str | int | tuple[str, ...] | None = None


@dataclass(frozen=True)
class Step:
    """One instruction bullet of a generated task, with its reference commands and its checks.

    Attributes:
        key: the step's operation (``sort``, ``rename``, ...), unique in its task.
        params: the step's parameters as a tuple of plain values (what the instruction names: an output
            file, a count, a word, a column); with the family and the other steps' keys they make the
            instance's parameter tuple (`Instance.fingerprint`). Input data are not parameters.
        instruction: the markdown bullet the agent reads (names every parameter).
        commands: the shell lines of the reference solution, run in `APP` under ``set -euo pipefail``.
        checks: the assertions, one pytest test each.
    """

    key: str
    params: tuple[str | int | bool, ...]
    instruction: str
    commands: tuple[str, ...]
    checks: tuple[Check, ...]


@dataclass(frozen=True)
class Instance:
    """One generated task before it is written as a Harbor bundle (`t1_tasks.synth.bundle.write_bundle`).

    Attributes:
        family: the family that generated it (``text``, ``csv``, ``files``).
        seed: the seed it was generated from; ``(family, seed)`` determines the instance.
        preamble: the instruction's first paragraph (what the input files hold).
        steps: the steps, in instruction order.
        inputs: the input files, path relative to `APP` -> content (UTF-8 text).
    """

    family: str
    seed: int
    preamble: str
    steps: tuple[Step, ...]
    inputs: dict[str, str]

    @property
    def task_id(self) -> str:
        """The bundle's directory name: ``synth-<family>-<seed, five digits>``."""
        return f"synth-{self.family}-{self.seed:05d}"

    @property
    def fingerprint(self) -> tuple[object, ...]:
        """The instance's parameter tuple: the family and every step's key and parameters, in order.

        Two instances with the same fingerprint ask for the same operations with the same parameters (only
        their input data may differ); a held-out split shares none with its training split.
        """
        return (self.family, *((s.key, *s.params) for s in self.steps))

    @property
    def n_checks(self) -> int:
        """The number of assertions of the task's verifier (the sum over its steps)."""
        return sum(len(s.checks) for s in self.steps)
