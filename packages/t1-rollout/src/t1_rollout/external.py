"""An external agent harness: a command beside the sandbox, driving the model through T1's endpoint.

``rollout.harness.kind: external`` (`t1_spec.ExternalHarnessSpec`). For one trial, `ExternalHarness.run`
starts an `t1_rollout.endpoint.EndpointServer` on loopback, registers the trial's
`t1_rollout.endpoint.TrialCapture` under a fresh key, writes ``t1-sandbox-exec`` (the ``docker``-like command
that runs the harness's commands in the trial's sandbox) and the task instruction into a private folder, and
runs the command with the endpoint's URL and key in its environment (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``).
Every model call becomes a `t1_tito.Turn` of the trial's `Episode`; the sample is stitched from those.

How the command ends is the episode's, with its cause:
- it exits 0: ``finish = "harness_exit"``, and the verifier grades the sandbox;
- the episode reached ``rollout.max_turns`` or the context budget (the endpoint refused the call): the
  command is stopped, ``finish`` is ``max_turns`` or ``context_exhausted``, and the sandbox is graded;
- it outlives ``rollout.agent_deadline_s``: the trial's deadline cancels the run, the command's process
  group is stopped (SIGTERM, then SIGKILL after ``kill_grace_s``), and the trial grades what it left
  (``agent_deadline``) as for the built-in harness;
- it exits non-zero or dies of a signal: `ExternalHarnessError`, whose message holds the status and the tail
  of the command's output; the trial is recorded ``failed`` with that cause (a harness crash is not the
  agent's 0);
- the engine fails: the engine's error, after the command is stopped (an infrastructure failure).

The command's output (stdout and stderr) is kept in ``log_path`` when the trial gives one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import string
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from t1_rollout.endpoint.capture import TrialCapture
from t1_rollout.endpoint.sandbox_exec import write_exec_command
from t1_rollout.endpoint.server import EndpointServer
from t1_rollout.engine.base import Engine, SamplingParams
from t1_rollout.harness import Episode, HarnessConfig
from t1_rollout.parking import Parking
from t1_sandbox.base import Sandbox
from t1_spec import ExternalHarnessSpec
from t1_tito import TitoSession

if TYPE_CHECKING:
    from t1_spec import Recipe
    from t1_tasks import Task

PASSED_THROUGH = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
"""Variables of the rollout process the command inherits; no other (the rollout's keys stay out of it)."""

LOG_TAIL_BYTES = 2000
"""Bytes of the command's output quoted in an `ExternalHarnessError`."""


class ExternalHarnessError(RuntimeError):
    """The external harness exited non-zero or died of a signal; the message has its status and output."""


@dataclass(frozen=True)
class ExternalHarness:
    """The ``external`` entry of `t1_rollout.harness.HARNESSES`: runs one trial's episode through a command.

    Attributes:
        command: the argv (``$NAME`` or ``${NAME}`` substituted from the trial's variables and ``env``).
        env: extra environment variables of the command.
        model: the model name the endpoint answers with.
        kill_grace_s: seconds between SIGTERM and SIGKILL when the command is stopped.
    """

    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    model: str = "t1"
    kill_grace_s: float = 5.0

    @classmethod
    def from_spec(cls, spec: ExternalHarnessSpec) -> ExternalHarness:
        """The harness of the recipe's ``rollout.harness`` (kind ``external``)."""
        return cls(tuple(spec.command), dict(spec.env), spec.model, spec.kill_grace_s)

    @classmethod
    def preflight(cls, recipe: Recipe) -> list[str]:
        """What keeps the recipe's external harness from running here, one line each (empty: runnable).

        The command's program must be an executable file or a name on ``PATH`` (after substitution of the
        recipe's ``env``; a program named by a trial variable cannot be checked before the trial).
        """
        spec = recipe.rollout.harness
        if not isinstance(spec, ExternalHarnessSpec):
            return []
        program = string.Template(spec.command[0]).safe_substitute(spec.env)
        if "$" in program or shutil.which(program) is not None:
            return []
        return [
            f"rollout.harness.command: {program!r} is neither an executable file nor a program on PATH; "
            "install the harness (in its own environment) and give its path"
        ]

    async def run(
        self,
        *,
        task: Task,
        sandbox: Sandbox,
        engine: Engine,
        tito: TitoSession,
        sampling: SamplingParams,
        config: HarnessConfig,
        episode: Episode,
        parking: Parking | None = None,
        log_path: Path | None = None,
        **_: Any,
    ) -> Episode:
        """Run the command for one trial until it ends; the episode's turns are the endpoint's calls.

        Args:
            task: the task (its instruction and id go to the command).
            sandbox: the trial's started sandbox (``/t1/exec`` runs commands in it).
            engine: the engine serving the behaviour policy.
            tito: the trial's TITO session.
            sampling: the recipe's sampling parameters.
            config: the episode's limits; ``max_command_wait_s`` caps one exec call.
            episode: filled in place.
            parking: the trial's continuation handle (calls wait at the turn boundary while parked).
            log_path: where the command's output is kept; None keeps it only in the error message.

        Raises:
            ExternalHarnessError: the command exited non-zero or died of a signal.
            OSError: the command could not be started (its program is missing).
            Exception: the engine's error, when a call failed.
        """
        capture = TrialCapture(
            engine=engine,
            tito=tito,
            sampling=sampling,
            config=config,
            episode=episode,
            model=self.model,
            parking=parking,
        )
        with tempfile.TemporaryDirectory(prefix="t1-harness-") as tmp:
            work = Path(tmp)
            log = log_path or work / "harness.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            async with EndpointServer() as server:
                key = server.open_trial(capture, sandbox=sandbox, exec_timeout_s=config.max_command_wait_s)
                env = self._environment(task, server, key, work)
                argv = [string.Template(a).safe_substitute(env) for a in self.command]
                with log.open("wb") as out:
                    returncode = await self._run_command(argv, env, work, out, capture)
                server.close_trial(key)
            if capture.error is not None:
                raise capture.error
            if episode.finish == "incomplete":
                if returncode != 0:
                    raise ExternalHarnessError(_exit_message(argv[0], returncode, len(episode.turns), log))
                episode.finish = "harness_exit"
        return episode

    def _environment(self, task: Task, server: EndpointServer, key: str, work: Path) -> dict[str, str]:
        """The command's environment: a few of the host's variables, ``env``, then T1's own."""
        exec_command = write_exec_command(work / "bin")
        instruction = work / "instruction.md"
        instruction.write_text(task.instruction, encoding="utf-8")
        env = {k: os.environ[k] for k in PASSED_THROUGH if k in os.environ}
        env["PATH"] = f"{exec_command.parent}{os.pathsep}{env.get('PATH', os.defpath)}"
        env.update(self.env)
        env.update(
            {
                "OPENAI_BASE_URL": server.url,
                "OPENAI_API_BASE": server.url,  # the older name some clients read
                "OPENAI_API_KEY": key,
                "T1_MODEL": self.model,
                "T1_EXEC_URL": server.exec_url,
                "T1_SANDBOX_EXEC": str(exec_command),
                "T1_INSTRUCTION": task.instruction,
                "T1_INSTRUCTION_FILE": str(instruction),
                "T1_TASK_ID": task.id,
                "T1_TRIAL_DIR": str(work),
            }
        )
        return env

    async def _run_command(
        self, argv: list[str], env: dict[str, str], cwd: Path, out: Any, capture: TrialCapture
    ) -> int:
        """Start the command in its own process group and wait for it or for the episode's end.

        The group is stopped on every way out (the episode ended, the deadline's cancellation, an error).
        """
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,  # its own group: stopping it stops everything it started
        )
        exited = asyncio.ensure_future(proc.wait())
        ended = asyncio.ensure_future(capture.ended.wait())
        try:
            await asyncio.wait({exited, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
            if proc.returncode is None:
                await asyncio.shield(_stop(proc, self.kill_grace_s))
            exited.cancel()
        return proc.returncode if proc.returncode is not None else -signal.SIGKILL


async def _stop(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    """SIGTERM the command's process group, then SIGKILL it after ``grace_s`` seconds; reap the command."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            await asyncio.wait_for(proc.wait(), wait_s)
            return
        except TimeoutError:
            continue


def _exit_message(program: str, returncode: int, calls: int, log: Path) -> str:
    """What an `ExternalHarnessError` says: the status (or signal), the calls made and the output's tail."""
    status = f"died of signal {-returncode}" if returncode < 0 else f"exited with status {returncode}"
    try:
        data = log.read_bytes()
    except OSError:
        data = b""
    tail = data[-LOG_TAIL_BYTES:].decode("utf-8", errors="replace").strip()
    return (
        f"external harness {Path(program).name} {status} after {calls} model call(s); output tail: {tail!r}"
    )
