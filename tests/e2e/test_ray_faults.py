"""Fault tests of the Ray loop on a local cluster: a replica and a sandbox host killed or hung mid-step.

`recipes/tiny-ray.yaml` with two engine replicas and two sandbox hosts. The fault is injected from the
driver the moment a trial of step 0 has been sent to its participants, so it always lands mid-step and
mid-trial. The run must finish; the lost trial is kept as an infrastructure failure under its own file,
never scored, and re-queued on the participants left; the lost actors are killed at the next barrier and
every Ray process is gone after the run (T1 §7.3).
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.ray]

FAULTS = [
    "runtime.ray.sandbox_hosts=2",
    "runtime.mode=sync",
    "ppo.steps=2",
    # probes soon after placement, so that a hang is found within seconds rather than the paper's minutes
    "liveness.probe_grace_s=10",
    "liveness.probe_period_s=1",
    "liveness.probe_deadline_s=8",
]


def _faulty_run(tmp_path: Path, monkeypatch, tiny_ray, faults: list[tuple[str, int]]):
    """Run tiny-ray, sending ``faults[i]`` = (role, signal) to the participant of the i-th trial sent."""
    pytest.importorskip("ray", reason="the ray package (t1[ray] extra) is not installed")
    from t1.run.ray.rollout import RayTrials

    original = RayTrials.wait_trial
    injected: list[tuple[str, int, int]] = []

    pids: dict[tuple[str, int], int] = {}

    async def wait_trial(self, future, record, k, h):
        if not pids:  # asked once, before any fault: every participant answers then
            for role, actors in (("engine", self.replicas), ("sandbox", self.hosts)):
                for i, actor in enumerate(actors):
                    pids[role, i] = (await actor.stats.remote())["pid"]
        if len(injected) < len(faults):
            role, sig = faults[len(injected)]
            index = k if role == "engine" else h
            os.kill(pids[role, index], sig)
            injected.append((role, index, sig))
        return await original(self, future, record, k, h)

    monkeypatch.setattr(RayTrials, "wait_trial", wait_trial)
    run, summary = tiny_ray(tmp_path, FAULTS)
    return run, summary, injected


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "trajectories").glob("*/*.json"))]


def _check_the_run_went_on(run, summary, injected, no_ray_left, rows_of) -> list[dict]:
    assert summary.steps == 2
    status = json.loads((summary.run_dir / "status.json").read_text())
    assert status["status"] == "finished", status
    rows = rows_of(summary.run_dir)
    lost = rows[-1]["participants_lost"]
    for role, index, _ in injected:
        assert str(index) in lost[role], (role, index, lost)
    records = _records(summary.run_dir)
    lost_attempts = [r for r in records if re.search(r"-lost\d+$", r["trial_id"])]
    # each lost attempt is an infrastructure failure, kept with its cause, never scored, and re-queued
    assert lost_attempts
    for r in lost_attempts:
        assert r["status"] == "failed" and r["reward"] is None
        assert r["cause"].startswith("infrastructure: ") and "re-queued" in r["cause"]
    assert sum(row["trials_requeued"] for row in rows) >= len(lost_attempts)
    # the re-queued trial ran again under its own id on what was left, and nothing scored was lost
    reruns = []
    for r in lost_attempts:
        (again,) = [x for x in records if x["trial_id"] == r["trial_id"].rsplit("-lost", 1)[0]]
        assert again["status"] in ("finished", "cancelled"), again  # cancelled: the full batch's tail
        reruns.append(again)
    assert any(x["status"] == "finished" for x in reruns), reruns
    for row in rows:
        assert row["trials_admitted"] == 2 and row["batch_shortfall"] == 0
        assert row["trials_failed"] == 0  # no admitted-or-not trial was scored as the agent's failure
    # the lost replica served nothing after it was lost; the live one took the rest
    assert rows[-1]["replica_requests"].count(None) == len(lost["engine"])
    no_ray_left(run)
    return rows


def test_a_killed_replica_and_a_killed_host_are_reclaimed_and_the_run_goes_on(
    tmp_path, monkeypatch, tiny_ray, no_ray_left, rows_of
):
    run, summary, injected = _faulty_run(
        tmp_path, monkeypatch, tiny_ray, [("engine", signal.SIGKILL), ("sandbox", signal.SIGKILL)]
    )
    rows = _check_the_run_went_on(run, summary, injected, no_ray_left, rows_of)
    assert len(rows[-1]["participants_lost"]["engine"]) == 1
    assert len(rows[-1]["participants_lost"]["sandbox"]) == 1


def test_a_hung_replica_and_a_hung_host_are_found_by_their_probes(
    tmp_path, monkeypatch, tiny_ray, no_ray_left, rows_of
):
    run, summary, injected = _faulty_run(
        tmp_path, monkeypatch, tiny_ray, [("engine", signal.SIGSTOP), ("sandbox", signal.SIGSTOP)]
    )
    rows = _check_the_run_went_on(run, summary, injected, no_ray_left, rows_of)
    causes = [
        *rows[-1]["participants_lost"]["engine"].values(),
        *rows[-1]["participants_lost"]["sandbox"].values(),
    ]
    assert causes and all("did not answer a liveness probe within 8 s" in c for c in causes), causes
