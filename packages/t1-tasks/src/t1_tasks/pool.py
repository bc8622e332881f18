"""Task pools: a list of bundles, a seeded per-epoch permutation, and statistics.

Source: T1 §3 (pools are stored in quality-rank order, so every epoch visits them in a seeded permutation).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from t1_tasks.task import Task, TaskError, load_task

__all__ = ["Pool", "PoolStatistics", "load_pool", "BUILTIN_POOLS"]

BUILTIN_POOLS = ("mini",)


@dataclass(frozen=True)
class PoolStatistics:
    """Summary of a pool.

    Attributes:
        n_tasks: number of tasks.
        categories: tasks per ``[metadata].category``.
        difficulties: tasks per ``[metadata].difficulty``.
        assertions_total: sum of assertion counts.
        assertion_percentiles: assertion count at the 10th, 50th, 90th percentile and the max (linear
            interpolation between order statistics, numpy's default); T1 §5.2 sets S = 20 near p90 of the
            production pool.
    """

    n_tasks: int
    categories: dict[str, int]
    difficulties: dict[str, int]
    assertions_total: int
    assertion_percentiles: dict[str, float]


@dataclass(frozen=True)
class Pool:
    """An ordered collection of tasks (stored order = quality rank, T1 §3).

    Attributes:
        source: where it was loaded from (``builtin:mini`` or a directory).
        tasks: the tasks in stored order.
    """

    source: str
    tasks: tuple[Task, ...]

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self):  # noqa: D105
        return iter(self.tasks)

    def get(self, task_id: str) -> Task:
        """Return the task named ``task_id``.

        Raises:
            KeyError: no such task in the pool.
        """
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(f"task {task_id!r} not in pool {self.source} (has {[t.id for t in self.tasks]})")

    def epoch_order(self, epoch: int, seed: int) -> list[Task]:
        """The tasks in epoch ``epoch``'s order: a permutation seeded by ``(seed, epoch)``.

        Mandatory because pools are stored in quality-rank order (T1 §3): walking them in stored order would
        feed the trainer the best tasks first. The same ``(seed, epoch)`` always gives the same order;
        different epochs give independent permutations.

        Args:
            epoch: epoch index (>= 0).
            seed: run seed.

        Returns:
            A new list holding every task exactly once.
        """
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        order = list(self.tasks)
        random.Random(f"t1-pool:{seed}:{epoch}").shuffle(order)
        return order

    def statistics(self) -> PoolStatistics:
        """Category mix, difficulty mix and assertion-count percentiles of the pool."""
        counts = sorted(t.n_assertions for t in self.tasks)
        pct = (
            {"p10": _percentile(counts, 10), "p50": _percentile(counts, 50), "p90": _percentile(counts, 90)}
            | {"max": float(counts[-1])}
            if counts
            else {}
        )
        return PoolStatistics(
            n_tasks=len(self.tasks),
            categories=dict(sorted(Counter(t.category for t in self.tasks).items())),
            difficulties=dict(sorted(Counter(t.difficulty for t in self.tasks).items())),
            assertions_total=sum(counts),
            assertion_percentiles=pct,
        )


def _percentile(sorted_values: list[int], q: float) -> float:
    """Percentile ``q`` in [0, 100] with linear interpolation (numpy's default ``linear`` method)."""
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo))


def builtin_pool_dir(name: str) -> Path:
    """Directory of a bundled pool (package data of ``t1_tasks``).

    Raises:
        TaskError: unknown pool name.
    """
    if name not in BUILTIN_POOLS:
        raise TaskError(f"unknown builtin pool {name!r}; available: {', '.join(BUILTIN_POOLS)}")
    return Path(str(resources.files("t1_tasks") / "pools" / name))


def load_pool(source: str | Path, limit: int | None = None) -> Pool:
    """Load a pool.

    Args:
        source: ``"builtin:<name>"`` (e.g. ``builtin:mini``) or a directory whose subdirectories holding a
            ``task.toml`` are task bundles (sorted by name = stored order).
        limit: keep only the first ``limit`` tasks in stored order.

    Returns:
        The ``Pool``.

    Raises:
        TaskError: unknown builtin, a directory with no bundles, or a malformed bundle (names file and field).
        FileNotFoundError: ``source`` is not a directory.
    """
    text = str(source)
    directory = builtin_pool_dir(text.removeprefix("builtin:")) if text.startswith("builtin:") else Path(text)
    if not directory.is_dir():
        raise FileNotFoundError(
            f"pool {text}: {directory} is not a directory (use builtin:mini or a directory)"
        )
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if (directory / "task.toml").is_file():
        bundles = [directory]
    else:
        bundles = sorted(p for p in directory.iterdir() if (p / "task.toml").is_file())
    if not bundles:
        raise TaskError(f"pool {text}: no task bundles (subdirectories with task.toml) in {directory}")
    if limit is not None:
        bundles = bundles[:limit]
    return Pool(source=text, tasks=tuple(load_task(b) for b in bundles))
