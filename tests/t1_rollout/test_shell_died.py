"""The agent ending its own shell mid-action is the agent's outcome (finish ``shell_died``), graded as usual.

Only infrastructure failures may make a trial ``failed`` (T1 §7.4); a shell that the agent's own keystrokes
end (``exit``, ``set -e`` and a failing command, Ctrl-D at the prompt) is not one.
"""

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from t1_rollout.engine.base import SamplingParams
from t1_rollout.harness import HarnessConfig, run_episode
from t1_sandbox.base import SandboxError, ShellDied
from t1_tito import ChatTemplate, TitoSession, load_tokenizer

from .test_harness import ScriptedEngine

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)


def _action(*keys, done=False):
    cmds = [{"keystrokes": k, "duration": 2.0 if k.startswith("sleep") else 0.5} for k in keys]
    return json.dumps({"analysis": "a", "plan": "p", "commands": cmds, "task_complete": done})


@pytest.fixture(scope="module")
def tito():
    return TitoSession(load_tokenizer("qwen3.5"), ChatTemplate())


class DyingShell:
    """Behaves like LocalShell: ``exit`` ends it; a send to the ended shell raises ShellDied."""

    def __init__(self, *, probe: bool):
        self.sent = []
        self.dead = False
        self._probe = probe

    def __getattr__(self, name):  # ``alive`` exists only with ``probe`` (the harness also copes without)
        if name == "alive" and self._probe:
            return not self.dead
        raise AttributeError(name)

    async def send(self, keystrokes, *, duration_s, max_wait_s):
        if self.dead:
            raise ShellDied("the shell exited (exit 0)", exit_code=0)
        self.sent.append(keystrokes)
        if keystrokes == "exit\n":
            self.dead = True
            return "$ exit\nexit\n"
        return f"$ {keystrokes}" if keystrokes else "$ "

    async def close(self):
        pass


@pytest.mark.parametrize("probe", [True, False])
async def test_exit_mid_action_ends_the_episode_as_shell_died(tito, probe):
    engine = ScriptedEngine(tito.tokenizer, [_action("echo a\n", "exit\n", "ls\n", "pwd\n"), _action("ls\n")])
    shell = DyingShell(probe=probe)
    ep = await run_episode(
        instruction="x",
        shell=shell,
        engine=engine,
        tito=tito,
        sampling=SamplingParams(),
        config=HarnessConfig(max_turns=4, agent_deadline_s=60, max_new_tokens=200, context_tokens=4000),
    )
    assert ep.finish == "shell_died"
    assert len(ep.turns) == 1  # no second model call after the shell died
    assert "ls\n" not in shell.sent and "pwd\n" not in shell.sent  # the rest of the action was not sent
    assert "shell exited" in ep.messages[-1]["content"]


async def test_other_shell_errors_still_propagate(tito):
    class BrokenShell:
        async def send(self, keystrokes, *, duration_s, max_wait_s):
            if keystrokes:
                raise SandboxError("pty lost")
            return "$ "

    engine = ScriptedEngine(tito.tokenizer, [_action("ls\n")])
    with pytest.raises(SandboxError, match="pty lost"):
        await run_episode(
            instruction="x",
            shell=BrokenShell(),
            engine=engine,
            tito=tito,
            sampling=SamplingParams(),
            config=HarnessConfig(max_turns=2, agent_deadline_s=60, max_new_tokens=200, context_tokens=4000),
        )


@needs_bwrap
async def test_local_shell_raises_shell_died_after_exit_and_sandbox_error_after_close(tmp_path):
    from t1_sandbox.local import LocalSandbox

    async with LocalSandbox() as sb:
        await sb.start(_empty_env(tmp_path), timeout_s=60)
        shell = await sb.open_shell()
        await shell.send("exit\n", duration_s=2, max_wait_s=5)
        for _ in range(100):
            if not shell.alive:
                break
            await asyncio.sleep(0.02)
        with pytest.raises(ShellDied):
            await shell.send("ls\n", duration_s=0.2, max_wait_s=1)
        await shell.close()
        with pytest.raises(SandboxError) as info:
            await shell.send("ls\n", duration_s=0.2, max_wait_s=1)
        assert not isinstance(info.value, ShellDied)  # killed by the sandbox: not the agent's doing


@needs_bwrap
async def test_a_shell_killed_from_outside_the_sandbox_mid_action_is_infrastructure(tito, tmp_path):
    import signal

    from t1_sandbox.local import LocalSandbox

    class KillingEngine(ScriptedEngine):
        """Kills the shell's host-side launcher (out of the sandbox's reach) while the command runs."""

        async def generate(self, input_ids, sampling, **kwargs):
            async def kill_soon():
                await asyncio.sleep(0.5)
                os.kill(shell._proc.pid, signal.SIGKILL)

            self.killer = asyncio.ensure_future(kill_soon())
            return await super().generate(input_ids, sampling, **kwargs)

    async with LocalSandbox() as sb:
        await sb.start(_empty_env(tmp_path), timeout_s=60)
        shell = await sb.open_shell()
        engine = KillingEngine(tito.tokenizer, [_action("sleep 3\n", "echo after\n")])
        config = HarnessConfig(max_turns=2, agent_deadline_s=60, max_new_tokens=200, context_tokens=4000)
        with pytest.raises(SandboxError, match="signal 9") as info:
            await run_episode(
                instruction="x",
                shell=shell,
                engine=engine,
                tito=tito,
                sampling=SamplingParams(),
                config=config,
            )
        assert not isinstance(info.value, ShellDied)  # not the agent's doing: the trial will be "failed"


def _empty_env(tmp_path: Path) -> Path:
    (tmp_path / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    return tmp_path


# ------------------------------------------------------------------ whole trials in a real sandbox
SOLVE = (
    "cd /app\n",
    "{ echo region,revenue; awk -F, 'NR > 1 { t[$2] += $4 * $5 } END { for (r in t) "
    'printf "%s,%.2f\\n", r, t[r] }\' sales.csv | sort -t, -k2,2 -g -r; } > region_totals.csv\n',
)


@needs_bwrap
@pytest.mark.parametrize(
    "ending",
    [
        ("exit\n", "ls\n"),
        ("set -e\n", "grep nothing /app/data.csv\n", "echo after\n"),
        ("cat\n", "\x04", "\x04", "echo after\n"),
    ],
    ids=["exit", "set-e", "ctrl-d"],
)
async def test_trial_whose_agent_ends_its_shell_is_graded(tmp_path, tito, ending):
    t1_spec = pytest.importorskip("t1_spec")
    t1_tasks = pytest.importorskip("t1_tasks")
    from t1_rollout.trial import TrialLimits, run_trial
    from t1_sandbox.local import LocalSandbox

    task = t1_tasks.load_pool("builtin:mini").get("csv-region-totals")
    # The reference solution first (so the grade is known: every assertion passes), then the shell's end.
    engine = ScriptedEngine(tito.tokenizer, [_action(*SOLVE, *ending), _action("ls\n")])
    rec = await run_trial(
        task,
        sandbox_factory=LocalSandbox,
        engine=engine,
        tito=tito,
        sampling=SamplingParams(max_new_tokens=400),
        harness=HarnessConfig(max_turns=3, agent_deadline_s=60, max_new_tokens=400, context_tokens=8192),
        limits=TrialLimits(remote_deadline_s=120, agent_deadline_s=60, verifier_deadline_s=60),
        reward_spec=t1_spec.reward.DenseRewardSpec(),
        out_dir=tmp_path,
    )
    assert rec.status == "finished", rec.cause
    assert rec.episode.finish == "shell_died"
    assert len(rec.episode.turns) == 1
    # graded: the verifier ran and all 4 assertions of the task pass (the reference solution ran first)
    assert rec.verifier.error is None and rec.reward is not None
    assert (rec.reward.passed, rec.reward.total, rec.reward.binary) == (4, 4, 1.0)
    assert "remaining command(s) were not run" in rec.episode.messages[-1]["content"]
