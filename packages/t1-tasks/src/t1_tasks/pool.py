"""Task pools: a list of bundles, a seeded per-epoch permutation, each step's draws, and statistics.

A pool directory's subdirectories are its bundles in stored order (sorted by name). ``load_pool`` is strict
by default (training's use): when any bundle is broken it raises one `PoolError` that lists every broken
bundle with its cause (file and field), so that a pool is fixed in one pass, not one bundle per start.
``load_pool(..., strict=False)`` (``t1 tasks list``, ``stats``, ``validate``) loads every good bundle and
collects the broken ones in ``Pool.broken``.

`StepTasks` hands each training step its launched tasks from `task_stream`, the pool's per-epoch seeded
order epoch after epoch, never the same task twice in one step.

Source: T1 §3 (pools are stored in quality-rank order, so every epoch visits them in a seeded permutation).
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from t1_spec import PoolSpec
from t1_tasks.stats import percentile
from t1_tasks.task import Task, TaskError, load_task

__all__ = [
    "BUILTIN_POOLS",
    "BrokenBundle",
    "Pool",
    "PoolError",
    "PoolStatistics",
    "StepTasks",
    "load_pool",
    "task_stream",
]

BUILTIN_POOLS = ("mini",)
# A subdirectory holding any of these is a bundle (broken when task.toml is missing), not a stray folder.
# ``task.yaml``: the older Terminal-Bench layout, reported with its migration command rather than skipped.
_BUNDLE_MARKERS = ("task.toml", "instruction.md", "environment", "tests", "solution", "task.yaml")


@dataclass(frozen=True)
class BrokenBundle:
    """A bundle of a pool that could not be loaded (only in ``load_pool(..., strict=False)``).

    Attributes:
        id: the bundle's directory name.
        path: the bundle directory.
        error: why it could not be loaded; the message names the file and the field.
    """

    id: str
    path: Path
    error: TaskError

    @property
    def message(self) -> str:
        """The error message (file and field)."""
        return str(self.error)


class PoolError(TaskError):
    """Bundles of a pool are broken: one error listing each broken bundle with its cause.

    Attributes:
        source: the pool as the caller named it.
        broken: every broken bundle, in stored order.
    """

    def __init__(self, source: str, broken: tuple[BrokenBundle, ...], total: int) -> None:
        lines = [f"- {b.id}: {' '.join(b.message.split())}" for b in broken]
        super().__init__(
            f"pool {source}: {len(broken)} of {total} task bundles are broken (fix or remove each):\n"
            + "\n".join(lines)
        )
        self.source = source
        self.broken = broken


@dataclass(frozen=True)
class PoolStatistics:
    """Summary of a pool.

    Attributes:
        n_tasks: number of tasks.
        categories: tasks per ``[metadata].category``.
        difficulties: tasks per ``[metadata].difficulty``.
        assertions_total: sum of the assertion counts that are known statically.
        assertion_percentiles: assertion count at the 10th, 50th, 90th percentile and the max (linear
            interpolation between order statistics, numpy's default) over the tasks whose count is known; T1
            §5.2 sets S = 20 near p90 of the production pool.
        assertions_unknown: tasks whose assertion count is not known statically (``Task.n_assertions`` is
            None: parametrized over a non-literal, fixture params, ...); left out of the two fields above.
    """

    n_tasks: int
    categories: dict[str, int]
    difficulties: dict[str, int]
    assertions_total: int
    assertion_percentiles: dict[str, float]
    assertions_unknown: int = 0


@dataclass(frozen=True)
class Pool:
    """An ordered collection of tasks (stored order = quality rank, T1 §3).

    Attributes:
        source: where it was loaded from (``builtin:mini`` or a directory).
        tasks: the (good) tasks in stored order.
        broken: the bundles that could not be loaded, in stored order; always empty from a strict
            ``load_pool``. They are not part of the pool: iteration, ``len``, ``epoch_order`` and
            ``statistics`` see only ``tasks``.
    """

    source: str
    tasks: tuple[Task, ...]
    broken: tuple[BrokenBundle, ...] = ()

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
        """Category mix, difficulty mix and assertion-count percentiles of the pool (known counts only).

        Static counts only; ``t1_tasks.stats.pool_report`` adds the counts and runtimes a validation record
        observed, the suggested scale S and the per-assertion report share (``t1 tasks stats``).
        """
        counts = sorted(t.n_assertions for t in self.tasks if t.n_assertions is not None)
        pct = (
            {"p10": percentile(counts, 10), "p50": percentile(counts, 50), "p90": percentile(counts, 90)}
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
            assertions_unknown=sum(t.n_assertions is None for t in self.tasks),
        )


def task_stream(pool: Pool, seed: int, *, shuffle: bool = True) -> Iterator[tuple[int, Task]]:
    """Tasks in per-epoch seeded order, epoch after epoch (T1 §3: mandatory for a pool stored in rank order).

    Args:
        pool: the pool to walk.
        seed: the per-epoch shuffle seed (`Pool.epoch_order`).
        shuffle: False walks the stored order in every epoch (``pool.shuffle: none``, for tests).

    Yields:
        ``(epoch, task)`` pairs, forever.
    """
    epoch = 0
    while True:
        for task in pool.epoch_order(epoch, seed) if shuffle else pool.tasks:
            yield epoch, task
        epoch += 1


class StepTasks:
    """Draws each step's launched tasks from :func:`task_stream`, never the same task twice in one step.

    A step that spans an epoch boundary could meet a task it already holds (the next epoch's order is a new
    permutation); that draw is deferred, in order, to the next step instead of dropped, so every epoch still
    runs every task once (T1: one sample per task per step).

    Args:
        pool: the pool to draw from.
        seed: the per-epoch shuffle seed.
        shuffle: False walks the stored order in every epoch (see `task_stream`).

    Raises:
        ValueError: from :meth:`draw`, when a step asks for more tasks than the pool holds.
    """

    def __init__(self, pool: Pool, seed: int, *, shuffle: bool = True) -> None:
        self._size = len(pool)
        self._stream = task_stream(pool, seed, shuffle=shuffle)
        self._deferred: deque[tuple[int, Task]] = deque()
        self._pulled = 0  # items taken from the stream so far: epoch * size + offset
        self._by_id = {t.id: t for t in pool}

    @classmethod
    def from_spec(cls, pool: Pool, spec: PoolSpec) -> StepTasks:
        """The draws of ``pool`` in the order its recipe section asks (``shuffle``, ``shuffle_seed``)."""
        return cls(pool, spec.shuffle_seed, shuffle=spec.shuffle == "per_epoch")

    def draw(self, n: int, *, exclude: frozenset[str] = frozenset()) -> list[tuple[int, Task]]:
        """The next ``n`` distinct ``(epoch, task)`` pairs, deferred draws first, none of them in ``exclude``.

        ``exclude`` holds the ids of tasks the step already runs (trials continued from the previous step,
        partial-rollout continuation, T1 §10); a draw of one of them is deferred, in order, to the next step,
        as a duplicate at an epoch boundary is, so every epoch still runs every task once.

        Raises:
            ValueError: ``n`` plus the excluded tasks exceed the pool's size (a step cannot hold them all).
        """
        if n + len(exclude) > self._size:
            held_note = f" besides {len(exclude)} it already runs" if exclude else ""
            raise ValueError(
                f"a step of {n} distinct tasks{held_note} cannot be drawn from a pool of {self._size}"
            )
        chosen: list[tuple[int, Task]] = []
        held: set[str] = set(exclude)
        skipped: list[tuple[int, Task]] = []
        # Terminates: the pool has more tasks than the step holds, and each epoch's order holds every task.
        while len(chosen) < n:
            item = self._deferred.popleft() if self._deferred else self._next()
            if item[1].id in held:
                skipped.append(item)
                continue
            chosen.append(item)
            held.add(item[1].id)
        self._deferred.extendleft(reversed(skipped))
        return chosen

    def _next(self) -> tuple[int, Task]:
        self._pulled += 1
        return next(self._stream)

    def position(self) -> dict[str, Any]:
        """Where the draws stand, as JSON-ready data (a resumed run continues from it with `restore`).

        ``epoch`` and ``offset`` locate the next task of the stream (it has handed out ``epoch * len(pool)
        + offset`` tasks); ``deferred`` lists the deferred draws as ``[epoch, task_id]`` pairs, in order.
        """
        epoch, offset = divmod(self._pulled, self._size)
        return {"epoch": epoch, "offset": offset, "deferred": [[e, t.id] for e, t in self._deferred]}

    def restore(self, position: dict[str, Any]) -> None:
        """Continue the draws of a fresh instance from a `position` of an instance built the same way.

        Raises:
            ValueError: this instance has drawn already, or a deferred task id is not in the pool (the
                position was taken on another pool).
        """
        if self._pulled or self._deferred:
            raise ValueError("StepTasks.restore needs a fresh instance (this one has drawn already)")
        unknown = [tid for _, tid in position["deferred"] if tid not in self._by_id]
        if unknown:
            raise ValueError(f"task stream position names tasks the pool does not hold: {unknown[:3]}")
        for _ in range(int(position["epoch"]) * self._size + int(position["offset"])):
            self._next()
        self._deferred.extend((int(e), self._by_id[tid]) for e, tid in position["deferred"])


def builtin_pool_dir(name: str) -> Path:
    """Directory of a bundled pool (package data of ``t1_tasks``).

    Raises:
        TaskError: unknown pool name.
    """
    if name not in BUILTIN_POOLS:
        raise TaskError(f"unknown builtin pool {name!r}; available: {', '.join(BUILTIN_POOLS)}")
    return Path(str(resources.files("t1_tasks") / "pools" / name))


def _bundle_dirs(directory: Path) -> list[Path]:
    """The bundle directories of a pool directory, sorted by name (stored order)."""
    if any((directory / m).is_file() for m in ("task.toml", "instruction.md", "task.yaml")):
        return [directory]  # one bundle given directly
    try:
        entries = list(directory.iterdir())
    except OSError as exc:
        raise TaskError(f"pool {directory}: cannot read the directory: {exc.strerror or exc}") from exc
    candidates = (p for p in entries if p.is_dir() and not p.name.startswith((".", "__")))
    return sorted(p for p in candidates if any((p / m).exists() for m in _BUNDLE_MARKERS))


def load_pool(
    source: str | Path, limit: int | None = None, *, strict: bool = True, require_solution: bool = False
) -> Pool:
    """Load a pool.

    Args:
        source: ``"builtin:<name>"`` (e.g. ``builtin:mini``) or a directory whose subdirectories are task
            bundles (sorted by name = stored order), or one bundle directory. A subdirectory counts as a
            bundle when it holds ``task.toml``, ``instruction.md``, ``environment/``, ``tests/`` or
            ``solution/``, so a bundle missing its ``task.toml`` is reported, not skipped.
        limit: keep only the first ``limit`` bundles in stored order (broken ones count).
        strict: raise one `PoolError` listing every broken bundle (the default, training's use); with
            ``False`` load every good bundle and collect the broken ones, each with its ``TaskError``, in
            ``Pool.broken``.
        require_solution: a bundle without ``solution/solve.sh`` is broken (for a caller that needs every
            oracle); every T1 command loads bundles without one, as Harbor does (`Task.has_solution`).

    Returns:
        The ``Pool``; with ``strict=False`` it may hold no tasks when every bundle is broken.

    Raises:
        TaskError: unknown builtin, an unreadable directory or a directory with no bundles.
        PoolError: (strict only) one or more malformed bundles, each named with its file and field.
        FileNotFoundError: ``source`` is not a directory.
        ValueError: ``limit`` < 1.
    """
    text = str(source)
    directory = builtin_pool_dir(text.removeprefix("builtin:")) if text.startswith("builtin:") else Path(text)
    if not directory.is_dir():
        raise FileNotFoundError(
            f"pool {text}: {directory} is not a directory (use builtin:mini or a directory)"
        )
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    bundles = _bundle_dirs(directory)
    if not bundles:
        raise TaskError(f"pool {text}: no task bundles (subdirectories with task.toml) in {directory}")
    if limit is not None:
        bundles = bundles[:limit]
    tasks: list[Task] = []
    broken: list[BrokenBundle] = []
    for bundle in bundles:
        try:
            tasks.append(load_task(bundle, require_solution=require_solution))
        except TaskError as exc:
            broken.append(BrokenBundle(id=bundle.name, path=bundle.resolve(), error=exc))
    if strict and broken:
        raise PoolError(text, tuple(broken), len(bundles))
    return Pool(source=text, tasks=tuple(tasks), broken=tuple(broken))
