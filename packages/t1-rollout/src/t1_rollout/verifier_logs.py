"""A verifier's output folder as a user debugging a task sees it: outcomes, P, T, b, the reward per kind.

Behind ``t1 reward``. It scores the folder by ``t1_reward.score_output``, the one scoring rule that training
and ``t1 eval`` apply (``t1_reward.judge``'s policy: tamper evidence against pytest's closing line in the
folder's ``test-stdout.txt``, the binary fallback, a verifier that wrote nothing), under each reward kind
(``dense``: P / S, T1 §5.2, Eq. 20; ``ratio``: max(b, c P / T) clamped, T1 §5.3; ``binary``: b). Given the
task bundle, it knows what training knows without a validation record (its test names, its assertion
count, whether its ``test.sh`` asks for a per-assertion report), so the two agree; without it, a
per-assertion file that is present but unusable is what says the verifier writes one.
"""

from __future__ import annotations

from pathlib import Path

from t1_reward import TaskFacts, score_output
from t1_spec import BinaryRewardSpec, DenseRewardSpec, RatioRewardSpec

__all__ = ["REWARD_KINDS", "check_verifier_dir", "summarize_verifier_dir"]

#: The reward kinds of the recipe's ``reward.kind`` (``t1_spec.RewardSpec``).
REWARD_KINDS = ("dense", "ratio", "binary")


def check_verifier_dir(path: Path) -> None:
    """Refuse a folder that cannot hold verifier output, naming it.

    Raises:
        FileNotFoundError: it does not exist.
        ValueError: it is not a folder, or it is empty.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"verifier logs folder {path} does not exist")
    if not path.is_dir():
        raise ValueError(f"{path} is not a folder: give the folder the verifier wrote (its /logs/verifier)")
    if not any(path.iterdir()):
        raise ValueError(
            f"verifier logs folder {path} is empty: the verifier wrote nothing "
            "(expected ctrf.json, JUnit *.xml, reward.json or reward.txt)"
        )


def summarize_verifier_dir(
    verifier_dir: Path,
    *,
    scale: int = DenseRewardSpec.model_fields["scale"].default,
    kind: str = "dense",
    task_dir: Path | None = None,
) -> dict[str, object]:
    """What a verifier left in ``verifier_dir`` and the reward under each kind, as one JSON-ready object.

    Args:
        verifier_dir: the folder (checked with `check_verifier_dir`).
        scale: S of the dense reward, assertions (>= 1; the spec's default 20, T1 §5.2).
        kind: the kind whose reward is reported at the top level: ``dense``, ``ratio`` or ``binary``.
        task_dir: the task bundle the folder came from (``t1_tasks.load_task``), or None: its facts
            (``t1_rollout.attribution.task_facts``, without a validation record) are then used as training
            uses them.

    Returns:
        ``passed`` (P), ``total`` (T), ``reward`` and ``kind`` (for ``kind``: ``dense``, ``ratio``,
        ``binary``, ``binary_fallback``, ``tampered``, ``unverifiable``, ``no_verdict`` or ``none`` with a
        null reward), ``status`` (``finished``, or ``failed``: training would drop the trial), ``cause``
        (why, or None), ``evidence`` (the checks that refused the report), ``reward_kind``, ``scale``,
        ``binary`` (b), ``fallback`` (the cause or None), ``source``, ``duplicates``, ``collapsed``,
        ``detail``, ``rewards`` (``{kind: {"reward", "kind"}}`` for all three kinds) and ``outcomes``
        (name, status, cases, entries, message per assertion).

    Raises:
        FileNotFoundError, ValueError: as `check_verifier_dir`; ValueError also for an unknown ``kind``, a
            ``scale`` below 1 (pydantic's ``ValidationError`` is a ``ValueError``), or a task bundle that
            does not load (``t1_tasks.TaskError`` is one).
    """
    if kind not in REWARD_KINDS:
        raise ValueError(f"reward kind {kind!r} is not one of {', '.join(REWARD_KINDS)}")
    check_verifier_dir(verifier_dir)
    facts = TaskFacts()
    if task_dir is not None:
        from t1_rollout.attribution import task_facts
        from t1_tasks import load_task

        facts = task_facts(load_task(task_dir), None, None)
    specs = {"dense": DenseRewardSpec(scale=scale), "ratio": RatioRewardSpec(), "binary": BinaryRewardSpec()}
    rewards: dict[str, dict[str, object]] = {}
    verdicts = {}
    for name, spec in specs.items():
        report, verdict = score_output(Path(verifier_dir), spec, facts=facts)
        verdicts[name] = verdict
        rewards[name] = {"reward": verdict.reward.value, "kind": verdict.reward.kind}
    verdict = verdicts[kind]
    return {
        "passed": report.passed,
        "total": report.total,
        "reward": rewards[kind]["reward"],
        "kind": rewards[kind]["kind"],
        "status": verdict.status,
        "cause": verdict.cause,
        "evidence": [e.to_json() for e in verdict.evidence],
        "reward_kind": kind,
        "scale": scale,
        "binary": report.binary,
        "fallback": report.fallback.value if report.fallback is not None else None,
        "source": report.source,
        "duplicates": report.duplicates,
        "collapsed": report.collapsed,
        "detail": report.detail,
        "rewards": rewards,
        "outcomes": [
            {
                "name": o.name,
                "status": o.status.value,
                "cases": o.cases,
                "entries": o.entries,
                "message": o.message,
            }
            for o in report.outcomes
        ],
    }
