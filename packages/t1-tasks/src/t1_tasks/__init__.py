"""Terminal task bundles in Harbor layout, pools, bundled mini pool.

A bundle is a directory holding ``task.toml``, ``instruction.md``, ``environment/Dockerfile``,
``tests/test.sh`` (plus pytest files) and ``solution/solve.sh`` (Harbor's task format). ``load_pool`` is
strict by default (the first broken bundle raises ``TaskError``); ``load_pool(..., strict=False)`` returns
the good tasks and lists the broken bundles in ``Pool.broken``.

``t1_tasks.stats`` computes a pool's statistics (assertion-count percentiles, the suggested reward scale S,
mixes, runtimes, histograms; ``t1 tasks stats``) and ``t1_tasks.validation`` defines the validation record
that ``t1 tasks validate --record`` writes and ``stats --validated`` reads.

``Task.n_assertions`` is counted statically from ``tests/*.py`` (``t1_tasks.assertions``: test functions
and ``Test*`` methods times literal ``parametrize`` cases); it is None when only running pytest could tell.

Which ``task.toml`` fields are used:

- ``[metadata] category`` and ``difficulty`` (required): shown by ``t1 tasks list`` and ``stats``, counted
  in ``Pool.statistics``. ``tags`` (optional list of strings): kept as ``Task.tags``, not shown or counted.
- ``[agent] timeout_sec`` (default 600 s, ``Task.agent_timeout_s``): used only by ``t1 tasks validate``,
  as the deadline of ``solution/solve.sh``.
- ``[verifier] timeout_sec`` (default 600 s, ``Task.verifier_timeout_s``): used only by ``t1 tasks
  validate``, as the verifier's deadline.
- ``[environment] cpus``, ``memory_mb``, ``storage_mb``, ``network_mode``: not used (kept in
  ``Task.config`` for Harbor compatibility).
- everything else (``version``, ``[metadata] author_name``, ...): not used (kept in ``Task.config``).

Training does not use a task's timeouts or resources: every trial runs under the recipe's deadlines
(``rollout.agent_deadline_s`` for the agent episode, ``rollout.verifier_deadline_s`` for the verifier,
``rollout.remote_deadline_s`` for the whole trial) and in a sandbox built from the recipe's ``sandbox``
section (for ``kind: local``: ``cpu_time_s``, ``memory_mb``, ``max_processes``, ``disk_mb``, ``network``), the
same for every task. ``t1 tasks list`` shows the task.toml timeouts for information and says so in a footer.
"""

from t1_tasks.overlap import OverlapPair, find_overlaps
from t1_tasks.pool import BUILTIN_POOLS, BrokenBundle, Pool, PoolStatistics, StepTasks, load_pool, task_stream
from t1_tasks.stats import PoolReport, percentile, pool_report, suggested_scale
from t1_tasks.task import Task, TaskError, bundle_digest, count_assertions, format_seconds, load_task
from t1_tasks.validation import (
    RECORD_VERSION,
    ValidationRecord,
    ValidationRecordError,
    read_record,
    record_for,
    write_record,
)

__all__ = [
    "BUILTIN_POOLS",
    "BrokenBundle",
    "bundle_digest",
    "OverlapPair",
    "Pool",
    "PoolReport",
    "PoolStatistics",
    "RECORD_VERSION",
    "StepTasks",
    "Task",
    "TaskError",
    "ValidationRecord",
    "ValidationRecordError",
    "count_assertions",
    "find_overlaps",
    "format_seconds",
    "load_pool",
    "load_task",
    "percentile",
    "pool_report",
    "read_record",
    "record_for",
    "suggested_scale",
    "task_stream",
    "write_record",
]
