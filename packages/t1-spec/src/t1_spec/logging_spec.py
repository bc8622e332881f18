"""Where a run writes its outputs and how it reports progress."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from t1_spec._base import Spec


class WandbSpec(Spec):
    """Weights & Biases logging of a run: its metrics rows, its resolved recipe and its plots.

    Chosen (the paper names no tracker); ``metrics.jsonl`` stays the record, W&B is a view of the same rows.
    """

    mode: Literal["online", "offline", "disabled"] = "disabled"
    """``online`` streams to the W&B server (needs ``wandb login`` or ``WANDB_API_KEY``), ``offline`` writes
    the W&B run into the run folder's ``wandb/`` for a later ``wandb sync``, ``disabled`` (the default) does
    nothing. Either of the first two needs the ``t1[wandb]`` extra."""

    project: str = Field(default="t1", min_length=1)
    """W&B project the run is logged under (default ``t1``)."""

    entity: str | None = None
    """W&B entity (user or team) owning the project; None = the logged-in user's default entity."""


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

    wandb: WandbSpec = Field(default_factory=WandbSpec)
    """Also log to Weights & Biases: every metrics row as it is written (tags as TensorBoard's, each phase on
    its own step axis), the resolved recipe as the W&B run's config, and the figures of ``t1 plot`` as images
    when the run ends. Off by default (``mode: disabled``)."""
