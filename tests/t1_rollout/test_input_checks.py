"""Bad arguments are refused naming the argument; deadlines are shown as given; a bad cwd is named."""

import asyncio
import math
import os
import shutil
from dataclasses import dataclass

import pytest

from t1_rollout.scheduler import SchedulerConfig, collect_batch
from t1_sandbox.base import SandboxError, format_seconds
from t1_sandbox.local import LocalSandbox
from t1_sandbox.token_bucket import TokenBucket

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"cpu_time_s": math.nan}, ValueError, "cpu_time_s"),
        ({"cpu_time_s": math.inf}, ValueError, "cpu_time_s"),
        ({"cpu_time_s": 0}, ValueError, "cpu_time_s"),
        ({"memory_mb": 0.5}, ValueError, "memory_mb"),  # would have been stored as 0
        ({"memory_mb": -1}, ValueError, "memory_mb"),
        ({"max_processes": 2.5}, ValueError, "max_processes"),
        ({"disk_mb": "10"}, TypeError, "disk_mb"),
        ({"disk_mb": True}, TypeError, "disk_mb"),
        ({"network": "no"}, TypeError, "network"),  # bool("no") is True: it must not turn networking on
    ],
)
def test_local_sandbox_refuses_bad_limits_naming_them(kwargs, error, name):
    with pytest.raises(error, match=name):
        LocalSandbox(**kwargs)


def test_local_sandbox_keeps_good_limits():
    sb = LocalSandbox(cpu_time_s=2.5, memory_mb=512.0, max_processes=64, disk_mb=10)
    assert (sb.cpu_time_s, sb.memory_mb, sb.max_processes, sb.disk_mb) == (2.5, 512, 64, 10)
    assert type(sb.memory_mb) is int


def _config(**kw):
    base = {
        "launched": 2,
        "admitted": 2,
        "concurrency": 2,
        "creation_rate_per_s": 6.0,
        "creation_quota_per_min": 600.0,
    }
    return base | kw


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"admitted": 0}, ValueError, "admitted"),
        ({"launched": 0}, ValueError, "launched"),
        ({"launched": 1}, ValueError, "launch at least as many"),
        ({"launched": 2.0}, TypeError, "launched"),
        ({"concurrency": 0}, ValueError, "concurrency"),
        ({"admitted": 2.0}, TypeError, "admitted"),
        ({"creation_rate_per_s": math.nan}, ValueError, "creation_rate_per_s"),
        ({"creation_rate_per_s": 0.0}, ValueError, "creation_rate_per_s"),
        ({"creation_quota_per_min": math.inf}, ValueError, "creation_quota_per_min"),
        ({"creation_quota_per_min": 0.5}, ValueError, "creation_quota_per_min"),
        ({"creation_rate_per_s": "6"}, TypeError, "creation_rate_per_s"),
    ],
)
def test_scheduler_config_refuses_bad_fields_naming_them(kwargs, error, name):
    with pytest.raises(error, match=name):
        SchedulerConfig(**_config(**kwargs))


@dataclass
class LooseConfig:  # not a SchedulerConfig: collect_batch must check it all the same
    launched: int
    admitted: int
    concurrency: int
    creation_rate_per_s: float
    creation_quota_per_min: float


@dataclass(frozen=True)
class FakeTask:
    id: str
    category: str


class Listed:
    """A task source that launches exactly the given tasks, all from epoch 0."""

    def __init__(self, tasks):
        self.tasks = list(tasks)

    def draw(self, n):
        return [(0, t) for t in self.tasks[:n]]


async def test_collect_batch_refuses_admitted_zero_and_a_nan_rate():
    async def run_one(task, record):
        record.status = "finished"
        return record

    tasks = Listed([FakeTask("a", "f"), FakeTask("b", "f")])
    with pytest.raises(ValueError, match="admitted"):
        await collect_batch(tasks, run_one, LooseConfig(**_config(admitted=0)))
    with pytest.raises(ValueError, match="creation_rate_per_s"):
        await collect_batch(tasks, run_one, LooseConfig(**_config(creation_rate_per_s=math.nan)))
    altered = SchedulerConfig(**_config())
    object.__setattr__(altered, "admitted", 0)
    with pytest.raises(ValueError, match="admitted"):
        await collect_batch(tasks, run_one, altered)


def test_token_bucket_refuses_a_nan_rate():
    with pytest.raises(ValueError):
        TokenBucket(math.nan, 1)
    with pytest.raises(ValueError):
        TokenBucket(1.0, math.nan)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(2.6, "2.6 s"), (0.05, "0.05 s"), (12.34, "12.3 s"), (60, "60 s"), (900.0, "900 s"), (5400, "5400 s")],
)
def test_seconds_are_shown_as_given(seconds, text):
    assert format_seconds(seconds) == text


async def test_remote_deadline_is_reported_with_its_decimals(tmp_path):
    trial = pytest.importorskip("t1_rollout.trial")
    harness = pytest.importorskip("t1_rollout.harness")
    t1_tasks = pytest.importorskip("t1_tasks")

    class HangingSandbox:
        async def __aenter__(self):
            return self

        async def __aexit__(self, *exc):
            return None

        async def start(self, environment_dir, *, timeout_s):
            await asyncio.sleep(3600)

    task = t1_tasks.load_pool("builtin:mini").get("csv-region-totals")
    rec = await trial.run_trial(
        task,
        sandbox_factory=HangingSandbox,
        engine=None,
        tito=None,
        sampling=None,
        harness=harness.HarnessConfig(max_turns=1, agent_deadline_s=1, max_new_tokens=8, context_tokens=64),
        limits=trial.TrialLimits(remote_deadline_s=0.3, agent_deadline_s=0.2, verifier_deadline_s=0.1),
        reward_spec=None,
        out_dir=tmp_path,
    )
    assert rec.status == "failed"
    assert rec.cause == "sandbox_start: remote deadline of 0.3 s exceeded"


@needs_bwrap
async def test_exec_in_a_missing_cwd_is_a_sandbox_error_naming_it(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    async with LocalSandbox() as sb:
        await sb.start(tmp_path, timeout_s=60)
        with pytest.raises(SandboxError, match="'/app/missing'"):
            await sb.exec("true", timeout_s=10, cwd="/app/missing")
        # a command that itself exits 1 is still a result, not an error
        result = await sb.exec("echo out; exit 1", timeout_s=10, cwd="/app")
        assert result.exit_code == 1 and result.stdout == "out\n"
        with pytest.raises(ValueError, match="cpu_time_s"):
            await sb.exec("true", timeout_s=10, cpu_time_s=math.nan)
