"""The harness seam: rollout.harness.kind picks the built-in loop or an external command through the endpoint.

The external command here is a small stdlib-only Python program (the test's own, run as a separate process
with only the environment T1 gives it): it calls ``$OPENAI_BASE_URL/chat/completions`` with
``$OPENAI_API_KEY``, runs a command through ``$T1_SANDBOX_EXEC`` and ends as the test asks (exit status, a
signal, a hang). The engine is scripted; the sandbox records what reaches it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from t1_rollout.engine.base import Generation, SamplingParams
from t1_rollout.external import ExternalHarness, ExternalHarnessError
from t1_rollout.harness import HARNESSES, BuiltinHarness, Episode, HarnessConfig
from t1_sandbox.base import ExecResult
from t1_spec import ExternalHarnessSpec, RolloutSpec, load_recipe
from t1_tito import ChatTemplate, TitoSession, load_tokenizer

ROOT = Path(__file__).resolve().parents[2]
HARNESS = r"""
import json, os, signal, subprocess, sys, time, urllib.error, urllib.request
mode, calls = sys.argv[1], int(sys.argv[2])
with open(sys.argv[3], "w") as fh:
    fh.write(str(os.getpid()))
messages = [{"role": "user", "content": open(os.environ["T1_INSTRUCTION_FILE"]).read()}]
for i in range(calls):
    req = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps({"model": os.environ["T1_MODEL"], "messages": messages}).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"},
    )
    try:
        answer = json.load(urllib.request.urlopen(req))
    except urllib.error.HTTPError as exc:
        print("refused", exc.code, flush=True)
        time.sleep(600)  # a harness that does not give up: T1 stops it
    messages.append(answer["choices"][0]["message"])
    out = subprocess.run(
        [os.environ["T1_SANDBOX_EXEC"], "exec", "-w", "/app", "-e", "TURN=%d" % i, "t1-sandbox",
         "bash", "-lc", "echo it's turn $TURN"], capture_output=True, text=True)
    messages.append({"role": "user", "content": out.stdout + "rc=%d" % out.returncode})
print("secret seen:", os.environ.get("T1_TEST_SECRET"), flush=True)
if mode == "exit":
    sys.exit(int(sys.argv[4]))
if mode == "signal":
    os.kill(os.getpid(), signal.SIGSEGV)
if mode == "hang":
    time.sleep(600)
"""


class ScriptedEngine:
    def __init__(self, tokenizer, text="ok"):
        self.tokenizer, self.text, self.weight_version, self.calls = tokenizer, text, 5, 0

    async def generate(
        self,
        input_ids,
        sampling,
        *,
        return_logprob=True,
        return_routed_experts=True,
        routed_experts_start_len=0,
    ):
        self.calls += 1
        out = self.tokenizer.encode(f"{self.text} {self.calls}") + [self.tokenizer.im_end_id]
        rows = len(input_ids) + len(out) - 1 - routed_experts_start_len
        return Generation(
            out,
            [-0.1] * len(out),
            np.zeros((rows, 2, 2), np.int32),
            routed_experts_start_len,
            self.weight_version,
            "stop",
            len(input_ids),
            len(out),
            0.0,
        )


class RecordingSandbox:
    def __init__(self):
        self.execs: list[tuple[str, str | None, dict | None]] = []

    async def exec(self, command, *, timeout_s, cwd=None, env=None, cpu_time_s=None):
        self.execs.append((command, cwd, env))
        return ExecResult(f"ran {command!r} in {cwd} with {env}\n", "", 3, False, 0.01)


class Task:
    id = "hello"
    instruction = "Say hello."


@pytest.fixture(scope="module")
def tito():
    return TitoSession(load_tokenizer("qwen3.5"), ChatTemplate())


def _harness(tmp_path, mode, calls, *extra, env=None):
    script = tmp_path / "harness.py"
    script.write_text(HARNESS)
    command = (sys.executable, str(script), mode, str(calls), str(tmp_path / "pid"), *extra)
    return ExternalHarness(command, env or {}, kill_grace_s=1.0)


async def _run(harness, tito, tmp_path, *, max_turns=8):
    engine, sandbox, episode = ScriptedEngine(tito.tokenizer), RecordingSandbox(), Episode()
    config = HarnessConfig(max_turns=max_turns, agent_deadline_s=60, max_new_tokens=64, context_tokens=4096)
    await harness.run(
        task=Task(),
        sandbox=sandbox,
        engine=engine,
        tito=tito,
        sampling=SamplingParams(),
        config=config,
        episode=episode,
        log_path=tmp_path / "harness.log",
    )
    return episode, sandbox, engine


def _dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_exit_0_ends_the_episode_and_commands_reach_the_sandbox(tito, tmp_path, monkeypatch):
    monkeypatch.setenv("T1_TEST_SECRET", "host-only")  # the rollout's own variables stay out of the harness
    episode, sandbox, engine = await _run(_harness(tmp_path, "exit", 2, "0"), tito, tmp_path)
    assert episode.finish == "harness_exit" and len(episode.turns) == 2 and engine.calls == 2
    assert [t.policy_version for t in episode.turns] == [5, 5]
    assert sandbox.execs == [
        ("bash -lc 'echo it'\"'\"'s turn $TURN'", "/app", {"TURN": str(i)}) for i in range(2)
    ]
    # the harness saw the sandbox's answer and exit status through t1-sandbox-exec
    assert "rc=3" in episode.messages[2]["content"] and "ran " in episode.messages[2]["content"]
    assert "secret seen: None" in (tmp_path / "harness.log").read_text()


async def test_a_non_zero_exit_is_the_trials_failure_with_status_and_output(tito, tmp_path):
    with pytest.raises(ExternalHarnessError, match=r"exited with status 7 after 1 model call.*secret seen"):
        await _run(_harness(tmp_path, "exit", 1, "7"), tito, tmp_path)


async def test_a_crash_by_signal_names_the_signal(tito, tmp_path):
    with pytest.raises(ExternalHarnessError, match="died of signal 11"):
        await _run(_harness(tmp_path, "signal", 1), tito, tmp_path)


async def test_the_agent_deadline_stops_the_command_and_its_group(tito, tmp_path):
    harness = _harness(tmp_path, "hang", 1)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(3):  # the trial's agent deadline (run_trial grades what is left)
            await _run(harness, tito, tmp_path)
    assert _dead(int((tmp_path / "pid").read_text()))


async def test_max_turns_stops_a_harness_that_keeps_calling(tito, tmp_path):
    episode, _, engine = await _run(_harness(tmp_path, "exit", 5, "0"), tito, tmp_path, max_turns=2)
    assert episode.finish == "max_turns" and engine.calls == 2 and len(episode.turns) == 2
    assert _dead(int((tmp_path / "pid").read_text()))


def test_the_recipe_picks_the_harness_from_the_registry():
    recipe = load_recipe(ROOT / "recipes" / "tiny-cpu.yaml")
    assert isinstance(HarnessConfig.from_spec(recipe.rollout).agent, BuiltinHarness)
    data = recipe.rollout.model_dump()
    data["harness"] = {"kind": "external", "command": ["mini", "-t", "${T1_INSTRUCTION}"], "env": {"A": "1"}}
    agent = HarnessConfig.from_spec(RolloutSpec.model_validate(data)).agent
    assert agent == ExternalHarness(("mini", "-t", "${T1_INSTRUCTION}"), {"A": "1"}, "t1", 5.0)
    assert HARNESSES.kinds() == ("builtin", "external")
    with pytest.raises(ValueError, match="command"):
        ExternalHarnessSpec.model_validate({"kind": "external", "command": []})


def test_preflight_names_a_missing_program():
    recipe = load_recipe(ROOT / "recipes" / "tiny-cpu.yaml")
    data = recipe.model_dump()
    data["rollout"]["harness"] = {"kind": "external", "command": ["/nonexistent/harness-bin"]}
    external = type(recipe).model_validate(data)
    (line,) = HARNESSES.preflight("external", external)
    assert "rollout.harness.command" in line and "/nonexistent/harness-bin" in line
    data["rollout"]["harness"]["command"] = [sys.executable]
    assert HARNESSES.preflight("external", type(recipe).model_validate(data)) == []


def test_the_exec_command_is_written_executable(tmp_path):
    from t1_rollout.endpoint.sandbox_exec import write_exec_command

    path = write_exec_command(tmp_path)
    assert os.access(path, os.X_OK) and path.read_text().startswith(f"#!{sys.executable}\n")
    assert json.dumps  # the script is stdlib-only: it runs under any interpreter of the host


async def test_the_exec_command_parses_docker_exec_options_as_docker_does(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from t1_rollout.endpoint.sandbox_exec import write_exec_command
    from t1_rollout.endpoint.server import EndpointServer

    env_file = str(tmp_path / "vars")
    (tmp_path / "vars").write_text("# a comment\nB=2\n\nFROM_HOST\n")
    monkeypatch.setenv("FROM_HOST", "h")  # docker's -e NAME takes NAME's value where the command line runs
    sandbox = RecordingSandbox()
    capture = SimpleNamespace(ended=asyncio.Event(), model="t1", episode=None)
    script = write_exec_command(tmp_path)

    async def exec_(*args):
        env = {**os.environ, "T1_EXEC_URL": server.exec_url, "OPENAI_API_KEY": key}
        proc = await asyncio.create_subprocess_exec(str(script), "exec", *args, env=env, stdout=-1, stderr=-1)
        out, err = await proc.communicate()
        return proc.returncode, out.decode(), err.decode()

    async with EndpointServer() as server:
        key = server.open_trial(capture, sandbox=sandbox)
        for args, expected in [
            (["--workdir=/app", "t1-sandbox", "pwd"], ("pwd", "/app", None)),
            (["-w/app", "-e=A=1", "t1-sandbox", "pwd"], ("pwd", "/app", {"A": "1"})),
            (["-it", "-w", "/app", "--env", "A=1", "t1-sandbox", "ls", "-l"], ("ls -l", "/app", {"A": "1"})),
            # a user is taken and grants nothing: the command runs as the sandbox's agent user
            (["-u", "root", "t1-sandbox", "id"], ("id", None, None)),
            (["--user=0:0", "--detach-keys", "ctrl-x", "t1-sandbox", "id"], ("id", None, None)),
            (
                ["--env-file", env_file, "-e", "FROM_HOST", "-e", "UNSET_HERE", "t1-sandbox", "env"],
                ("env", None, {"B": "2", "FROM_HOST": "h"}),
            ),
            (["--", "t1-sandbox", "-w"], ("-w", None, None)),  # after the name, everything is the command
        ]:
            assert await exec_(*args) == (3, f"ran {expected[0]!r} in {expected[1]} with {expected[2]}\n", "")
            assert sandbox.execs[-1] == expected, args
        for args, message in [
            (["-w"], "flag needs an argument: -w"),
            (["--user"], "flag needs an argument: --user"),
            (["-x", "t1-sandbox", "ls"], "unknown flag: -x"),
            (["--bogus=1", "t1-sandbox", "ls"], "unknown flag: --bogus"),
            (["-d", "t1-sandbox", "ls"], "-d is not served"),
            (["--env-file", str(tmp_path / "nope"), "t1-sandbox", "ls"], "cannot be read"),
            (["-e", "=1", "t1-sandbox", "ls"], "has no variable name"),
        ]:
            status, out, err = await exec_(*args)
            assert status == 125 and out == "" and message in err, (args, err)
            assert err.count("\n") == 1 and "Traceback" not in err
    assert len(sandbox.execs) == 7
