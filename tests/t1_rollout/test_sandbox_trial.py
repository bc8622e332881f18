"""A trial's sandbox is gone after the trial: when it ends, when it raises, when it is cancelled."""

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from t1_sandbox.local import LocalSandbox
from t1_sandbox.local.uids import pids_of_uid

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)

trial = pytest.importorskip("t1_rollout.trial")
harness = pytest.importorskip("t1_rollout.harness")
engine_base = pytest.importorskip("t1_rollout.engine.base")
t1_tito = pytest.importorskip("t1_tito")
t1_spec = pytest.importorskip("t1_spec")
t1_tasks = pytest.importorskip("t1_tasks")


class Recorder:
    """Sandbox factory that remembers each sandbox's host uid and directory while the trial runs."""

    def __init__(self):
        self.sandboxes: list[LocalSandbox] = []
        self.seen: list[tuple[int, Path, int]] = []  # uid, root, live processes while the agent ran

    def __call__(self) -> LocalSandbox:
        sb = LocalSandbox()
        self.sandboxes.append(sb)
        return sb

    def observe(self) -> None:
        for sb in self.sandboxes:
            self.seen.append((sb.uid, sb.host_root, len(pids_of_uid(sb.uid))))

    def assert_gone(self) -> None:
        assert self.seen, "the engine was never called inside the trial"
        for uid, root, live in self.seen:
            assert live >= 1 and root is not None, "the sandbox was not running during the trial"
            assert pids_of_uid(uid) == [], f"processes of sandbox uid {uid} survived the trial"
            assert not root.exists(), f"sandbox directory {root} survived the trial"


class FakeEngine:
    """An engine whose generate observes the live sandbox, then raises, hangs, or is cancelled."""

    def __init__(self, recorder: Recorder, behaviour: str):
        self.recorder = recorder
        self.behaviour = behaviour
        self.weight_version = 0

    async def generate(self, input_ids, sampling, **kwargs):
        self.recorder.observe()
        if self.behaviour == "raise":
            raise RuntimeError("engine exploded mid-trial")
        await asyncio.sleep(3600)  # "hang": ended by the agent deadline or by cancellation


def _run(recorder: Recorder, behaviour: str, tmp_path: Path, *, agent_deadline_s: float = 1.0):
    task = t1_tasks.load_pool("builtin:mini").get("csv-region-totals")
    return trial.run_trial(
        task,
        sandbox_factory=recorder,
        engine=FakeEngine(recorder, behaviour),
        tito=t1_tito.TitoSession(t1_tito.load_tokenizer(), t1_tito.ChatTemplate()),
        sampling=engine_base.SamplingParams(max_new_tokens=8),
        harness=harness.HarnessConfig(
            max_turns=2, agent_deadline_s=agent_deadline_s, max_new_tokens=8, context_tokens=8192
        ),
        limits=trial.TrialLimits(
            remote_deadline_s=120, agent_deadline_s=agent_deadline_s, verifier_deadline_s=60
        ),
        reward_spec=t1_spec.reward.DenseRewardSpec(),
        out_dir=tmp_path,
    )


async def test_sandbox_is_gone_after_a_trial_that_ends(tmp_path):
    recorder = Recorder()
    rec = await _run(recorder, "hang", tmp_path)  # agent deadline, then the verifier grades what is left
    assert rec.verifier is not None and rec.verifier.error is None
    recorder.assert_gone()


async def test_sandbox_is_gone_after_a_trial_that_raises(tmp_path):
    recorder = Recorder()
    rec = await _run(recorder, "raise", tmp_path)
    assert rec.status == "failed" and "engine exploded" in rec.cause
    recorder.assert_gone()


async def test_sandbox_is_gone_after_a_cancelled_trial(tmp_path):
    recorder = Recorder()
    task = asyncio.ensure_future(_run(recorder, "hang", tmp_path, agent_deadline_s=600))
    while not recorder.seen:
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    recorder.assert_gone()
