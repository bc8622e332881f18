"""A verifier's output folder as a user debugging a task sees it: outcomes, P, T, b, the reward per kind.

Behind ``t1 reward``. It reads the folder with ``t1_reward.read_report`` and applies
``t1_reward.compute_reward`` under each reward kind (``dense``: P / S, T1 §5.2, Eq. 20; ``ratio``:
max(b, c P / T) clamped, T1 §5.3; ``binary``: b). The task-level scoring policy (``t1_reward.judge``: tamper
evidence, the validation record, the attribution of a verifier that ran no test) needs the task and its run,
so it is not applied here.
"""

from __future__ import annotations

from pathlib import Path

from t1_reward import compute_reward, read_report
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
    verifier_dir: Path, *, scale: int = DenseRewardSpec.model_fields["scale"].default, kind: str = "dense"
) -> dict[str, object]:
    """What a verifier left in ``verifier_dir`` and the reward under each kind, as one JSON-ready object.

    Args:
        verifier_dir: the folder (checked with `check_verifier_dir`).
        scale: S of the dense reward, assertions (>= 1; the spec's default 20, T1 §5.2).
        kind: the kind whose reward is reported at the top level: ``dense``, ``ratio`` or ``binary``.

    Returns:
        ``passed`` (P), ``total`` (T), ``reward`` and ``kind`` (for ``kind``: the formula applied,
        ``dense``, ``ratio``, ``binary``, ``binary_fallback`` or ``none`` with a null reward),
        ``reward_kind``, ``scale``, ``binary`` (b), ``fallback`` (the cause or None), ``source``,
        ``duplicates``, ``collapsed``, ``detail``, ``rewards`` (``{kind: {"reward", "kind"}}`` for all
        three kinds) and ``outcomes`` (name, status, cases, entries, message per assertion).

    Raises:
        FileNotFoundError, ValueError: as `check_verifier_dir`; ValueError also for an unknown ``kind`` or
            a ``scale`` below 1 (pydantic's ``ValidationError`` is a ``ValueError``).
    """
    if kind not in REWARD_KINDS:
        raise ValueError(f"reward kind {kind!r} is not one of {', '.join(REWARD_KINDS)}")
    check_verifier_dir(verifier_dir)
    report = read_report(Path(verifier_dir))
    specs = {"dense": DenseRewardSpec(scale=scale), "ratio": RatioRewardSpec(), "binary": BinaryRewardSpec()}
    rewards: dict[str, dict[str, object]] = {}
    for name, spec in specs.items():
        result = compute_reward(report, spec)
        rewards[name] = {"reward": result.value, "kind": result.kind}
    return {
        "passed": report.passed,
        "total": report.total,
        "reward": rewards[kind]["reward"],
        "kind": rewards[kind]["kind"],
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
