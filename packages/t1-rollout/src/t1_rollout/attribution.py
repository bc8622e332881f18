"""Who is to blame for a verifier run that gave no verdict: the environment, or the agent (T1 §5.2, §7.4).

A verifier that ran no test because of its environment (the Terminal-Bench 2 bootstrap ``curl ...
astral.sh | sh`` in a sandbox without network) is an infrastructure failure with that cause, never the
agent's 0, even when its ``test.sh`` then writes ``reward.txt = 0``. A verifier that ran no test because the
agent broke it (killed pytest, made the report unwritable) scores 0, or sabotage would pay.

Telling the two apart from what the run printed would let a failing agent plant a ``curl`` that prints a
DNS error and get its 0 dropped. So the environment is blamed only from facts T1 observed itself, none of
which the agent can influence:

1. the task's row of the validation record (``t1 tasks validate --record``), taken under the same network
   policy: when the task's own reference solution got no per-assertion report from its verifier on the
   validating machine either, the verifier cannot produce one there whatever the agent does (environment);
   when it got one, a run without one is the agent's doing (never the environment, whatever the output
   says);
2. without such a row: the sandbox's network policy, as T1 set it (``VerifierRun.network``), and the hosts
   that the task's held-out ``tests/test.sh`` names (the file is uploaded read-only after the agent is gone
   and hashed, ``t1_rollout.verify``): with no network, a verifier that fetches from a host could not
   reach it;
3. for a verifier timeout, first: the validation record's oracle run timed out too, or the task failed
   validation (`task_timeout_cause`): the task's own verifier hangs, a task defect, never the agent's 0.

A task whose bundle has no ``solution/`` (Harbor allows one) has a row with no oracle run and the verdict
``unproven`` (``failed`` when its do-nothing check failed): the row proves nothing about the verifier on
this machine (``TaskRecord.oracle_reported`` is None), so rule 1 does not decide, rule 2 does, and a run
without a usable report is never proven the agent's doing (``TaskFacts.verifier_proven`` false: dropped
with its cause, not scored 0); a verifier timeout on it is dropped by rule 3, as nothing shows that an
honest run passes in time. The do-nothing run's report format still says whether the verifier writes a
per-assertion report (``TaskRecord.per_assertion_report``).

What stays open: without a validation record, a task whose ``test.sh`` names a host but whose verifier
would still produce a report offline (every package it fetches already present) is blamed on the
environment when the agent breaks its report in a sandbox without network, so that trial is dropped rather
than scored 0; likewise a verifier that wrote nothing at all (no file, no pytest session) is dropped,
which an agent that breaks what ``test.sh`` needs before pytest starts could choose. A validation record
of the pool closes both (rule 1 decides; ``t1_reward.TaskFacts.verifier_proven``).

``judge_run`` attributes the failure and scores the run by ``t1_reward.score_output``, the one scoring rule
(``t1_reward.judge``'s policy), which ``t1 eval`` and ``t1 reward`` apply too.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Protocol

from t1_reward import Report, TaskFacts, Verdict, score_output
from t1_rollout.verify import VerifierRun
from t1_spec import RewardSpec
from t1_tasks.assertions import defined_tests, known_assertion_count
from t1_tasks.validation import TaskRecord
from t1_tasks.verifier_needs import read_verifier_needs

__all__ = [
    "declares_per_assertion",
    "environment_cause",
    "expects_per_assertion",
    "judge_run",
    "network_cause",
    "task_facts",
    "task_timeout_cause",
    "verifier_hosts",
]

#: What in ``test.sh`` asks pytest for a per-assertion report (pytest-json-ctrf, JUnit XML).
PER_ASSERTION_FLAGS = ("--ctrf", "--junitxml", "--junit-xml")

_URL_HOST = re.compile(r"\b(?:https?|ftp)://([A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)")
_PACKAGE_INDEX = (
    (re.compile(r"\bapt(?:-get)?\s+(?:-\S+\s+)*(?:install|update)\b"), "the distribution's package archive"),
    (re.compile(r"\bpip3?\s+install\b"), "PyPI"),
)


class _TaskLike(Protocol):
    id: str
    tests_dir: Path


class _JudgedTask(_TaskLike, Protocol):
    n_assertions: int | None


def _test_sh(task: _TaskLike) -> str:
    try:
        return (Path(task.tests_dir) / "test.sh").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def verifier_hosts(task: _TaskLike) -> tuple[str, ...]:
    """The network hosts that the task's ``tests/test.sh`` fetches from, in order of first mention.

    Read statically from the held-out script: the hosts of its ``http(s)://`` and ``ftp://`` URLs, then
    the package index that ``apt-get install`` or ``pip install`` needs (named in words, as the host
    depends on the image's configuration).
    """
    text = _test_sh(task)
    hosts = list(dict.fromkeys(m.group(1).lower() for m in _URL_HOST.finditer(text)))
    hosts += [name for pattern, name in _PACKAGE_INDEX if pattern.search(text)]
    return tuple(hosts)


def network_cause(task: _TaskLike, network: bool | None) -> str | None:
    """``"verifier could not reach HOST ..."`` when the sandbox has no network and ``test.sh`` names a host.

    Args:
        task: the task (its ``tests/test.sh`` is read).
        network: the sandbox's network policy (``VerifierRun.network``); only ``False`` blames the network.

    Returns:
        The cause, or None when the sandbox may reach the network, its policy is unknown, or the script
        names no host.
    """
    if network is not False:
        return None
    hosts = verifier_hosts(task)
    if not hosts:
        return None
    more = f" (and {', '.join(hosts[1:3])})" if len(hosts) > 1 else ""
    return (
        f"verifier could not reach {hosts[0]}{more}: the sandbox has no network (sandbox.network is false) "
        "and the task's tests/test.sh fetches from it; allow the network or provide what it fetches"
    )


def declares_per_assertion(task: _TaskLike) -> bool:
    """The task's ``tests/test.sh`` asks pytest for a per-assertion report (``--ctrf``, ``--junitxml``)."""
    text = _test_sh(task)
    return any(flag in text for flag in PER_ASSERTION_FLAGS)


def expects_per_assertion(task: _TaskLike, validated: TaskRecord | None) -> bool:
    """Whether the task's verifier writes a per-assertion report, so that a run without one has no verdict.

    The validation record decides when it says (``TaskRecord.per_assertion_report``: the oracle's run wrote
    one, or ``test.sh`` asks for one); an older record without that field decides by its oracle's report;
    otherwise the task's ``tests/test.sh`` asking pytest for one (``--ctrf``, ``--junitxml``) does.
    """
    if validated is not None and validated.per_assertion_report is not None:
        return validated.per_assertion_report
    if validated is not None and validated.oracle_reported:
        return True
    return declares_per_assertion(task)


def _same_policy(validated: TaskRecord, network: bool | None) -> bool:
    recorded = validated.oracle.network if validated.oracle is not None else None
    return recorded is None or network is None or recorded == network


def environment_cause(run: VerifierRun, task: _TaskLike, validated: TaskRecord | None) -> str | None:
    """Why the environment, not the agent, kept ``run`` from producing a verdict, from T1's facts only.

    The rules of the module docstring: the validation record's oracle run under the same network policy
    decides when it ran its verifier; otherwise the sandbox's network policy and the hosts of ``test.sh``.
    Nothing the run printed is read. `t1_reward.judge` uses the cause only when the run left no usable
    per-assertion report.

    Args:
        run: from ``t1_rollout.verify.run_verifier``.
        task: the task (``tests_dir``).
        validated: the task's row of the pool's validation record, or None.

    Returns:
        One line naming the cause, or None when T1's facts do not blame the environment.
    """
    reached = network_cause(task, run.network)
    if (
        validated is not None
        and validated.oracle_reported is not None
        and _same_policy(validated, run.network)
    ):
        if validated.oracle_reported or not expects_per_assertion(task, validated):
            return None  # the oracle got its report here, or the task writes none: not the environment
        oracle = validated.oracle
        assert oracle is not None
        why = (oracle.error or "no per-assertion report").strip()
        why = why if len(why) <= 300 else why[:300] + "..."
        seen = (
            "the task's verifier gave no per-assertion report for its reference solution either when "
            f"validated on this machine ({why})"
        )
        return f"{reached}; {seen}" if reached else seen
    return reached


def task_timeout_cause(run: VerifierRun, validated: TaskRecord | None) -> str | None:
    """Why a verifier timeout is the task's, not the agent's, from the validation record; None otherwise.

    A task whose own verifier hangs times out whatever the agent does: when the record shows the
    reference solution's verifier timing out too, or the task failing validation, a timeout of ``run`` is
    a task defect (dropped with this cause by ``t1_reward.judge``'s rule 3), never the agent's 0.

    Args:
        run: from ``t1_rollout.verify.run_verifier``.
        validated: the task's row of the pool's validation record, or None (then a timeout stays the
            agent's doing: the verifier's deadline bounds an honest run).

    Returns:
        One line naming the cause, or None.
    """
    if not run.timed_out or validated is None:
        return None
    oracle = validated.oracle
    if oracle is not None and oracle.error is not None and oracle.verifier_timed_out:
        why = oracle.error if len(oracle.error) <= 300 else oracle.error[:300] + "..."
        return (
            f"verifier timed out, as the task's verifier did for its reference solution at validation ({why})"
        )
    if validated.verdict != "ok":  # an unproven task (no solution/) too: nothing shows it can pass in time
        problems = "; ".join(validated.problems)[:300] or "no cause recorded"
        what = "was not proven solvable" if validated.verdict == "unproven" else "failed validation"
        return f"verifier timed out on a task that {what} ({validated.verdict}: {problems})"
    return None


def task_facts(task: _JudgedTask, validated: TaskRecord | None, network: bool | None) -> TaskFacts:
    """What T1 knows of ``task`` for scoring (``t1_reward.TaskFacts``): counts, test names, report, record.

    Reads the task's ``tests/*.py`` and what its ``tests/test.sh`` installs (the held-out bundle on the
    host, never the sandbox's copy).
    """
    tests_dir = Path(task.tests_dir)
    files = {
        str(p.relative_to(tests_dir)): p.read_text(encoding="utf-8", errors="replace")
        for p in sorted(tests_dir.rglob("*.py"))
        if p.is_file()
    }
    try:
        names = defined_tests(files)
    except SyntaxError:  # the verifier's own files do not parse: nothing to hold the names to
        names = None
    proven = validated is not None and bool(validated.oracle_reported) and _same_policy(validated, network)
    return TaskFacts(
        known_assertions=known_assertion_count(task.n_assertions, validated),
        observed_assertions=validated.observed_assertions if validated is not None else None,
        known_tests=names,
        expects_per_assertion=expects_per_assertion(task, validated),
        verifier_proven=proven,
        test_dependencies=read_verifier_needs(tests_dir).import_names,
    )


async def judge_run(
    run: VerifierRun, task: _JudgedTask, reward_spec: RewardSpec, *, validated: TaskRecord | None = None
) -> tuple[Report, Verdict]:
    """Read a verifier run's report, check it, attribute its failure, and score it by ``t1_reward.judge``.

    The one scoring rule, ``t1_reward.score_output``, applied with the task's facts (`task_facts`: the
    known assertion count, the test names of its ``tests/*.py``, whether it writes a per-assertion report,
    the validation record) and the run's (timeout, signal, infrastructure failure, its own evidence:
    report changed, tests changed). The report is held to the task's known count, its test names and
    pytest's closing line in the captured output; with a validation record, assertions the report left
    out are added as failed and the returned report is that one. A run without a usable per-assertion
    report is attributed by `environment_cause`; a timeout by `task_timeout_cause` first. The files are
    read in a worker thread (a report may be megabytes; the event loop serves other trials).

    Args:
        run: from ``t1_rollout.verify.run_verifier``.
        task: the task (``id``, ``tests_dir``, ``n_assertions``).
        reward_spec: the recipe's reward section.
        validated: the task's row of a validation record accepted for the pool, or None.

    Returns:
        ``(report, verdict)``.
    """
    cause = None
    if run.error is None:
        cause = task_timeout_cause(run, validated) or await asyncio.to_thread(
            environment_cause, run, task, validated
        )
    facts = await asyncio.to_thread(task_facts, task, validated, run.network)
    return await asyncio.to_thread(
        score_output,
        run.out_dir,
        reward_spec,
        facts=facts,
        timed_out=run.timed_out,
        crashed=run.crashed,
        infrastructure_error=run.error,
        run_evidence=run.evidence,
        sabotage=run.sabotage,
        environment_cause=cause,
    )
