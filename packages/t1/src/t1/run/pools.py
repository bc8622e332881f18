"""A run's task pools as the recipe names them, and why they cannot be used, found before any work.

Loading is the same for the preflight and the run: the pool source, its ``limit``, its ``audit`` (only the
tasks the audit admits, T1 §3.2), its ``validation`` record (the observed assertion counts reports are held
to), and a size check (one step draws ``rollout.launched`` distinct tasks, T1:
one sample per task per step). A problem here is invalid input (a path in the recipe), so ``t1 train`` and
``t1 recipe validate`` exit 2 on it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from t1_spec import PoolSpec, Recipe
from t1_tasks import Pool
from t1_tasks.validation import ValidationRecord


def load_one(name: str, spec: PoolSpec) -> Pool:
    """The pool of ``spec`` (recipe section ``name``), cut to ``limit``, restricted to what its audit admits.

    Raises:
        ValueError: the source does not load, or the audit file is unreadable or misses a task; the message
            starts with the recipe field (``pool.source``, ``pool.audit.file``).
    """
    from t1_tasks import TaskError, load_pool

    try:
        pool = load_pool(spec.source, limit=spec.limit)
    except (TaskError, OSError) as exc:
        raise ValueError(f"{name}.source {spec.source!r}: {exc}") from exc
    if spec.audit is None:
        return pool
    from t1_tasks.audit import admitted_tasks

    try:
        return admitted_tasks(pool, spec.audit)
    except (ValueError, OSError) as exc:
        raise ValueError(f"{name}.audit.file {spec.audit.file!r}: {exc}") from exc


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


def load_pools(recipe: Recipe) -> tuple[Pool, Pool, PoolSpec]:
    """The training pool and the critic warm-up pool, each large enough for one step of distinct tasks.

    Returns:
        ``(pool, warmup_pool, warmup_spec)``; the warm-up pool is the training pool unless
        ``critic_warmup.pool`` names another.

    Raises:
        ValueError: a pool does not load (`load_one`), or ``rollout.launched`` exceeds its tasks (naming
            ``limit`` or ``audit`` when that is what cut it).
    """
    r = recipe
    pool = load_one("pool", r.pool)
    warm = r.critic_warmup.pool or r.pool
    warmup_pool = pool if warm == r.pool else load_one("critic_warmup.pool", warm)
    for name, p, spec in (("pool", pool, r.pool), ("critic_warmup.pool", warmup_pool, warm)):
        if r.rollout.launched > len(p):
            cut = [f"{name}.limit {spec.limit}"] if spec.limit is not None else []
            cut += [f"{name}.audit (min_score {spec.audit.min_score:g})"] if spec.audit is not None else []
            cut_by = f" (cut by {' and '.join(cut)})" if cut else ""
            raise ValueError(
                f"rollout.launched={r.rollout.launched} exceeds the {len(p)} tasks of {name} "
                f"{p.source!r}{cut_by}: one step would run a task more than once (T1: one sample "
                "per task per step); lower rollout.launched (and rollout.admitted, ppo.batch_size) "
                "or use more tasks"
            )
    return pool, warmup_pool, warm


def pool_problems(recipe: Recipe) -> list[str]:
    """Why the recipe's pools cannot be used, one line (empty: they load and are large enough)."""
    try:
        pool, warmup_pool, warm = load_pools(recipe)
        load_validation("pool", recipe.pool, pool)
        if warm is not recipe.pool:
            load_validation("critic_warmup.pool", warm, warmup_pool)
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
