"""A step's timeline (t1.run.phases): windows recorded as they happen, and how much of training they cover."""

from __future__ import annotations

import pytest

from t1.run.phases import PhaseClock, overlap_s


class Ticks:
    """A clock that reads the times a test sets."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_overlap_is_the_shared_part_of_two_windows():
    assert overlap_s((0.0, 4.0), (3.0, 10.0)) == 1.0
    assert overlap_s((0.0, 4.0), (5.0, 6.0)) == 0.0
    assert overlap_s((2.0, 3.0), (0.0, 10.0)) == 1.0
    with pytest.raises(ValueError, match="ends before it starts"):
        overlap_s((2.0, 1.0), (0.0, 1.0))


def test_async_step_row_shows_training_hidden_behind_the_next_rollout():
    ticks = Ticks()
    clock = PhaseClock(ticks)
    # Training submitted at 1 s for 3 s of the worker's time, the next rollout from 1.5 s to 6 s.
    ticks.t = 101.0
    submitted = clock.now()
    ticks.t = 101.5
    clock.begin("rollout step-0001")
    clock.record("train", submitted, submitted + 3.0)
    ticks.t = 106.0
    clock.end("rollout step-0001")
    clock.begin("publish")
    ticks.t = 106.25
    clock.end("publish")
    row = clock.row()
    assert row["windows"] == {"train": [1.0, 4.0], "rollout step-0001": [1.5, 6.0], "publish": [6.0, 6.25]}
    assert row["train_overlap"] == 2.5  # 4.0 - 1.5: all of training but its first half second
    assert clock.row() == {"windows": {}, "train_overlap": 0.0}  # each window goes to one row only


def test_sync_step_row_has_no_overlap():
    ticks = Ticks()
    clock = PhaseClock(ticks)
    clock.begin("rollout step-0000")
    ticks.t = 104.0
    clock.end("rollout step-0000")
    clock.record("train", 4.0, 6.0)
    assert clock.row()["train_overlap"] == 0.0


def test_ending_a_phase_never_begun_records_nothing():
    clock = PhaseClock()
    assert clock.end("rollout step-0000") is None
    assert clock.row() == {"windows": {}, "train_overlap": 0.0}
