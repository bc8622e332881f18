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
   reach it.

What stays open: without a validation record, a task whose ``test.sh`` names a host but whose verifier
would still produce a report offline (every package it fetches already present) is blamed on the
environment when the agent breaks its report in a sandbox without network, so that trial is dropped rather
than scored 0. A validation record of the pool closes this (rule 1 decides).

``judge_run`` reads the report, collects the tamper evidence, attributes the failure and hands everything to
``t1_reward.judge``, the one scoring policy.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Protocol

from t1_reward import Report, TamperEvidence, Verdict, check_report, judge, missing_as_failed, read_report
from t1_rollout.verify import CAPTURED_LOG, VerifierRun
from t1_spec import RewardSpec
from t1_tasks.assertions import defined_tests, known_assertion_count
from t1_tasks.validation import TaskRecord

__all__ = [
    "declares_per_assertion",
    "environment_cause",
    "expects_per_assertion",
    "judge_run",
    "network_cause",
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


def _report_evidence(
    report: Report, task: _JudgedTask, validated: TaskRecord | None, out_dir: Path
) -> tuple[TamperEvidence, ...]:
    """`t1_reward.check_report` against the task's known count, its test names and the captured output."""
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
    log = out_dir / CAPTURED_LOG
    stdout = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else None
    known = known_assertion_count(task.n_assertions, validated)
    return check_report(report, known_assertions=known, known_tests=names, stdout=stdout)


async def judge_run(
    run: VerifierRun, task: _JudgedTask, reward_spec: RewardSpec, *, validated: TaskRecord | None = None
) -> tuple[Report, Verdict]:
    """Read a verifier run's report, check it, attribute its failure, and score it by ``t1_reward.judge``.

    The files are read in a worker thread (a report may be megabytes; the event loop serves other trials).
    The report is held to the task's known assertion count (``validated``'s observed count, else the static
    ``task.n_assertions``), to the test names its ``tests/*.py`` define and to pytest's closing line in the
    captured output (``t1_reward.check_report``); the run's own evidence (report changed, tests changed) is
    added. With a validation record, assertions the report left out are added as failed
    (``t1_reward.missing_as_failed``), and the returned report is that one. A run without a usable
    per-assertion report is attributed by `environment_cause`.

    Args:
        run: from ``t1_rollout.verify.run_verifier``.
        task: the task (``id``, ``tests_dir``, ``n_assertions``).
        reward_spec: the recipe's reward section.
        validated: the task's row of a validation record accepted for the pool, or None.

    Returns:
        ``(report, verdict)``.
    """
    report = await asyncio.to_thread(read_report, run.out_dir, timed_out=run.timed_out, crashed=run.crashed)
    evidence = run.evidence
    if run.error is None:
        evidence += await asyncio.to_thread(_report_evidence, report, task, validated, run.out_dir)
        # assertions the report left out count as failed (deleting failing entries must not pay)
        padded = missing_as_failed(report, validated.observed_assertions if validated is not None else None)
        if padded is not report:
            report = padded
            if not any(e.check == "binary_contradicts_report" for e in evidence):
                evidence += check_report(report)  # a reward file saying "solved" now contradicts it
    cause = await asyncio.to_thread(environment_cause, run, task, validated) if run.error is None else None
    return report, judge(
        report,
        reward_spec,
        infrastructure_error=run.error,
        evidence=evidence,
        expects_per_assertion=expects_per_assertion(task, validated),
        sabotage=run.sabotage,
        environment_cause=cause,
    )
