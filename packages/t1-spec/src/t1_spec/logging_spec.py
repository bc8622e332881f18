"""Where a run writes its outputs and how it reports progress."""

from __future__ import annotations

from t1_spec._base import Spec


class LoggingSpec(Spec):
    """Run outputs and progress reporting."""

    run_root: str = "runs"
    """Directory under which each run gets its own folder, ``<name>-<UTC time>-<hash of the resolved recipe>``
    (``-2``, ``-3`` ... appended on a clash). Relative paths resolve against the working directory."""

    print_table: bool = True
    """Print a per-step metrics table to the console: reward, assertions passed, turns, tokens, parse-failure
    rate, critic explained variance (``-`` when every return of the step is equal, so EV is undefined), the
    R3 log-prob gap, TITO drift and trials launched/finished/failed/cancelled. Every metric is in
    ``metrics.jsonl`` either way."""

    tensorboard: bool = False
    """Also write TensorBoard event files into the run folder's ``tensorboard/`` (``tensorboard --logdir``
    reads them): every scalar of every metrics row at its step, nested metrics as ``wall_s/rollout``,
    warm-up rows under ``critic_warmup/``. ``metrics.jsonl`` holds the same rows either way."""
