"""Terminal task bundles in Harbor layout, pools, bundled mini pool."""

from t1_tasks.pool import BUILTIN_POOLS, Pool, PoolStatistics, load_pool
from t1_tasks.task import Task, TaskError, count_assertions, load_task

__all__ = [
    "BUILTIN_POOLS",
    "Pool",
    "PoolStatistics",
    "Task",
    "TaskError",
    "count_assertions",
    "load_pool",
    "load_task",
]
