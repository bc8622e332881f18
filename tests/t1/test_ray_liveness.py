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

FAST = LivenessSpec(probe_grace_s=0.6, probe_period_s=0.1, probe_deadline_s=0.25)


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
        time.sleep(0.1)
        assert probes.times == {}  # well inside the 0.6 s grace, counted from construction
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


# ---- the driver's side of one trial: trial_or_loss and lost_attempt


class Host:
    """A sandbox host handle whose ``cancel.remote`` is recorded."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.cancel = self

    def remote(self, trial_id: str) -> None:
        self.cancelled.append(trial_id)


def _record(status: str = "finished"):
    from t1_rollout.trial import TrialRecord

    return TrialRecord(trial_id="t__1", task_id="t", family="f", status=status)


def _trial(mon, answer=None, *, raise_exc=None, lose=None, host=None):
    """Run `trial_or_loss` on a future the test settles: with ``answer``, ``raise_exc``, or after ``lose``."""
    from t1.run.ray.liveness import trial_or_loss

    host = host or Host()

    async def go():
        future = asyncio.get_running_loop().create_future()
        if lose is not None:
            asyncio.get_running_loop().call_later(0.05, mon.mark_lost, *lose)
            # the host answers a cancel with its cancelled record
            asyncio.get_running_loop().call_later(
                0.5, lambda: future.done() or future.set_result(_record("cancelled"))
            )
        elif raise_exc is not None:
            future.set_exception(raise_exc)
        else:
            future.set_result(answer)
        return await trial_or_loss(mon, future, _record(), (0, None), (0, host), cancel_deadline_s=2)

    return asyncio.run(go()), host


def test_an_answer_is_accepted_only_when_its_replica_still_answers_a_probe():
    ok = LivenessMonitor(FAST, _participants(), probe=Probes())
    (answer, cause), _ = _trial(ok, _record())
    assert cause is None and answer.status == "finished"
    # a hung replica lets the trial end on the agent's deadline, verified: that answer is a lost attempt
    hung = LivenessMonitor(FAST, _participants(), probe=Probes(engine_replica_0="hang"))
    (answer, cause), _ = _trial(hung, _record())
    assert answer is not None and "engine replica 0 did not answer" in cause
    assert hung.is_lost("engine", 0)


def test_an_answer_after_the_host_was_recorded_lost_is_a_lost_attempt():
    mon = LivenessMonitor(FAST, _participants(), probe=Probes())
    mon.mark_lost("sandbox", 0, "sandbox host 0 did not answer")
    (_, cause), _ = _trial(mon, _record())
    assert cause == "sandbox host 0 did not answer"


def test_a_host_that_died_under_the_trial_is_lost_with_the_error_named():
    from ray.exceptions import ActorDiedError

    mon = LivenessMonitor(FAST, _participants(), probe=Probes())
    (answer, cause), _ = _trial(mon, raise_exc=ActorDiedError())
    assert answer is None and cause.startswith("sandbox host 0 died during a trial (ActorDiedError")
    assert mon.live("sandbox") == []


def test_a_replica_lost_mid_trial_cancels_the_trial_on_its_host_and_keeps_its_record():
    mon = LivenessMonitor(FAST, _participants(), probe=Probes())
    (answer, cause), host = _trial(mon, lose=("engine", 0, "engine replica 0 died"))
    assert host.cancelled == ["t__1"]  # the host reclaims the sandbox, then answers
    assert answer.status == "cancelled" and cause == "engine replica 0 died"


def test_a_host_lost_mid_trial_is_not_waited_on():
    mon = LivenessMonitor(FAST, _participants(), probe=Probes())
    began = time.monotonic()
    (answer, cause), host = _trial(mon, lose=("sandbox", 0, "sandbox host 0 did not answer"))
    assert answer is None and cause == "sandbox host 0 did not answer" and host.cancelled == []
    assert time.monotonic() - began < 0.45  # before the fake host would have answered


def test_a_lost_attempt_is_an_unscored_infrastructure_failure_under_its_own_id():
    from t1.run.ray.liveness import lost_attempt

    record = _record()
    kept = lost_attempt(record, _record("cancelled"), "engine replica 1 died", 0, requeued=True)
    assert kept.trial_id == "t__1-lost1" and kept.status == "failed" and kept.reward is None
    assert kept.cause == "infrastructure: engine replica 1 died; re-queued"
    assert record.trial_id == "t__1" and record.status == "finished"  # the driver's record is untouched
    last = lost_attempt(record, None, "x", 3, requeued=False)
    assert last.trial_id == "t__1-lost4" and "not re-queued" in last.cause
