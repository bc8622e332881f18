"""The driver's side of continuation on Ray (`t1.run.ray.rollout.RayTrials._bridge`) over fake hosts.

The handshake carries the scheduler's park request to the trial on its sandbox host and the resume back;
when the host does not answer the resume, the host's trial must not stay parked for good: it is cancelled
on the host, and the trial is a failure of the run (infrastructure), never the agent's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses

from t1.run.ray.rollout import RayTrials
from t1_rollout.parking import Parking
from t1_rollout.trial import TrialRecord


class Call:
    """``actor.method`` as Ray exposes it: ``.remote(...)`` returns a ref whose ``.future()`` is awaited."""

    def __init__(self, answer) -> None:
        self.answer, self.calls = answer, []

    def remote(self, *args):
        self.calls.append(args)
        fut: concurrent.futures.Future = concurrent.futures.Future()
        if isinstance(self.answer, Exception):
            fut.set_exception(self.answer)
        else:
            fut.set_result(self.answer(*args) if callable(self.answer) else self.answer)
        return type("Ref", (), {"future": lambda _self: fut})()


def _trials(host) -> RayTrials:
    return RayTrials(None, replicas=[], hosts=[host], liveness=None, validated={}, reclaim=lambda **_: None)


async def _bridge_with(resume_answer):
    record = TrialRecord("t__1", "t", "fam", parking=Parking())
    snapshot = dataclasses.replace(record, parking=None, status="parked")
    host = type("Host", (), {})()
    host.park, host.wait_parked = Call(None), Call(snapshot)
    host.resume, host.cancel = Call(resume_answer), Call(True)
    trials = _trials(host)
    trial = asyncio.get_running_loop().create_future()  # the host's trial: runs on until cancelled
    bridge = asyncio.ensure_future(trials._bridge(record, 0, trial))
    record.parking.ask()
    await asyncio.wait_for(record.parking.wait_parked(), 10)  # parked here as on the host
    record.parking.resume()
    await asyncio.wait_for(asyncio.shield(bridge), 10)  # the failed resume ends the handshake
    return trials, host, record, bridge, trial


def test_a_resume_the_host_fails_cancels_the_trial_on_the_host_as_the_runs_failure():
    async def main():
        trials, host, record, bridge, _ = await _bridge_with(RuntimeError("ActorDiedError"))
        assert bridge.done() and bridge.exception() is None
        assert host.park.calls == [("t__1",)] and host.cancel.calls == [("t__1",)]
        cause = trials.bridge_failed["t__1"]
        assert cause.startswith("infrastructure:") and "ActorDiedError" in cause

    asyncio.run(main())


def test_a_resume_the_host_answers_leaves_the_trial_running():
    async def main():
        record = TrialRecord("t__2", "t", "fam", parking=Parking())
        snapshot = dataclasses.replace(record, parking=None, status="parked")
        host = type("Host", (), {})()
        host.park, host.wait_parked, host.resume, host.cancel = (
            Call(None),
            Call(snapshot),
            Call(True),
            Call(True),
        )
        trials = _trials(host)
        trial = asyncio.get_running_loop().create_future()
        bridge = asyncio.ensure_future(trials._bridge(record, 0, trial))
        record.parking.ask()
        await asyncio.wait_for(record.parking.wait_parked(), 10)
        record.parking.resume()
        for _ in range(200):  # the resume reaches the host
            if host.resume.calls:
                break
            await asyncio.sleep(0.01)
        assert host.resume.calls == [("t__2",)] and host.cancel.calls == [] and not trials.bridge_failed
        trial.set_result(None)  # the trial ends: the bridge ends with it
        bridge.cancel()
        await asyncio.gather(bridge, return_exceptions=True)

    asyncio.run(main())
