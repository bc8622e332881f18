"""Per-phase timeline of a step: when rollout, training and publication ran, so their overlap is computable.

The one-step asynchronous loop is meant to hide training behind the next rollout (T1 Appendix 12). Whether it
does is a question about time windows, not about the phases' durations: a step row's ``wall_s`` says how
long each phase took; ``timeline_s`` (written by `PhaseClock.row`) says when, in seconds since the runtime
started, and how much of the training window a rollout window covered. With disjoint devices the paper's
step time is ``T_step(n) = max(R / n, C / (G - n))`` (T1 §7.2): the step tends to the longer phase only when
the two windows overlap almost entirely.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["PhaseClock", "Window", "overlap_s"]

Window = tuple[float, float]  # (start, end), seconds since the clock's origin


def overlap_s(a: Window, b: Window) -> float:
    """Seconds two windows share (0 when disjoint).

    Raises:
        ValueError: a window that ends before it starts.
    """
    for w in (a, b):
        if w[1] < w[0]:
            raise ValueError(f"window {w} ends before it starts")
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


class PhaseClock:
    """Records phase windows as they happen and hands them to the next metrics row.

    Args:
        clock: a monotonic clock in seconds (`time.monotonic`; a test passes its own).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._origin = clock()
        self._open: dict[str, float] = {}
        self._done: list[tuple[str, Window]] = []

    def now(self) -> float:
        """Seconds since the clock was made."""
        return self._clock() - self._origin

    def begin(self, label: str) -> None:
        """A phase named ``label`` (e.g. ``rollout step-0003``) starts now."""
        self._open[label] = self.now()

    def end(self, label: str) -> Window | None:
        """The phase ``label`` ends now; returns its window.

        Returns None, recording nothing, when ``label`` was not begun: a timeline never fails the run it
        describes.
        """
        start = self._open.pop(label, None)
        return None if start is None else self.record(label, start, self.now())

    def record(self, label: str, start: float, end: float) -> Window:
        """Records a window measured elsewhere (e.g. a worker's training seconds from its submission)."""
        window = (start, end)
        self._done.append((label, window))
        return window

    def row(self) -> dict[str, object]:
        """The ``timeline_s`` of a step row: the windows ended since the last call, and their overlaps.

        Returns:
            ``{"windows": {label: [start, end]}, "train_overlap": s}``: ``train_overlap`` is the seconds of
            the training windows (labels starting with ``train``) covered by a rollout window (labels
            starting with ``rollout``) of the same row; 0.0 when none overlap. Windows are rounded to ms.
        """
        done, self._done = self._done, []
        train = [w for label, w in done if label.startswith("train")]
        rollouts = [w for label, w in done if label.startswith("rollout")]
        covered = sum(overlap_s(t, r) for t in train for r in rollouts)
        return {
            "windows": {label: [round(w[0], 3), round(w[1], 3)] for label, w in done},
            "train_overlap": round(covered, 3),
        }
