"""Partial-rollout continuation (T1 §10) in the scheduler: the tail parks at turn boundaries and is continued.

The trials here run the real harness (`t1_rollout.harness.run_episode`) against a fake engine and shell,
without a sandbox: a set of live trial ids stands for their sandboxes (added when a trial starts, removed on
every way out), so a test sees whether a parked trial kept its sandbox and whether a cancelled one gave it
back. Ordering comes from events, not from wall-clock races, except where a bound is what is tested.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import numpy as np
import pytest

from t1_rollout.continuation import Continuation, ContinuationConfig
from t1_rollout.engine.base import Generation, SamplingParams
from t1_rollout.harness import Episode, HarnessConfig, run_episode
from t1_rollout.parking import Parking, ParkRequested
from t1_rollout.scheduler import SchedulerConfig, collect_batch
from t1_tito import ChatTemplate, TitoSession, load_tokenizer

L, K = 2, 2


@pytest.fixture(scope="module")
def tito():
    return TitoSession(load_tokenizer("qwen3.5"), ChatTemplate())


@dataclass(frozen=True)
class FakeTask:
    id: str
    category: str = "fam"


@dataclass
class Plan:
    """One fake task: turns to sample, seconds per engine call, and what gates its calls or its commands."""

    turns: int = 1
    call_s: float = 0.0
    gate: asyncio.Event | None = None  # every engine call waits for it first
    command: str | None = None  # answer with this command instead of a parse error
    command_s: float = 0.0  # how long the shell takes to run it
    verifier_s: float = 0.0  # after the episode, before the trial finishes


@dataclass
class World:
    """The engine's weight version, the trials' live 'sandboxes', events the plans wait on, counters."""

    tito: TitoSession
    plans: dict[str, Plan]
    version: int = 0
    live: set[str] = field(default_factory=set)
    answered: dict[str, int] = field(default_factory=dict)
    aborted: dict[str, int] = field(default_factory=dict)
    first_turns: asyncio.Event = field(default_factory=asyncio.Event)
    first_turns_of: frozenset[str] = frozenset()
    command_started: asyncio.Event = field(default_factory=asyncio.Event)
    episode_done: asyncio.Event = field(default_factory=asyncio.Event)


class FakeEngine:
    """Answers a parse error (or the plan's command) after ``call_s``; routing rows in SGLang's shape."""

    def __init__(self, world: World, task_id: str) -> None:
        self.world, self.task_id, self.plan = world, task_id, world.plans[task_id]

    @property
    def weight_version(self) -> int:
        return self.world.version

    async def generate(
        self,
        input_ids,
        sampling,
        *,
        return_logprob=True,
        return_routed_experts=True,
        routed_experts_start_len=0,
    ):
        w, plan = self.world, self.plan
        try:
            if plan.gate is not None:
                await plan.gate.wait()
            await asyncio.sleep(plan.call_s)
        except asyncio.CancelledError:
            w.aborted[self.task_id] = w.aborted.get(self.task_id, 0) + 1
            raise
        if plan.command is not None:
            cmds = [{"keystrokes": plan.command, "duration": 0.0}]
            text = json.dumps({"analysis": "a", "plan": "p", "commands": cmds, "task_complete": False})
        else:
            text = "not json"
        out = w.tito.tokenizer.encode(text) + [w.tito.tokenizer.im_end_id]
        rows = len(input_ids) + len(out) - 1 - routed_experts_start_len
        w.answered[self.task_id] = w.answered.get(self.task_id, 0) + 1
        if w.first_turns_of and all(w.answered.get(t, 0) >= 1 for t in w.first_turns_of):
            w.first_turns.set()
        return Generation(
            output_ids=out,
            output_logprobs=[-0.5] * len(out),
            routed_experts=np.full((rows, L, K), w.version % 2, dtype=np.int32),
            routed_experts_start_len=routed_experts_start_len,
            weight_version=w.version,
            finish_reason="stop",
            prompt_tokens=len(input_ids),
            completion_tokens=len(out),
            latency_s=0.0,
        )


class FakeShell:
    def __init__(self, world: World, plan: Plan) -> None:
        self.world, self.plan = world, plan

    async def send(self, keystrokes, *, duration_s, max_wait_s):
        if keystrokes and keystrokes == self.plan.command:
            self.world.command_started.set()
            await asyncio.sleep(self.plan.command_s)
        return "$ "


def run_one_in(world: World):
    """A trial without a sandbox: the harness's episode (parking as the record says), then a 'verifier'."""

    async def run_one(task, record):
        plan = world.plans[task.id]
        world.live.add(record.trial_id)
        try:
            record.episode = Episode()
            await run_episode(
                instruction="do it",
                shell=FakeShell(world, plan),
                engine=FakeEngine(world, task.id),
                tito=world.tito,
                sampling=SamplingParams(),
                config=HarnessConfig(
                    max_turns=plan.turns, agent_deadline_s=60, max_new_tokens=16, context_tokens=4000
                ),
                episode=record.episode,
                parking=record.parking,
            )
            world.episode_done.set()
            await asyncio.sleep(plan.verifier_s)
            record.status = "finished"
            return record
        except asyncio.CancelledError:
            record.status, record.cause = "cancelled", "agent: cancelled by the scheduler"
            raise
        finally:
            world.live.discard(record.trial_id)

    return run_one


class Draws:
    """Hands out the listed tasks in order, never one of ``exclude``; records what it was asked."""

    def __init__(self, tasks: list[FakeTask]) -> None:
        self.tasks, self.asked = list(tasks), []

    def draw(self, n, *, exclude=frozenset()):
        self.asked.append((n, set(exclude)))
        out = [t for t in self.tasks if t.id not in exclude][:n]
        self.tasks = [t for t in self.tasks if t not in out]
        return [(7, t) for t in out]


def _config(launched, admitted, concurrency=None):
    return SchedulerConfig(
        launched=launched,
        admitted=admitted,
        concurrency=concurrency or launched,
        creation_rate_per_s=1000,
        creation_quota_per_min=60000,
    )


TURNS = 30
"""Turns of a slow trial: many more than step 1 leaves it time for."""


def _versions(record):
    return [t.policy_version for t in record.episode.turns]


def test_the_tail_parks_alive_and_is_continued_under_the_new_version_then_cut_at_max_resumes(tito):
    """Two steps on one event loop (an asyncio.Runner, as the embedded loop holds one)."""
    with asyncio.Runner() as runner:
        runner.run(_two_steps(tito))


async def _two_steps(tito):
    never = asyncio.Event()  # c and d wait on it in step 2: they are the slow tail there
    world = World(tito, plans={})
    fast_gate = world.first_turns  # a and b finish once every slow trial has sampled a turn
    for t in ("a", "b"):
        world.plans[t] = Plan(turns=1, gate=fast_gate)
    # x and y take about 0.3 s to finish in step 2, z about 0.9 s: z is step 2's tail
    world.plans.update(x=Plan(turns=TURNS, call_s=0.01), y=Plan(turns=TURNS, call_s=0.01))
    world.plans["z"] = Plan(turns=TURNS, call_s=0.03)
    for t in ("c", "d"):
        world.plans[t] = Plan(turns=TURNS, gate=never)
    world.first_turns_of = frozenset({"x", "y", "z"})
    source = Draws([FakeTask(t) for t in ("a", "b", "x", "y", "z", "c", "d")])
    cont = Continuation(ContinuationConfig(max_resumes=1, park_timeout_s=30.0))
    run_one = run_one_in(world)

    # step 1: a and b are admitted; x, y, z are parked, their sandboxes alive, their turns of version 0
    step1 = await collect_batch(source, run_one, _config(5, 2), continuation=cont)
    assert sorted(r.task_id for r in step1.admitted) == ["a", "b"]
    assert sorted(r.task_id for r in step1.parked) == ["x", "y", "z"] and step1.cancelled == []
    assert all(r.status == "parked" for r in step1.parked)
    assert world.live == {r.trial_id for r in step1.parked}  # parked, not reclaimed
    assert len(cont) == 3 and all(1 <= len(r.episode.turns) < TURNS for r in step1.parked)
    before = {r.trial_id: [t.output_ids.copy() for t in r.episode.turns] for r in step1.parked}
    m1 = step1.metrics()
    assert (m1["trials_parked"], m1["trials_resumed"], m1["trials_cancelled_max_resumes"]) == (3, 0, 0)
    assert m1["retention_by_family_outcome"]["fam"]["continued"] == 3
    assert m1["retention_by_reward"]["unscored"]["continued"] == 3

    world.version = 1  # the step's training published new weights

    # step 2: the three are continued first (their tasks are not drawn again); c and d fill the rest
    step2 = await collect_batch(source, run_one, _config(5, 2), continuation=cont)
    assert source.asked[-1] == (2, {"x", "y", "z"})
    assert [r.task_id for r in step2.resumed] == sorted(r.task_id for r in step1.parked)
    assert step2.epochs == [7] * 5
    kept = step2.admitted
    assert sorted(r.task_id for r in kept) == ["x", "y"]
    for r in kept:
        v = _versions(r)
        assert len(v) == TURNS and v == sorted(v) and set(v) == {0, 1}  # earlier turns kept, new ones at v1
        assert r.resumes == 1
        assert [t.output_ids.tolist() for t in r.episode.turns[: len(before[r.trial_id])]] == [
            o.tolist() for o in before[r.trial_id]
        ]
    # the third continued trial is cut at max_resumes, its sandbox reclaimed; c and d are parked in turn
    (cut,) = [r for r in step2.cancelled if r.task_id == "z"]
    assert "rollout.continuation.max_resumes" in cut.cause and cut.trial_id not in world.live
    assert sorted(r.task_id for r in step2.parked) == ["c", "d"]
    # c and d waited on the engine when asked: their requests were aborted, no turn recorded
    assert world.aborted["c"] == world.aborted["d"] == 1
    assert all(r.episode.turns == [] and r.episode.resampled_turns == 1 for r in step2.parked)
    m2 = step2.metrics()
    assert m2["trials_resumed"] == 3 and m2["trials_resumed_admitted"] == 2
    assert m2["trials_cancelled_max_resumes"] == 1 and m2["trials_parked"] == 2
    assert m2["sampled_tokens_by_policy_version"].keys() == {"0", "1"}
    assert m2["retention_by_family_outcome"]["fam"] == {
        "launched": 5, "kept": 2, "finished_late": 0, "cancelled": 1, "failed": 0, "dropped": 0,
        "continued": 2, "retention": 0.4,
    }  # fmt: skip

    # the end of the run: what is still parked is cancelled, every sandbox reclaimed
    released = await cont.cancel_all("the run ended")
    assert sorted(r.task_id for r in released) == ["c", "d"] and len(cont) == 0
    assert all(r.status == "cancelled" and "the run ended" in r.cause for r in released)
    assert world.live == set()


async def test_a_command_still_running_past_the_bound_is_cancelled_and_reclaimed(tito):
    world = World(tito, plans={})
    world.plans["s"] = Plan(turns=3, command="sleep 30\n", command_s=30.0)
    world.plans["a"] = Plan(turns=1, gate=world.command_started)  # a finishes once s runs its command
    cont = Continuation(ContinuationConfig(max_resumes=1, park_timeout_s=0.2))
    batch = await collect_batch(
        Draws([FakeTask("s"), FakeTask("a")]), run_one_in(world), _config(2, 1), continuation=cont
    )
    assert [r.task_id for r in batch.admitted] == ["a"]
    (cut,) = batch.cancelled
    assert cut.task_id == "s" and "park_timeout_s=0.2 s" in cut.cause
    assert len(cont) == 0 and world.live == set()
    assert batch.metrics()["trials_cancelled_unparked"] == 1


async def test_a_trial_in_its_verifier_finishes_and_its_record_is_carried_to_the_next_batch(tito):
    world = World(tito, plans={})
    world.plans["v"] = Plan(turns=1, verifier_s=0.2)
    world.plans["a"] = Plan(turns=1, gate=world.episode_done)  # a finishes while v is verifying
    world.plans["b"] = Plan(turns=1, call_s=0.5)  # still sampling when the carried v is admitted
    cont = Continuation(ContinuationConfig(max_resumes=1, park_timeout_s=10.0))
    source = Draws([FakeTask("v"), FakeTask("a"), FakeTask("b")])
    first = await collect_batch(source, run_one_in(world), _config(2, 1), continuation=cont)
    assert [r.task_id for r in first.admitted] == ["a"]
    (carried,) = first.parked
    assert carried.task_id == "v" and carried.status == "finished" and len(cont) == 1
    assert first.metrics()["trials_parked_finished"] == 1
    second = await collect_batch(source, run_one_in(world), _config(2, 1), continuation=cont)
    assert second.admitted == [carried] and carried.resumes == 1  # continued first, no second verifier
    assert [r.task_id for r in second.parked] == ["b"]
    await cont.cancel_all("the test ended")
    assert world.live == set()


async def test_trials_not_started_when_the_batch_fills_are_cancelled_as_without_continuation(tito):
    world = World(tito, plans={t: Plan(turns=1) for t in ("a", "b", "c")})
    world.plans["b"] = Plan(turns=6, call_s=0.05)
    cont = Continuation(ContinuationConfig(max_resumes=1, park_timeout_s=10.0))
    tasks = [FakeTask(t) for t in ("a", "b", "c")]
    batch = await collect_batch(
        Draws(tasks), run_one_in(world), _config(3, 1, concurrency=1), continuation=cont
    )
    assert [r.task_id for r in batch.admitted] == ["a"]
    unstarted = [r for r in batch.cancelled if r.episode is None]
    assert unstarted and all(r.cause == "scheduler: cancelled before it started" for r in unstarted)
    assert {r.task_id for r in batch.parked} | {r.task_id for r in unstarted} == {"b", "c"}
    await cont.cancel_all("the test ended")
    assert world.live == set()


async def test_a_stop_during_a_batch_cancels_the_continued_trials_too(tito):
    world = World(tito, plans={"x": Plan(turns=TURNS, call_s=0.05)})
    world.plans["a"] = Plan(turns=1, gate=world.first_turns)
    world.first_turns_of = frozenset({"x"})
    world.plans["b"] = Plan(turns=1, gate=asyncio.Event())  # never set: the second batch never fills
    world.plans["c"] = Plan(turns=1, gate=world.plans["b"].gate)
    cont = Continuation(ContinuationConfig(max_resumes=1, park_timeout_s=10.0))
    source = Draws([FakeTask(t) for t in ("x", "a", "b", "c")])
    await collect_batch(source, run_one_in(world), _config(2, 1), continuation=cont)
    assert len(cont) == 1 and len(world.live) == 1
    second = asyncio.ensure_future(collect_batch(source, run_one_in(world), _config(2, 1), continuation=cont))
    await asyncio.sleep(0.3)
    second.cancel()  # Ctrl-C: run_interruptible cancels the rollout
    with pytest.raises(asyncio.CancelledError):
        await second
    assert world.live == set() and len(cont) == 0


async def test_groups_are_refused_with_continuation():
    config = SchedulerConfig(
        launched=4,
        admitted=2,
        concurrency=4,
        creation_rate_per_s=10,
        creation_quota_per_min=600,
        samples_per_task=2,
    )
    cont = Continuation(ContinuationConfig(max_resumes=1, park_timeout_s=1.0))
    with pytest.raises(ValueError, match="groups are not built"):
        await collect_batch(Draws([]), None, config, continuation=cont)


# ---- the trial's side: parking, aborting a generation, stopped deadlines ----


async def test_a_generation_in_flight_is_aborted_when_parking_is_asked():
    parking, cancelled = Parking(), asyncio.Event()

    async def generate():
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    call = asyncio.ensure_future(parking.unless_asked(generate()))
    await asyncio.sleep(0.01)
    parking.ask()
    with pytest.raises(ParkRequested):
        await call
    assert cancelled.is_set()  # the engine saw the cancellation (and drops the request)


async def test_a_generation_that_finished_is_kept_although_parking_was_asked():
    parking = Parking()

    async def generate():
        parking.ask()  # asked while the answer is already on its way
        return "whole turn"

    assert await parking.unless_asked(generate()) == "whole turn"


async def test_deadlines_are_stopped_while_parked_and_keep_what_was_left():
    parking = Parking()
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(0.5) as deadline:
        with parking.stopped_while_parked(deadline):
            left_before = deadline.when() - loop.time()
            parking.ask()
            parked = asyncio.ensure_future(parking.boundary())
            await parking.wait_parked()
            assert deadline.when() is None  # stopped
            await asyncio.sleep(0.7)  # longer than the whole deadline: it must not fire
            parking.resume()
            await parked
            left_after = deadline.when() - loop.time()
    assert left_after == pytest.approx(left_before, abs=0.1)
    assert parking.parked_s >= 0.7 and parking.parks == 1 and not parking.parked


def test_continuation_config_refuses_bad_limits():
    with pytest.raises(ValueError, match="max_resumes"):
        ContinuationConfig(max_resumes=0, park_timeout_s=1.0)
    with pytest.raises(ValueError, match="park_timeout_s"):
        ContinuationConfig(max_resumes=1, park_timeout_s=0.0)


def test_a_batch_that_a_checkpoint_follows_continues_what_is_held_and_cancels_its_own_tail(tito):
    """``park_tail=False``: the carried trials run on, the tail is cancelled, nothing is held afterwards."""
    with asyncio.Runner() as runner:
        runner.run(_checkpoint_step(tito))


async def _checkpoint_step(tito):
    never = asyncio.Event()
    world = World(tito, plans={})
    for t in ("a", "b"):
        world.plans[t] = Plan(turns=1, gate=world.first_turns)
    world.plans.update(x=Plan(turns=TURNS, call_s=0.01), y=Plan(turns=TURNS, call_s=0.01))
    for t in ("c", "d", "e"):
        world.plans[t] = Plan(turns=TURNS, gate=never)
    world.first_turns_of = frozenset({"x", "y"})
    source = Draws([FakeTask(t) for t in ("a", "b", "x", "y", "c", "d", "e")])
    cont = Continuation(ContinuationConfig(max_resumes=2, park_timeout_s=30.0))
    run_one = run_one_in(world)

    step1 = await collect_batch(source, run_one, _config(4, 2), continuation=cont)
    assert sorted(r.task_id for r in step1.parked) == ["x", "y"] and len(cont) == 2
    world.version = 1

    # a checkpoint follows step 2: x and y are continued (not drawn again), c, d and e are the tail
    step2 = await collect_batch(source, run_one, _config(5, 2), continuation=cont, park_tail=False)
    assert source.asked[-1] == (3, {"x", "y"})
    assert sorted(r.task_id for r in step2.admitted) == ["x", "y"]
    assert all(set(_versions(r)) == {0, 1} for r in step2.admitted)
    assert step2.parked == [] and len(cont) == 0  # nothing held: the checkpoint saves the whole state
    assert sorted(r.task_id for r in step2.cancelled) == ["c", "d", "e"]
    assert all(r.status == "cancelled" for r in step2.cancelled)
    assert world.live == set()  # every sandbox of the tail reclaimed before the batch returned
