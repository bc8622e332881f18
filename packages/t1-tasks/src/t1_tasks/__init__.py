"""Terminal task bundles in Harbor layout, pools, bundled mini pool.

A bundle is a directory holding ``task.toml``, ``instruction.md``, ``environment/Dockerfile`` (optional
with a prebuilt ``docker_image``), ``tests/test.sh`` (plus pytest files) and, for ``t1 tasks validate`` only,
``solution/solve.sh`` (Harbor's task format). ``load_pool`` is strict by default (one ``PoolError`` lists
every broken bundle); ``load_pool(..., strict=False)`` returns the good tasks and lists the broken bundles in
``Pool.broken``. A bundle in the older Terminal-Bench layout (``task.yaml``) is refused with the
``harbor tasks migrate`` command that converts it.

``t1_tasks.stats`` computes a pool's statistics (assertion-count percentiles, the suggested reward scale S,
mixes, runtimes, histograms; ``t1 tasks stats``) and ``t1_tasks.validation`` defines the validation record
that ``t1 tasks validate --record`` writes and ``stats --validated`` reads.

``Task.n_assertions`` is counted statically from ``tests/*.py`` (``t1_tasks.assertions``: test functions
and ``Test*`` methods times literal ``parametrize`` cases); it is None when only running pytest could tell.

Every ``task.toml`` key is read by ``t1_tasks.harbor.parse_task_config`` (Harbor 0.7+'s task model, legacy
keys mapped as Harbor maps them): used, kept for the sandbox backend in ``Task.environment``, or refused by
name; a key Harbor's model does not have is ignored as Harbor ignores it and named in ``Task.warnings``.
``[metadata]`` is free-form: ``category`` and ``difficulty`` (``unknown`` when absent) are shown by ``t1
tasks list`` and ``stats``; ``[agent]`` and ``[verifier]`` ``timeout_sec`` (default 600 s) are used only by
``t1 tasks validate``.

Training does not use a task's timeouts: every trial runs under the recipe's deadlines
(``rollout.agent_deadline_s`` for the agent episode, ``rollout.verifier_deadline_s`` for the verifier,
``rollout.remote_deadline_s`` for the whole trial). Its resources depend on the backend: the local sandbox
uses only the recipe's ``sandbox`` section (``cpu_time_s``, ``memory_mb``, ``max_processes``, ``disk_mb``,
``network``), the same for every task; the Docker backend takes the task's ``[environment]`` request
(``cpus``, ``memory_mb``, ``storage_mb``, ``network_mode``, kept in ``Task.environment``) capped by the
recipe's. ``t1 tasks list`` shows the task.toml timeouts for information and says so in a footer.
"""

from t1_tasks.harbor import HarborEnvironment
from t1_tasks.overlap import OverlapPair, find_overlaps
from t1_tasks.pool import (
    BUILTIN_POOLS,
    BrokenBundle,
    Pool,
    PoolError,
    PoolStatistics,
    StepTasks,
    load_pool,
    task_stream,
)
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
    "HarborEnvironment",
    "OverlapPair",
    "Pool",
    "PoolError",
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
