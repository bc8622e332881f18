"""The verifier could not launch: a WORKDIR the agent broke is its doing, a lost sandbox is not."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

import t1_rollout.verify as verify
from t1_sandbox.base import ExecResult, Sandbox, SandboxError, SandboxTimeout


@dataclass
class _Task:
    id: str
    tests_dir: Path


class _Given:
    prelude = ""

    def describe(self) -> str:
        return "fake toolchain"


class _Sandbox:
    """Answers at ``/`` when ``healthy``; its WORKDIR (the default cwd) is usable when ``workdir_ok``."""

    network = False
    sealed_verifier = Sandbox.sealed_verifier  # the seam's default: the agent's own stopped sandbox

    def __init__(self, *, healthy: bool, workdir_ok: bool, launch: SandboxError) -> None:
        self.healthy, self.workdir_ok, self.launch = healthy, workdir_ok, launch

    async def stop_agent(self) -> None:
        pass

    async def upload(self, local, remote, *, timeout_s, read_only=False) -> None:
        pass

    async def exec_verifier(self, command, *, timeout_s, cwd=None):
        raise self.launch

    async def exec(self, command, *, timeout_s, cwd=None, **_):
        if not self.healthy:
            raise SandboxError("exec: the sandbox is gone")
        if cwd is None and not self.workdir_ok:
            raise SandboxError(
                "exec: working directory '/app' is not usable in the sandbox (Not a directory)"
            )
        return ExecResult(stdout="", stderr="", exit_code=0, timed_out=False, duration_s=0.0)


async def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandbox: _Sandbox):
    async def provision(*_, **__):
        return _Given()

    monkeypatch.setattr(verify, "provision", provision)
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("true\n")
    return await verify.run_verifier(sandbox, _Task("t", tests), timeout_s=10, out_dir=tmp_path / "out")


CHDIR = SandboxError("exec: working directory '/app' is not usable in the sandbox (Not a directory)")


async def test_a_workdir_the_agent_broke_is_sabotage_scored_zero(tmp_path, monkeypatch):
    run = await _run(tmp_path, monkeypatch, _Sandbox(healthy=True, workdir_ok=False, launch=CHDIR))
    assert run.error is None and "could not run" in run.sabotage and "/app" in run.sabotage


@pytest.mark.parametrize(
    ("healthy", "workdir_ok", "launch"),
    [
        (False, False, CHDIR),  # the sandbox itself is lost
        (True, True, SandboxError("exec_create: the daemon refused")),  # the WORKDIR is fine: not the agent
        (True, False, SandboxTimeout("exec: ran past 10 s")),  # a deadline is never blamed on the WORKDIR
    ],
)
async def test_other_launch_failures_stay_infrastructure(tmp_path, monkeypatch, healthy, workdir_ok, launch):
    run = await _run(tmp_path, monkeypatch, _Sandbox(healthy=healthy, workdir_ok=workdir_ok, launch=launch))
    assert run.sabotage is None and "could not run" in run.error
