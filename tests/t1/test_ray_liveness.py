"""`t1.run.ray.liveness`: the probe schedule (grace, period, deadline) and the record of lost participants.

The probes here are coroutines standing in for Ray calls, so the schedule is checked without a cluster; the
fault tests on a local Ray cluster are in `tests/e2e/test_ray_faults.py`.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from t1.run.ray.liveness import LivenessMonitor, Participant
from t1_spec import LivenessSpec

FAST = LivenessSpec(probe_grace_s=0.3, probe_period_s=0.1, probe_deadline_s=0.25)


class Probes:
    """Answers for each participant: ``ok``, ``hang`` (never answers) or ``die`` (raises)."""

    def __init__(self, **how: str) -> None:
        self.how = how
        self.times: dict[str, list[float]] = {}

    def __call__(self, p: Participant):
        self.times.setdefault(p.name, []).append(time.monotonic())
        return self._answer(self.how.get(p.name.replace(" ", "_"), "ok"))

    async def _answer(self, how: str):
        if how == "hang":
            await asyncio.sleep(3600)
        if how == "die":
            raise RuntimeError("ActorDiedError: the actor died unexpectedly")
        return {"pid": 1}


def _participants() -> list[Participant]:
    return [Participant("engine", 0, None), Participant("engine", 1, None), Participant("sandbox", 0, None)]


def _wait(cond, timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def test_nothing_is_probed_during_the_grace_then_every_period():
    probes = Probes()
    mon = LivenessMonitor(FAST, _participants(), probe=probes)
    began = time.monotonic()
    mon.start()
    try:
        time.sleep(0.2)
        assert probes.times == {}  # inside the 0.3 s grace
        assert _wait(lambda: len(probes.times.get("engine replica 0", [])) >= 3)
    finally:
        mon.close()
    first = probes.times["engine replica 0"]
    assert first[0] - began >= FAST.probe_grace_s - 0.02
    gaps = [b - a for a, b in zip(first, first[1:], strict=False)]
    assert all(g >= FAST.probe_period_s - 0.02 for g in gaps)
    assert mon.live("engine") == [0, 1] and mon.summary() == {"engine": {}, "sandbox": {}}


def test_a_hung_participant_is_lost_after_the_deadline_and_a_dead_one_at_once():
    probes = Probes(engine_replica_1="hang", sandbox_host_0="die")
    mon = LivenessMonitor(FAST, _participants(), probe=probes)
    mon.start()
    try:
        assert _wait(lambda: mon.is_lost("engine", 1) and mon.is_lost("sandbox", 0))
    finally:
        mon.close()
    assert mon.live("engine") == [0] and mon.live("sandbox") == []
    assert "did not answer a liveness probe within 0.25 s" in mon.cause("engine", 1)
    assert "failed a liveness probe" in mon.cause("sandbox", 0) and "ActorDiedError" in mon.cause(
        "sandbox", 0
    )
    # a lost participant is probed no more
    n = len(probes.times["sandbox host 0"])
    time.sleep(0.3)
    assert len(probes.times["sandbox host 0"]) == n


def test_lost_participants_are_reclaimed_once_and_the_first_cause_is_kept():
    mon = LivenessMonitor(LivenessSpec(), _participants(), probe=Probes())
    assert mon.mark_lost("engine", 1, "first cause")
    assert not mon.mark_lost("engine", 1, "second cause")
    assert mon.cause("engine", 1) == "first cause"
    assert [p.name for p in mon.to_reclaim()] == ["engine replica 1"]
    assert mon.to_reclaim() == []
    assert mon.summary() == {"engine": {"1": "first cause"}, "sandbox": {}}


def test_a_waiter_on_a_participant_wakes_with_its_cause():
    mon = LivenessMonitor(LivenessSpec(), _participants(), probe=Probes())

    async def go():
        waiter = asyncio.ensure_future(mon.lost("sandbox", 0))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        mon.mark_lost("sandbox", 0, "sandbox host 0 died")
        return await asyncio.wait_for(waiter, 2)

    assert asyncio.run(go()) == "sandbox host 0 died"


@pytest.mark.parametrize("how", ["hang", "die"])
def test_probe_once_marks_the_participant_lost_and_says_false(how):
    mon = LivenessMonitor(FAST, _participants(), probe=Probes(engine_replica_0=how))
    assert asyncio.run(mon.probe_once(Participant("engine", 0, None))) is False
    assert mon.is_lost("engine", 0)
    assert asyncio.run(mon.probe_once(Participant("engine", 1, None))) is True
    assert not mon.is_lost("engine", 1)
