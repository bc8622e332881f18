"""TensorBoard event files beside ``metrics.jsonl``: every scalar of every metrics row, at its step.

Written when the recipe sets ``logging.tensorboard: true``, into ``<run dir>/tensorboard/`` (point
``tensorboard --logdir`` at it). The writer is the ``tensorboard`` package's own event-file writer (the one
``torch.utils.tensorboard`` wraps), so no TensorFlow is needed. ``metrics.jsonl`` stays the record: the event
files are a view of the same rows, written as each row is appended.

Tags: a row's keys, nested dicts flattened with ``/`` (``wall_s/rollout``, ``fallbacks/<cause>``,
``retention_by_family/<family>``). PPO rows keep their keys as they are (``reward_mean``,
``critic/explained_variance``, ``actor/logprob_gap_replay``); critic warm-up rows are prefixed
``critic_warmup/`` and evaluation rows ``evaluation/<suite>/``, since their step counters restart at 0.
Strings, lists and ``null`` values carry no scalar and are left out.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SKIPPED_KEYS = frozenset({"phase", "step", "suite"})
"""Row keys that say where a row belongs rather than what it measured."""


def scalars(row: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """The scalar metrics of one row as ``(tag, value)`` pairs, nested dicts flattened with ``/``.

    Args:
        row: a ``metrics.jsonl`` object (or a nested dict inside it).
        prefix: prepended to every tag (``wall_s/`` for the nested ``wall_s`` dict).

    Yields:
        ``(tag, float)`` for every finite int, float or bool; strings, lists, ``None`` and non-finite floats
        are skipped (a list such as ``policy_versions`` has no single value to plot).
    """
    for key, value in row.items():
        if not prefix and key in SKIPPED_KEYS:
            continue
        tag = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from scalars(value, f"{tag}/")
        elif isinstance(value, bool | int | float) and math.isfinite(value):
            yield tag, float(value)


def row_prefix(row: dict[str, Any]) -> str:
    """The tag prefix of a row's phase: none for PPO, ``critic_warmup/``, ``evaluation/<suite>/``."""
    phase = row.get("phase", "ppo")
    if phase == "ppo":
        return ""
    if phase == "evaluation":
        return f"evaluation/{row.get('suite', 'suite')}/"
    return f"{phase}/"


class TensorBoardLog:
    """An open event file in ``folder``; one event per metrics row, flushed at once.

    Every row is flushed as it is written, so a run killed mid-way leaves readable event files with every
    step it finished; the file is closed by :meth:`close` or, at the latest, when the object is collected or
    the interpreter exits.

    Args:
        folder: the event-file folder (created if missing), e.g. ``<run dir>/tensorboard``.
    """

    def __init__(self, folder: Path) -> None:
        # imported here: only a run with logging.tensorboard pays for tensorboard's import
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self._writer = EventFileWriter(str(folder))
        self._finalizer = weakref.finalize(self, self._writer.close)

    def add_row(self, row: dict[str, Any]) -> int:
        """Write one metrics row's scalars at the row's ``step`` and flush.

        Args:
            row: a ``metrics.jsonl`` object; its ``step`` (an int) is the TensorBoard step.

        Returns:
            The number of scalars written.

        Raises:
            ValueError: the row has no integer ``step``.
        """
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        step = row.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            raise ValueError(f"a metrics row needs an integer 'step' for TensorBoard, got {step!r}")
        values = [Summary.Value(tag=tag, simple_value=value) for tag, value in scalars(row, row_prefix(row))]
        self._writer.add_event(Event(wall_time=time.time(), step=step, summary=Summary(value=values)))
        self._writer.flush()
        return len(values)

    def close(self) -> None:
        """Flush and close the event file (idempotent)."""
        self._finalizer()
