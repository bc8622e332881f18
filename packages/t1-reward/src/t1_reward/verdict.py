"""The scoring policy of a verifier run, in one place: scored, scored 0, or dropped (T1 §5.2, §7.4, §10).

An RL run optimizes whatever the reward measures, so every way out of an honest grade must score no better
than the grade. `judge` applies these rules, in this order, and nothing else in T1 decides them:

1. **Infrastructure failure: dropped.** A T1-side call failed (the upload of the tests, the launch of
   ``test.sh``, the download of its report; the sandbox was lost): the trial is ``failed`` and never scored,
   as the paper does (T1 §5.2, §7.4: an infrastructure failure is not the agent's 0).
2. **Tampered or unverifiable: 0, trained on.** Any tamper evidence (`t1_reward.integrity.check_report`: more
   assertions than the task has, unknown test names, pytest's own counts disagreeing; ``t1_rollout.verify``:
   the report changed after the verifier exited, the tests changed): the trial is ``finished`` with reward 0,
   tagged tampered with its evidence, and trained on, so forgery never pays. A report that cannot be verified
   because a cut in the captured output hid pytest's closing line (the only evidence is in
   `UNVERIFIABLE_CHECKS`) is scored the same way, with kind ``unverifiable``: the report is not trusted alone,
   and only output the run printed after pytest closed can cause the cut, so the trial is not dropped (a drop
   would let the agent pick which of its failures leave the batch).
3. **A verifier that the environment kept from running, or that wrote nothing: dropped.** The run left no
   usable per-assertion report and T1's own facts blame the environment (``t1_rollout.attribution``: the
   task's reference solution got no report on this machine either, by the validation record; or, without a
   record, the sandbox has no network and the task's ``test.sh`` fetches from a host): the trial is ``failed``
   with that cause (``verifier could not reach astral.sh ...``), never the agent's 0, even when ``test.sh``
   wrote ``reward.txt = 0``. Nothing the run printed is read, so a planted ``curl`` that prints a DNS error
   changes nothing. So is a task whose own verifier hangs (its reference solution's verifier timed out at
   validation too, or the task failed validation): its timeout is the task's. So is a verifier that wrote
   nothing at all (``silent``: no report file, no test session in its output, and no validation record showing
   that the verifier writes a report on this machine): T1 cannot tell whose failure it is, and it is never the
   agent's 0. So is a verifier that ran no test through no fault of the agent (``not_run``,
   `t1_reward.no_run`: no pytest session at all, or a dependency that ``test.sh`` installs missing before
   any test ran, by the verifier's import guard), for a task that asks pytest for a per-assertion report
   and has no validation record proving its verifier runs here: a reward file of 0 is then ignored.
4. **Agent-caused verifier failure: 0, trained on.** A verifier timeout, a ``test.sh`` ended by a signal, a
   ``test.sh`` that exited without any usable report, or one that left no usable per-assertion report although
   the task's verifier writes one (its validation record says so, or its ``test.sh`` asks for one) and no
   reward file above 0 (rule 5), in a sandbox that stayed healthy: the task's own oracle produced a report at
   validation, so the failure is the agent's doing (it killed pytest, slept past the deadline, exhausted the
   sandbox, made the report unwritable). So is a T1-side step after ``test.sh`` that failed while the sandbox
   still answered (the agent filled the disk the output is staged on). The trial is ``finished`` with reward 0
   and its fallback cause kept; a ``reward.json`` or ``reward.txt`` that the run left is ignored (it may be
   the agent's own), so sabotage never pays either.
5. **Binary fallback of a task that writes a per-assertion report.** A ``test.sh`` that exited normally
   without a usable per-assertion report, for a task known to write one, and a reward file above 0: the binary
   outcome is the fallback (T1 §5.2: a solved task never scores 0), tagged with the report's fallback cause.
   Under the dense reward it never pays more than pytest's closing line supports (``closing_passed`` / S, the
   dense reward of the report that is missing), so breaking the report of a solved task does not turn P / S
   into 1. A reward file of 0, or none, is rule 4's 0.
6. **Otherwise** `compute_reward`: dense P/S by default (T1 §5.2, Eq. 20), with the binary fallback when a
   ``test.sh`` that exited normally left no usable per-assertion report but a reward file, for a task not
   known to write a per-assertion report (T1 §5.2's fallback: a solved task never scores 0).

P is bounded by the task's known assertion count: a report that names more assertions than that is
refused by rule 2, so a scored report has P <= T <= the known count. A task known to write a per-assertion
report scores its reward file only as rule 5 says: above 0, checked against pytest's closing line (rule 2)
and capped by it.

`t1_reward.scoring.score_output` is the one way to apply this policy to a verifier's output folder: training
(``t1_rollout.attribution.judge_run``), ``t1 eval`` and ``t1 reward`` all call it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from t1_reward.integrity import UNVERIFIABLE_CHECKS, TamperEvidence
from t1_reward.outcomes import FallbackCause, Report
from t1_reward.reward import RewardResult, compute_reward, dense_reward
from t1_spec import DenseRewardSpec, RewardSpec

__all__ = ["Verdict", "judge"]


@dataclass(frozen=True)
class Verdict:
    """How one trial's verifier run is scored.

    Attributes:
        status: ``finished`` (the reward is trained on) or ``failed`` (dropped: an infrastructure failure).
        reward: the reward with its provenance: ``kind`` is ``"tampered"`` or ``"unverifiable"`` (rule 2),
            ``"no_verdict"`` (rule 4), ``"binary_fallback"`` (rule 5) or what `compute_reward` applied;
            ``value`` is None only when ``status`` is ``failed``.
        evidence: why the report was refused (empty unless rule 2 applied).
        cause: one line for the record: the infrastructure failure (``failed``), why a finished trial
            scored 0 by rule 2 or 4, or the fallback cause of rule 5; None for a normally scored trial.
    """

    status: Literal["finished", "failed"]
    reward: RewardResult
    evidence: tuple[TamperEvidence, ...] = ()
    cause: str | None = None

    @property
    def tampered(self) -> bool:
        """The report was refused as not the task's own verdict (rule 2)."""
        return bool(self.evidence)


def judge(
    report: Report,
    spec: RewardSpec,
    *,
    infrastructure_error: str | None = None,
    evidence: tuple[TamperEvidence, ...] = (),
    expects_per_assertion: bool = False,
    sabotage: str | None = None,
    environment_cause: str | None = None,
    closing_passed: int | None = None,
    silent: str | None = None,
    not_run: str | None = None,
) -> Verdict:
    """Score one verifier run under the policy of the module docstring (the one place it is decided).

    Args:
        report: from ``t1_reward.read_report``, read with the run's ``timed_out`` and ``crashed`` (a
            ``test.sh`` ended by a signal, or an infrastructure failure) flags.
        spec: the recipe's reward section (dense, ratio or binary).
        infrastructure_error: why a T1-side call of the verifier run failed, or None when every call worked
            (the sandbox stayed healthy).
        evidence: tamper evidence from ``t1_reward.check_report`` and the sandbox-side checks.
        expects_per_assertion: the task's verifier writes a per-assertion report (its validation record
            says so, or its ``test.sh`` asks pytest for one): a missing or unparsable one then falls under
            rule 3 or 4, and a reward file alone is not trusted (the program under test can write one and
            make the report unwritable).
        sabotage: why T1 could not collect the verifier's output although the sandbox stayed healthy after
            ``test.sh`` (e.g. the disk the agent filled): rule 4, never a dropped trial.
        environment_cause: why T1's own facts blame the environment for a verifier that produced no
            verdict (``t1_rollout.attribution.environment_cause``), or None: rule 3 when the report holds no
            usable per-assertion outcomes.
        closing_passed: the passed count of pytest's closing line in the captured output, or None when
            there is none: the cap of rule 5 under the dense reward.
        silent: why the verifier counts as having written nothing at all (rule 3), or None.
        not_run: why the verifier ran no test through no fault of the agent (rule 3,
            ``t1_reward.no_run.no_run_cause``), or None.

    Returns:
        The `Verdict`.

    Raises:
        ValueError: as `compute_reward` (an unknown reward spec, a hand-built binary outside [0, 1]).
    """
    result = compute_reward(report, spec)

    def zero(kind: str) -> RewardResult:
        return RewardResult(0.0, 0, 0, None, report.fallback, kind, result.duplicates)

    if infrastructure_error is not None:
        none = RewardResult(None, 0, result.total, report.binary, report.fallback, "none", result.duplicates)
        return Verdict("failed", none, cause=f"verifier: {infrastructure_error}")
    if evidence:
        checks = ", ".join(dict.fromkeys(e.check for e in evidence))
        if all(e.check in UNVERIFIABLE_CHECKS for e in evidence):
            cause = (
                f"verifier: report not trusted alone ({checks}): {evidence[0].detail}; scored 0: the output "
                "after pytest's closing line came from the run"
            )
            return Verdict("finished", zero("unverifiable"), evidence=tuple(evidence), cause=cause)
        cause = f"verifier: report refused as tampered ({checks}): {evidence[0].detail}"
        return Verdict("finished", zero("tampered"), evidence=tuple(evidence), cause=cause)
    if environment_cause is not None and report.fallback is not None:
        none = RewardResult(None, 0, result.total, report.binary, report.fallback, "none", result.duplicates)
        ignored = f"; its {report.source} is ignored" if report.binary is not None else ""
        return Verdict("failed", none, cause=f"verifier: {environment_cause}{ignored}")
    if silent is not None and report.fallback is FallbackCause.MISSING and report.binary is None:
        none = RewardResult(None, 0, 0, None, report.fallback, "none", result.duplicates)
        return Verdict("failed", none, cause=f"verifier: {silent}")
    if not_run is not None and (report.fallback is not None or report.total == 0):
        none = RewardResult(None, 0, result.total, report.binary, report.fallback, "none", result.duplicates)
        return Verdict("failed", none, cause=f"verifier: {not_run}")
    agent_failure = report.fallback in (FallbackCause.VERIFIER_TIMEOUT, FallbackCause.VERIFIER_CRASH)
    # a task known to write a per-assertion report wrote none: a reward file alone is not its verdict
    missing_report = expects_per_assertion and report.fallback in (
        FallbackCause.MISSING,
        FallbackCause.UNPARSABLE,
    )
    if missing_report and sabotage is None and result.value is not None and result.value > 0:
        value = result.value  # rule 5: the binary fallback, capped by pytest's closing line under dense
        capped = ""
        if isinstance(spec, DenseRewardSpec) and closing_passed is not None:
            cap = dense_reward(closing_passed, spec.scale)
            if cap < value:
                value, capped = cap, f", capped at pytest's {closing_passed} passed / S = {cap:g}"
        fallback = RewardResult(value, 0, 0, report.binary, report.fallback, "binary_fallback", 0)
        assert report.fallback is not None
        cause = (
            f"verifier: {report.fallback.value} per-assertion report although the task's verifier writes "
            f"one; binary fallback b = {report.binary:g} from {report.source} (T1 §5.2){capped}"
        )
        return Verdict("finished", fallback, cause=cause)
    if agent_failure or missing_report or sabotage is not None or result.value is None:
        why = report.fallback.value if report.fallback is not None else "no outcome"
        if sabotage is not None:
            why = sabotage
        elif missing_report:
            why = (
                f"verifier failure: {why} per-assertion report (the task's verifier writes one; its reward"
                " file is ignored)"
            )
        detail = f" ({report.detail})" if report.detail else ""
        cause = f"verifier: {why}{detail}; scored 0: the sandbox stayed healthy, so this is the agent's doing"
        return Verdict("finished", zero("no_verdict"), cause=cause)
    return Verdict("finished", result)
