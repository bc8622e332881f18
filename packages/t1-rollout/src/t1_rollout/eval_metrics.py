"""Evaluation metrics: resolved rate, mean dense reward, pass@k, turns and tokens, by category and difficulty.

Pure functions over `EvalTrial` rows (T1 §6). A trial that failed for an infrastructure reason (sandbox,
engine, verifier without any outcome) is counted apart with its cause and enters no denominator: it is not
the policy's 0 (T1 §7.4).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["EvalTrial", "pass_at_k", "summarize"]

TrialOutcome = Literal["finished", "failed"]


@dataclass(frozen=True)
class EvalTrial:
    """One evaluation attempt of one task.

    Attributes:
        task_id: the task.
        category: ``[metadata].category`` of the task.
        difficulty: ``[metadata].difficulty`` of the task.
        attempt: index of the attempt, ``0 .. attempts - 1``.
        status: ``finished`` (the verifier gave an outcome) or ``failed`` (infrastructure, with ``cause``).
        cause: ``<stage>: <message>`` for a failed trial, else None.
        resolved: every assertion passed (or, without a per-assertion report, the binary outcome is 1).
        reward: the recipe's reward of the trial (`t1_reward.compute_reward`); None when failed.
        passed: assertions passed (P); None without a per-assertion report.
        total: assertions reported (T); None without a per-assertion report.
        turns: agent turns sampled (0 for the oracle and do-nothing policies).
        tokens: tokens of the final context, prompt plus the last answer (tokens; 0 without a model).
        wall_s: wall seconds of the trial.
    """

    task_id: str
    category: str
    difficulty: str
    attempt: int
    status: TrialOutcome
    cause: str | None
    resolved: bool
    reward: float | None
    passed: int | None
    total: int | None
    turns: int
    tokens: int
    wall_s: float

    def to_json(self) -> dict[str, Any]:
        """The trial as JSON-ready data (str, int, float, bool, None)."""
        return dict(self.__dict__)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator of one task: ``1 - C(n - c, k) / C(n, k)`` (Chen et al. 2021, Eq. 1).

    The probability that at least one of ``k`` attempts drawn without replacement from ``n`` attempts, ``c``
    of which resolved the task, resolved it.

    Args:
        n: attempts made (>= 1).
        c: attempts that resolved the task (0 <= c <= n).
        k: attempts drawn (1 <= k <= n).

    Returns:
        pass@k in [0, 1] (a probability).

    Raises:
        ValueError: ``n``, ``c`` or ``k`` out of range.
    """
    if not (n >= 1 and 0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs n >= 1, 0 <= c <= n, 1 <= k <= n; got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _group(trials: Sequence[EvalTrial], attempts: int) -> dict[str, Any]:
    """The figures of one group of trials (a pool, a category or a difficulty)."""
    done = [t for t in trials if t.status == "finished"]
    failed = [t for t in trials if t.status == "failed"]
    by_task: dict[str, list[EvalTrial]] = defaultdict(list)
    for t in done:
        by_task[t.task_id].append(t)
    pass_k: dict[int, float | None] = {}
    for k in range(1, attempts + 1):
        # A task enters pass@k once it has k finished attempts; failed attempts are not draws.
        values = [
            pass_at_k(len(ts), sum(t.resolved for t in ts), k) for ts in by_task.values() if len(ts) >= k
        ]
        pass_k[k] = _mean(values)
    return {
        "tasks": len({t.task_id for t in trials}),
        "trials": len(done),
        "failed": len(failed),
        "resolved": sum(t.resolved for t in done),
        "resolved_rate": _mean([float(t.resolved) for t in done]),
        "mean_reward": _mean([t.reward for t in done if t.reward is not None]),
        "pass_at_k": pass_k,
        "turns_mean": _mean([float(t.turns) for t in done]),
        "tokens_mean": _mean([float(t.tokens) for t in done]),
        # grouped by stage (``solution``, ``verifier``, ``sandbox``, ...): each trial keeps its whole cause
        "failed_causes": dict(Counter((t.cause or "unknown").split(":", 1)[0] for t in failed).most_common()),
    }


def summarize(trials: Iterable[EvalTrial], attempts: int) -> dict[str, Any]:
    """Every figure of an evaluation: overall, per category and per difficulty (T1 §6).

    Over finished trials only: ``resolved_rate`` (resolved / finished trials, averaging the attempts),
    ``mean_reward`` (mean of the recipe's reward), ``pass_at_k`` (``{k: mean over tasks of pass_at_k}`` for
    ``k = 1 .. attempts``, each over the tasks with at least ``k`` finished attempts; None when none has),
    ``turns_mean`` and ``tokens_mean``. ``failed`` counts the infrastructure failures apart and
    ``failed_causes`` gives them by cause. A mean over nothing is None, not 0.

    Args:
        trials: every attempt of every task.
        attempts: attempts per task (``evaluation.attempts``), the largest k.

    Returns:
        JSON-ready data: the overall figures plus ``per_category`` and ``per_difficulty``, each a dict of
        name -> the same figures.
    """
    rows = list(trials)
    out = _group(rows, attempts)
    for key, attr in (("per_category", "category"), ("per_difficulty", "difficulty")):
        groups: dict[str, list[EvalTrial]] = defaultdict(list)
        for t in rows:
            groups[getattr(t, attr)].append(t)
        out[key] = {name: _group(groups[name], attempts) for name in sorted(groups)}
    return out
