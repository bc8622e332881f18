"""A run's task pools as the recipe names them, and why they cannot be used, found before any work.

Loading is the same for the preflight and the run: the pool source, its ``limit`` or ``tasks`` (a named
split), its ``audit`` (only the tasks the audit admits, T1 §3.2), its ``validation`` record (the observed
assertion counts reports are held to), a size check (one step draws ``rollout.launched`` distinct tasks, T1:
one sample per task per step), and each task's environment held against the chosen sandbox backend (its
``check_environment``, through the ``SANDBOXES`` registry), all before any model is built. Every broken
bundle and every task the backend cannot run is reported at once, one line each (`PoolProblems`). A problem
here is a path of the recipe this machine cannot use, so ``t1 train`` and ``t1 recipe validate`` exit 1 on it.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

from t1_spec import PoolSpec, Recipe
from t1_tasks import Pool
from t1_tasks.validation import ValidationRecord


class PoolProblems(ValueError):
    """Why the recipe's pools cannot be used, one line per broken bundle or task the backend cannot run.

    Each line starts with the recipe field (``pool.source``).

    Attributes:
        lines: the problems, in pool order.
    """

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


def load_one(name: str, spec: PoolSpec) -> Pool:
    """The pool of ``spec`` (recipe section ``name``): cut to ``limit`` or ``tasks``, then to its audit.

    Raises:
        PoolProblems: bundles of the pool are broken: one line per bundle with its cause.
        ValueError: the source does not load, or the audit file is unreadable or misses a task; the message
            starts with the recipe field (``pool.source``, ``pool.audit.file``).
    """
    from t1_tasks import PoolError, TaskError, load_pool

    try:
        pool = load_pool(spec.source, limit=spec.limit)
    except PoolError as exc:
        head = f"{name}.source {spec.source!r}"
        raise PoolProblems([f"{head}: bundle {b.id}: {b.message}" for b in exc.broken]) from exc
    except (TaskError, OSError) as exc:
        raise ValueError(f"{name}.source {spec.source!r}: {exc}") from exc
    if spec.tasks is not None:
        pool = select_tasks(name, pool, spec.tasks)
    if spec.audit is None:
        return pool
    from t1_tasks.audit import admitted_tasks

    try:
        return admitted_tasks(pool, spec.audit)
    except (ValueError, OSError) as exc:
        raise ValueError(f"{name}.audit.file {spec.audit.file!r}: {exc}") from exc


def select_tasks(name: str, pool: Pool, ids: list[str]) -> Pool:
    """The tasks of ``pool`` named in ``ids`` (``<name>.tasks``), in the pool's stored order.

    Raises:
        ValueError: an id the pool does not hold, naming every such id and the pool's ids.
    """
    have = {t.id for t in pool}
    missing = [i for i in ids if i not in have]
    if missing:
        raise ValueError(f"{name}.tasks: {missing} not in {pool.source!r}, whose tasks are {sorted(have)}")
    keep = set(ids)
    return dataclasses.replace(pool, tasks=tuple(t for t in pool if t.id in keep))


def load_validation(name: str, spec: PoolSpec, pool: Pool) -> ValidationRecord | None:
    """The validation record ``spec.validation`` names for ``pool`` (recipe section ``name``), or None.

    Raises:
        ValueError: the file does not read as a record, or it is a record of another pool or of none of
            the pool's tasks; the message starts with ``<name>.validation``.
    """
    if spec.validation is None:
        return None
    from t1_tasks.validation import ValidationRecordError, read_record, record_for

    try:
        return record_for(read_record(spec.validation), pool.source, [t.id for t in pool])
    except (ValidationRecordError, OSError, ValueError) as exc:
        raise ValueError(f"{name}.validation {spec.validation!r}: {exc}") from exc


def environment_problems(name: str, pool: Pool, recipe: Recipe) -> list[str]:
    """What of ``pool``'s tasks the recipe's sandbox backend cannot build or run, one line per problem.

    Asks the backend registered for ``sandbox.kind`` (``SANDBOXES``) through its ``check_environment``
    classmethod, which is static (it reads the Dockerfile and ``[environment]`` of each task, starts
    nothing). A kind with no registered backend gives no lines here: the preflight's registry check says it.

    Args:
        name: the recipe section of the pool (``pool``, ``critic_warmup.pool``).
        pool: the loaded pool.
        recipe: the run's recipe.

    Returns:
        Lines ``<name>.source '<source>': task <id>: sandbox.kind '<kind>' cannot run it: <why>``.
    """
    from t1_sandbox.registry import SANDBOXES

    kind = recipe.sandbox.kind
    if SANDBOXES.problem(kind) is not None:
        return []
    check = SANDBOXES.load(kind).check_environment
    head = f"{name}.source {pool.source!r}"
    return [
        f"{head}: task {task.id}: sandbox.kind {kind!r} cannot run it: {line}"
        for task in pool
        for line in check(task, recipe)
    ]


def load_pools(recipe: Recipe) -> tuple[Pool, Pool, PoolSpec]:
    """The training pool and the critic warm-up pool, each large enough for one step of distinct tasks.

    Both pools are loaded and every task's environment is checked against the sandbox backend before
    anything fails, so that one error lists every broken bundle and every task the backend cannot run.

    Returns:
        ``(pool, warmup_pool, warmup_spec)``; the warm-up pool is the training pool unless
        ``critic_warmup.pool`` names another.

    Raises:
        PoolProblems: broken bundles (`load_one`) or tasks the sandbox backend cannot run
            (`environment_problems`), one line each, for both pools together.
        ValueError: a pool does not load at all (`load_one`), or ``rollout.launched`` exceeds its tasks
            (naming ``limit`` or ``audit`` when that is what cut it).
    """
    r = recipe
    warm = r.critic_warmup.pool or r.pool
    lines: list[str] = []
    loaded: dict[str, Pool] = {}
    for name, spec in (("pool", r.pool), ("critic_warmup.pool", warm)):
        if name != "pool" and warm == r.pool:
            continue
        try:
            loaded[name] = load_one(name, spec)
        except PoolProblems as exc:
            lines += exc.lines
    for name, p in loaded.items():
        lines += environment_problems(name, p, r)
    if lines:
        raise PoolProblems(lines)
    pool = loaded["pool"]
    warmup_pool = loaded.get("critic_warmup.pool", pool)
    for name, p, spec in (("pool", pool, r.pool), ("critic_warmup.pool", warmup_pool, warm)):
        if tasks_per_step(r) > len(p):
            cut = [f"{name}.limit {spec.limit}"] if spec.limit is not None else []
            cut += [f"{name}.tasks ({len(spec.tasks)} ids)"] if spec.tasks is not None else []
            cut += [f"{name}.audit (min_score {spec.audit.min_score:g})"] if spec.audit is not None else []
            cut_by = f" (cut by {' and '.join(cut)})" if cut else ""
            g = r.ppo.samples_per_task
            drawn = f" / ppo.samples_per_task {g} = {tasks_per_step(r)} tasks per step" if g > 1 else ""
            raise ValueError(
                f"rollout.launched={r.rollout.launched}{drawn} exceeds the {len(p)} tasks of {name} "
                f"{p.source!r}{cut_by}: one step would draw a task "
                "twice (T1: one group per task per step); lower rollout.launched (and rollout.admitted, "
                "ppo.batch_size) or use more tasks"
            )
    return pool, warmup_pool, warm


def tasks_per_step(recipe: Recipe) -> int:
    """Tasks one step draws (tasks): ``rollout.launched`` trials in groups of ``ppo.samples_per_task``."""
    return max(1, recipe.rollout.launched // recipe.ppo.samples_per_task)


def pool_problems(recipe: Recipe) -> list[str]:
    """Why the recipe's pools cannot be used, one line each (empty: they load, run and are large enough).

    Every broken bundle and every task the sandbox backend cannot run is its own line (`PoolProblems`).
    """
    try:
        pool, warmup_pool, warm = load_pools(recipe)
        load_validation("pool", recipe.pool, pool)
        if warm is not recipe.pool:
            load_validation("critic_warmup.pool", warm, warmup_pool)
    except PoolProblems as exc:
        return [" ".join(line.split()) for line in exc.lines]
    except ValueError as exc:
        return [" ".join(str(exc).split())]
    return []


def run_root_problem(recipe: Recipe) -> str | None:
    """Why ``logging.run_root`` cannot hold a new run directory, or ``None`` when it can.

    The nearest existing folder on the way to it must take a new directory: one is made there and removed at
    once (permission bits alone say nothing for root, and a folder such as ``/proc`` refuses any).
    """
    root = Path(recipe.logging.run_root)
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        why = "is not a directory"
    else:
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".t1-probe-", dir=probe))
            return None
        except OSError as exc:
            why = f"takes no new directory: {exc.strerror or exc}"
    where = why if probe == root else f"{probe} {why}"
    return f"logging.run_root {str(root)!r}: cannot create the run directory there ({where})"
