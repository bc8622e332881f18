"""The Daytona backend's real SDK code against a local fake of the Daytona HTTP API (``daytona_fake.py``).

What the fake can show: the requests the SDK sends (resources, intervals, labels, paths), deadlines on every
call, deletion on every exit path, orphan cleanup by label, and the exec, upload and download semantics of
the seam (the fake runs commands on this host under bubblewrap). What it cannot show (a real account's
images, quotas, network policy, isolation) is in ``docs/backends/daytona.md``.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import sys
from pathlib import Path

import pytest

from t1_sandbox import SANDBOXES, SandboxError, SandboxTimeout
from t1_sandbox.daytona import DaytonaSandbox, reclaim_run
from t1_sandbox.daytona.config import RUN_LABEL
from t1_spec import DaytonaSandboxSpec, load_recipe

sys.path.insert(0, str(Path(__file__).parent))
from daytona_fake import FakeDaytona  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="the fake Daytona runs commands with bwrap"
)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    server = FakeDaytona(tmp_path).start()
    monkeypatch.setenv("DAYTONA_API_KEY", "test-key")
    monkeypatch.setenv("DAYTONA_API_URL", server.url)
    yield server
    server.stop()


def _task(
    tmp_path: Path, toml: str = "", dockerfile: str = "FROM debian:bookworm-slim\nWORKDIR /app\n"
) -> Path:
    task = tmp_path / "hello-task"
    (task / "environment").mkdir(parents=True, exist_ok=True)
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    (task / "task.toml").write_text(toml)
    return task / "environment"


def _spec(**fields) -> DaytonaSandboxSpec:
    return DaytonaSandboxSpec(control_timeout_s=3, **fields)


def test_the_registry_loads_the_daytona_backend():
    assert SANDBOXES.load("daytona") is DaytonaSandbox


def test_create_sends_the_task_resources_and_the_intervals_from_the_deadline(fake, tmp_path):
    env = _task(tmp_path, '[environment]\ncpus = 2\nmemory_mb = 1536\nstorage = "10G"\n')
    spec = _spec(cpus=4, memory_gib=8, disk_gib=20)  # the most a sandbox gets: the task asks for less
    # the production recipe's deadline: 5400 s remote -> at least 90 minutes of auto-stop (T1 §7.4)
    recipe = load_recipe(REPO / "recipes" / "t1-122b.yaml")
    assert spec.auto_stop_min == math.ceil(recipe.rollout.remote_deadline_s / 60) == 90

    async def go():
        async with DaytonaSandbox.from_spec(spec, run_id="run-a") as sb:
            await sb.start(env, timeout_s=30)
            return sb.sandbox_id

    sid = asyncio.run(go())
    (body,) = fake.calls("create")
    assert (body["cpu"], body["memory"], body["disk"]) == (2, 2, 10)  # 1536 MiB rounds up to 2 GiB
    assert (body["autoStopInterval"], body["autoDeleteInterval"]) == (90, 0)
    assert body["labels"][RUN_LABEL] == "run-a" and body["labels"]["t1.task"] == "hello-task"
    assert body["networkBlockAll"] is True
    assert body["buildInfo"]["dockerfileContent"].startswith("FROM debian:bookworm-slim")
    assert fake.deleted == [sid]


def test_recipe_resources_cap_the_task_and_apply_where_it_names_none_and_docker_image_wins(fake, tmp_path):
    env = _task(
        tmp_path, '[environment]\ndocker_image = "alexgshaw/fix-git:20251031"\ncpus = 4\nmemory = "8G"\n'
    )

    async def go():
        async with DaytonaSandbox.from_spec(_spec(cpus=1, memory_gib=3, disk_gib=7, network=True)) as sb:
            await sb.start(env, timeout_s=30)

    asyncio.run(go())
    (body,) = fake.calls("create")
    assert (body["cpu"], body["memory"], body["disk"]) == (1, 3, 7)
    assert body["buildInfo"]["dockerfileContent"] == "FROM alexgshaw/fix-git:20251031\n"
    assert body["networkBlockAll"] is False


def test_a_snapshot_is_created_from_by_name(fake, tmp_path):
    async def go():
        async with DaytonaSandbox.from_spec(_spec(snapshot="t1-base")) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)

    asyncio.run(go())
    (body,) = fake.calls("create")
    assert body["snapshot"] == "t1-base" and "buildInfo" not in body


def test_exec_keeps_streams_apart_and_kills_the_group_at_the_deadline(fake, tmp_path):
    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)
            ok = await sb.exec(
                "echo out; echo err >&2; printf '\\377'; exit 3", timeout_s=10, env={"A": "b c"}
            )
            env = await sb.exec('printf %s "$A"; pwd', timeout_s=10, env={"A": "it's"}, cwd="/tmp")
            slow = await sb.exec("(sleep 30; touch /tmp/survivor) & sleep 30", timeout_s=1)
            await asyncio.sleep(0.5)
            gone = await sb.exec("ls /tmp", timeout_s=10)
            with pytest.raises(SandboxError, match="not usable"):
                await sb.exec("true", timeout_s=5, cwd="/nowhere")
            return ok, env, slow, gone

    ok, env, slow, gone = asyncio.run(go())
    assert (ok.stdout, ok.stderr, ok.exit_code, ok.timed_out) == ("out\n\ufffd", "err\n", 3, False)
    assert env.stdout == "it's/tmp\n" and env.ok
    assert slow.timed_out and slow.exit_code is None and slow.duration_s < 6
    assert "survivor" not in gone.stdout
    (execute, *_) = fake.calls("execute")
    assert execute["timeout"] >= 10  # the toolbox's own 10 s default is never what bounds a command


def test_upload_and_download_round_trip_and_read_only_removes_write_bits(fake, tmp_path):
    tests = tmp_path / "tests"
    (tests / "sub").mkdir(parents=True)
    (tests / "test.sh").write_text("echo hi\n")
    (tests / "sub" / "data.txt").write_bytes(b"\x00\x01data")
    single = tmp_path / "one.txt"
    single.write_text("one")

    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)
            await sb.upload(tests, "/tests", read_only=True, timeout_s=20)
            await sb.upload(single, "/app/one.txt", timeout_s=20)
            modes = await sb.exec("stat -c '%a %u' /tests/test.sh /tests/sub/data.txt", timeout_s=10)
            await sb.exec("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt", timeout_s=10)
            await sb.download("/logs/verifier", tmp_path / "out", timeout_s=20)
            await sb.download("/app/one.txt", tmp_path / "back.txt", timeout_s=20)
            with pytest.raises(SandboxError, match="download /missing"):
                await sb.download("/missing", tmp_path / "none", timeout_s=20)

            return modes

    modes = asyncio.run(go())
    assert [line.split()[0] for line in modes.stdout.splitlines()] == ["444", "444"]
    assert (tmp_path / "out" / "reward.txt").read_text() == "1\n"
    assert (tmp_path / "back.txt").read_text() == "one"


@pytest.mark.parametrize(
    ("route", "call"),
    [
        ("upload", r"^daytona upload /app/x \(transfer\): no answer within 2 s"),
        ("execute", r"^daytona exec: no answer"),
    ],
)
def test_a_hung_endpoint_is_a_timeout_naming_the_call_and_the_sandbox_is_still_deleted(
    fake, tmp_path, route, call
):
    (tmp_path / "x").write_text("x")

    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)
            fake.hang.add(route)
            if route == "upload":
                await sb.upload(tmp_path / "x", "/app/x", timeout_s=2)
            await sb.exec(
                "true", timeout_s=1
            )  # the exec's deadline: 1 s + the kill grace + control_timeout_s

    with pytest.raises(SandboxTimeout, match=call):
        asyncio.run(go())
    assert len(fake.deleted) == 1 and fake.live() == []


def test_a_hung_create_is_a_timeout_naming_create(fake, tmp_path):
    fake.hang.add("create")

    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=2)

    with pytest.raises(SandboxTimeout, match="daytona create"):
        asyncio.run(go())


def test_a_sandbox_whose_create_answer_was_lost_is_found_by_name_and_deleted(fake, tmp_path):
    fake.hang.add("create_answer")  # Daytona makes it, the answer never arrives: the caller has no id

    async def go():
        async with DaytonaSandbox.from_spec(_spec(), run_id="run-lost") as sb:
            await sb.start(_task(tmp_path), timeout_s=2)

    with pytest.raises(SandboxTimeout, match="daytona create"):
        asyncio.run(go())
    (made,) = fake.sandboxes
    assert fake.deleted == [made] and fake.live() == []
    assert ("get", f"/sandbox/{fake.sandboxes[made].record['name']}", None) in fake.requests


def test_a_failure_after_the_create_deletes_the_sandbox(fake, tmp_path):
    fake.fail["work_dir"] = 500

    async def go():
        sb = DaytonaSandbox.from_spec(_spec())
        await sb.start(_task(tmp_path), timeout_s=30)  # no ``async with``: start itself must clean up

    with pytest.raises(SandboxError, match="daytona get_work_dir"):
        asyncio.run(go())
    assert len(fake.deleted) == 1 and fake.live() == []


def test_delete_runs_when_the_body_raises_or_is_cancelled(fake, tmp_path):
    async def raising():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=30)
            raise RuntimeError("agent harness bug")

    with pytest.raises(RuntimeError):
        asyncio.run(raising())

    async def cancelled():
        async def trial():
            async with DaytonaSandbox.from_spec(_spec()) as sb:
                await sb.start(_task(tmp_path), timeout_s=30)
                await sb.exec("sleep 30", timeout_s=60)

        task = asyncio.create_task(trial())
        while not fake.calls("execute") and not task.done():
            await asyncio.sleep(0.05)
        assert not task.done(), task
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    assert len(fake.calls("create")) == 2 and fake.live() == [] and len(fake.deleted) == 2


def test_orphans_of_a_dead_run_are_found_by_label_and_deleted(fake):
    dead = [fake.add_sandbox({RUN_LABEL: "dead-run"}) for _ in range(3)]
    other = fake.add_sandbox({RUN_LABEL: "live-run"})
    stopped = fake.add_sandbox({RUN_LABEL: "dead-run"}, state="stopped")

    deleted = asyncio.run(reclaim_run("dead-run", _spec()))
    assert sorted(deleted) == sorted([*dead, stopped])  # over two pages (page size 2)
    assert fake.live() == [other]
    assert fake.calls("list")[0] == {RUN_LABEL: "dead-run"}


def test_a_wrong_key_is_a_sandbox_error_and_nothing_is_created(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("DAYTONA_API_KEY", "wrong")

    async def go():
        async with DaytonaSandbox.from_spec(_spec()) as sb:
            await sb.start(_task(tmp_path), timeout_s=10)

    with pytest.raises(SandboxError, match="daytona create"):
        asyncio.run(go())
    assert fake.sandboxes == {}
