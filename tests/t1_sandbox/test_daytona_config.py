"""The Daytona backend without a server: preflight, task resources, creation pacing, the exec frame."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest

from t1_sandbox import SandboxError
from t1_sandbox.daytona import DaytonaSandbox
from t1_sandbox.daytona.command import parse_framed
from t1_sandbox.daytona.config import parse_size_mib, placement_for
from t1_sandbox.daytona.pacing import creation_pacer
from t1_sandbox.token_bucket import CreationPacer
from t1_spec import DaytonaSandboxSpec, load_recipe

REPO = Path(__file__).resolve().parents[2]
PAPER = REPO / "recipes" / "t1-122b.yaml"


def test_preflight_without_a_key_names_the_field_and_the_variable(monkeypatch):
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    problems = DaytonaSandbox.preflight(load_recipe(PAPER))
    assert problems == [
        "sandbox.api_key_env: the environment variable DAYTONA_API_KEY is unset or empty; export your "
        "Daytona API key there (the key never goes into a recipe)"
    ]
    monkeypatch.setenv("DAYTONA_API_KEY", "k")
    assert DaytonaSandbox.preflight(load_recipe(PAPER)) == []


def test_preflight_refuses_an_auto_stop_below_the_remote_deadline(monkeypatch):
    monkeypatch.setenv("DAYTONA_API_KEY", "k")
    (line,) = DaytonaSandbox.preflight(load_recipe(PAPER, ["sandbox.auto_stop_min=15"]))
    # 5400 s remote deadline (T1 §7.4) = 90 minutes; the SDK's 15-minute default is refused
    assert line.startswith("sandbox.auto_stop_min 15: below rollout.remote_deadline_s 5400 s (90 min)")


def test_a_zero_auto_stop_is_refused_by_the_spec():
    with pytest.raises(ValueError, match="auto_stop_min"):
        DaytonaSandboxSpec(auto_stop_min=0)


@pytest.mark.parametrize(
    ("value", "mib"), [(2048, 2048), ("2G", 2048), ("512Mi", 512), ("10GB", 10240), ("1T", 1024**2)]
)
def test_task_sizes_are_read_in_powers_of_1024(value, mib):
    assert parse_size_mib(value, "x") == mib


def test_a_malformed_task_size_names_the_file_and_key(tmp_path):
    (tmp_path / "environment").mkdir()
    (tmp_path / "environment" / "Dockerfile").write_text("FROM debian\n")
    (tmp_path / "task.toml").write_text('[environment]\nmemory = "lots"\n')
    with pytest.raises(SandboxError, match=r"task.toml \[environment\].memory must be a size"):
        placement_for(DaytonaSandboxSpec(), tmp_path / "environment", run_id="r")


def test_a_task_without_dockerfile_image_or_snapshot_is_refused_naming_the_three(tmp_path):
    (tmp_path / "environment").mkdir()
    with pytest.raises(SandboxError, match="sandbox.snapshot, the task's \\[environment\\].docker_image"):
        placement_for(DaytonaSandboxSpec(), tmp_path / "environment", run_id="r")


def test_allow_internet_false_blocks_the_network_even_when_the_recipe_allows_it(tmp_path):
    (tmp_path / "environment").mkdir()
    (tmp_path / "environment" / "Dockerfile").write_text("FROM debian\n")
    (tmp_path / "task.toml").write_text("[environment]\nallow_internet = false\n")
    assert placement_for(
        DaytonaSandboxSpec(network=True), tmp_path / "environment", run_id="r"
    ).network_block_all


def test_creation_is_paced_at_6_per_second_and_600_per_minute():
    now = [0.0]
    stamps: list[float] = []

    async def sleep(seconds: float) -> None:
        now[0] += seconds + 1e-9  # a manual clock must move: a wait of 1e-13 s is absorbed at now = 100 s

    async def go():
        pacer = CreationPacer(6.0, 600.0, clock=lambda: now[0], sleep=sleep)
        for _ in range(1200):
            await pacer.acquire()
            stamps.append(now[0])

    asyncio.run(go())
    # the rate bucket holds one second (6 tokens): after that, one creation every 1/6 s
    assert stamps[:6] == [0.0] * 6
    assert stamps[11] == pytest.approx(1.0) and stamps[12] == pytest.approx(7 / 6)
    # no window of 60 s holds more than the 600 quota plus the bucket's refill inside it
    for i in range(len(stamps) - 601):
        assert stamps[i + 601] - stamps[i] > 0
    # in steady state the quota (10 / s) does not bind before the rate (6 / s): 1200 take about 199 s
    assert stamps[-1] == pytest.approx((1199 - 5) / 6, rel=1e-6)


def test_the_quota_binds_when_it_is_tighter_than_the_rate():
    now = [0.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds + 1e-9  # a manual clock must move: a wait of 1e-13 s is absorbed at now = 100 s

    async def go():
        pacer = CreationPacer(6.0, 60.0, clock=lambda: now[0], sleep=sleep)  # 1 / s on average
        for _ in range(120):
            await pacer.acquire()

    asyncio.run(go())
    # the first 60 use the stored quota at 6 / s (about 10 s); the next 60 come at the quota's 1 / s
    assert now[0] == pytest.approx(60.0, abs=1.0)


def test_daytona_and_the_scheduler_pace_creation_by_one_rule():
    """One rule, two users: Daytona's shared pacer is the token-bucket module's, and so is the scheduler's."""
    import ast

    import t1_rollout.scheduler
    import t1_sandbox.daytona.pacing

    async def shared():
        return creation_pacer(2.0, 300.0)

    pacer = asyncio.run(shared())
    assert type(pacer) is CreationPacer and (pacer.rate_per_s, pacer.quota_per_min) == (2.0, 300.0)
    for module in (t1_rollout.scheduler, t1_sandbox.daytona.pacing):
        tree = ast.parse(Path(module.__file__).read_text())
        built = {
            n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
        assert "TokenBucket" not in built, f"{module.__name__} builds its own buckets"
    assert t1_rollout.scheduler.CreationPacer is CreationPacer


def test_the_exec_frame_keeps_bytes_and_counts_what_was_cut():
    out = base64.b64encode(b"abc\xff").decode()
    err = base64.b64encode(b"e").decode()
    framed = parse_framed(f"noise\nT1FRAME rc 3\nT1FRAME o 10 {out}\nT1FRAME e 1 {err}\n", "exec")
    assert (framed.exit_code, framed.stdout, framed.stderr) == (
        3,
        "abc\ufffd\n[t1: 6 more bytes of output dropped]\n",
        "e",
    )
    with pytest.raises(SandboxError, match="no exit status"):
        parse_framed("sh: timeout: not found", "exec")


def test_check_environment_names_a_gpu_task_and_an_allowlist(tmp_path):
    from types import SimpleNamespace

    (tmp_path / "environment").mkdir()
    (tmp_path / "environment" / "Dockerfile").write_text("FROM debian\n")
    env = SimpleNamespace(gpus=1, network_mode="allowlist")
    task = SimpleNamespace(id="t", environment=env, environment_dir=tmp_path / "environment")
    problems = DaytonaSandbox.check_environment(task)
    assert [p.split(":")[1].strip() for p in problems] == [
        "[environment].gpus = 1",
        '[environment].network_mode = "allowlist"',
    ]
    fine = SimpleNamespace(gpus=0, network_mode="public")
    assert DaytonaSandbox.check_environment(SimpleNamespace(**{**vars(task), "environment": fine})) == []
