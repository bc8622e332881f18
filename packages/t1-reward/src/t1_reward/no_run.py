"""A verifier that ran no test: when T1's own evidence makes it the environment's failure (T1 §5.2, §7.4).

One rule, applied by `t1_reward.scoring.score_output` for training, ``t1 eval`` and ``t1 reward``, and
named by ``t1 tasks validate``. For a task whose ``test.sh`` asks pytest for a per-assertion report, a
run that left no usable one is dropped as an infrastructure failure, never scored 0, when:

1. **the verifier did not run**: no pytest session in what T1 captured of ``test.sh``'s output (the
   bootstrap of uv failed, ``uvx`` could not resolve a pinned wheel or a Python); a reward file of 0 the
   script wrote afterwards (``echo 0 > reward.txt``) is not a verdict of the tests and is ignored (one
   above 0, from a ``test.sh`` that hides pytest's output, is the binary fallback of ``judge``'s rule 5);
2. **a dependency of the tests was missing before any test ran**: pytest's session ran no test
   (its closing line counts no passed, failed or skipped test) and the verifier's import guard
   (``t1_sandbox/verifier_site/sitecustomize.py``), before pytest started and so before any code of the
   tests or of the program under test ran in that process, named a module that the tests import and that
   the task's own ``test.sh`` installs (``-w numpy``, ``pip install numpy``: `TaskFacts.test_dependencies`).

What the agent cannot do with it: text printed by the program under test comes after the guard's line
and pytest's session header in the one ordered pipe T1 reads, so a planted ``ModuleNotFoundError: No
module named 'numpy'`` (or a broken module of the agent's own in ``/app`` that the tests import) names
nothing to the guard and stays the agent's 0; a second guard line before the header (printed by something
``test.sh`` ran earlier) makes the guard's evidence unusable (0). A module the task expects the agent to
write (``from solution import f`` with no ``/app/solution.py``) is not a dependency ``test.sh`` installs:
the agent's 0. With a validation record showing the task's verifier writing its report on this machine
under the run's network policy (`TaskFacts.verifier_proven`), neither rule applies: the agent's 0.

What stays open: without such a record, an agent that can change what ``test.sh`` runs before pytest (a
file under its ``HOME`` that the script sources, a system tool on a backend where the agent is root) can
keep pytest from starting and have its trial dropped instead of scored 0.
"""

from __future__ import annotations

from t1_reward.integrity import parse_pytest_summary
from t1_reward.outcomes import FallbackCause, Report

__all__ = ["GUARD_MARK", "guard_missing", "no_run_cause"]

#: The guard's line (``sitecustomize.MARK``; the guard is standard-library code that imports nothing of T1).
GUARD_MARK = "[t1-verifier-guard] test imports found nowhere:"
#: The line T1's verifier launch prints before ``test.sh`` when the Python it asks for is missing
#: (``t1_rollout.verifier_toolchain.MARK``): quoted in the cause, never a ground for it.
TOOLCHAIN_MARK = "[t1-verifier-toolchain]"
_SESSION = "test session starts"


def guard_missing(stdout: str) -> frozenset[str] | None:
    """The modules the guard found nowhere, from its one line before pytest's first session header.

    Returns:
        The names (possibly none), or None when there is no session header, no guard line before it, or
        more than one (a second one is not the guard's).
    """
    lines: list[str] = []
    for raw in stdout.splitlines():
        line = raw.strip()
        if _SESSION in line and line.startswith("="):
            break
        if line.startswith(GUARD_MARK):
            lines.append(line)
    else:
        return None
    if len(lines) != 1:
        return None
    rest = lines[0][len(GUARD_MARK) :]
    return frozenset(n.strip() for n in rest.split(",") if n.strip())


def _session_started(stdout: str) -> bool:
    return any(_SESSION in line and line.strip().startswith("=") for line in stdout.splitlines())


def no_run_cause(
    report: Report,
    stdout: str | None,
    *,
    expects_per_assertion: bool,
    verifier_proven: bool,
    test_dependencies: frozenset[str],
) -> str | None:
    """Why the verifier ran no test through no fault of the agent, by the rules of the module docstring.

    Args:
        report: the run's report as read (``t1_reward.read_report``).
        stdout: what ``test.sh`` printed as T1 captured it (stdout and stderr in order), or None.
        expects_per_assertion: the task's verifier writes a per-assertion report.
        verifier_proven: a validation record shows the verifier writing its report on this machine.
        test_dependencies: top-level modules that the task's ``test.sh`` installs.

    Returns:
        One line naming the cause, or None (the run is scored by the other rules of ``t1_reward.judge``).
    """
    if verifier_proven or not expects_per_assertion:
        return None
    if report.fallback is None and report.total > 0:
        return None  # a usable per-assertion report: tests ran
    if report.fallback in (FallbackCause.VERIFIER_TIMEOUT, FallbackCause.VERIFIER_CRASH):
        return None  # a run the deadline or a signal ended has its own rules
    if report.binary is not None and report.binary > 0:
        return None  # a solved reward file (a test.sh that hides pytest's output): the binary fallback's
    ignored = f"; its {report.source} is ignored" if report.binary is not None else ""
    text = stdout or ""
    summary, unfinished = parse_pytest_summary(text)
    if not _session_started(text) and summary is None:
        said = next((line.strip() for line in text.splitlines() if line.startswith(TOOLCHAIN_MARK)), None)
        said = f" ({said[len(TOOLCHAIN_MARK) :].strip()}: T1 downloads no Python)" if said else ""
        return (
            "the verifier did not run: no pytest session in what test.sh printed although it asks pytest "
            f"for a per-assertion report (its bootstrap or toolchain failed){said}{ignored}"
        )
    if summary is None or unfinished or summary.tests_low > 0:
        return None  # tests ran, or the session did not close: the other rules decide
    missing = guard_missing(text)
    if missing is None:
        return None
    deps = sorted(missing & test_dependencies)
    if not deps:
        return None
    return (
        f"the tests could not run: {', '.join(deps)}, which test.sh installs for them, was missing before "
        f"any test ran (the verifier's import guard found it nowhere){ignored}"
    )
