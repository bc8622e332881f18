"""Launching one SGLang server per replica, and waiting until it is ready (T1 §6, §7).

`server_command` builds the ``python -m sglang.launch_server`` arguments from the recipe (no process is
started), `ServerProcess` runs one and stops it, and `wait_ready` polls ``/health_generate`` within the
liveness grace, then checks the served model against the recipe's: a probe ``/generate`` of one token must
return routing of ``L * k`` ids per row (the served model's layer count and top-k).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from t1_r3 import RoutingMismatchError
from t1_rollout.engine.base import EngineError, SamplingParams
from t1_rollout.engine.sglang.client import SGLangEngine
from t1_spec import Recipe, SGLangEngineSpec

__all__ = ["ServerProcess", "check_model", "launch_problem", "server_command", "wait_ready"]


def server_command(
    spec: SGLangEngineSpec,
    *,
    replica: int,
    model_path: str | os.PathLike[str],
    dtype: str,
    first_device: int,
    python: str = sys.executable,
) -> list[str]:
    """The command line of replica ``replica``'s server.

    Args:
        spec: the ``engine`` section (``tp``, ``host``, ``base_port``, ``server_args``).
        replica: the replica's index, 0-based; it listens on ``base_port + replica``.
        model_path: the HF checkpoint directory the server loads (weight version 0).
        dtype: the model's dtype (``model.dtype``), SGLang's ``--dtype``.
        first_device: the first local CUDA device of the inference partition; the replica takes
            ``first_device + replica * tp`` onwards (SGLang's ``--base-gpu-id``).
        python: the interpreter that has the ``sglang`` package.

    Returns:
        ``[python, "-m", "sglang.launch_server", ...]``: routing returned with every answer
        (``--enable-return-routed-experts``), token ids in and out (``--skip-tokenizer-init``), and the
        weights labelled version 0 (``--weight-version 0``), then ``spec.server_args`` verbatim.
    """
    return [
        python,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(model_path),
        "--host",
        spec.host,
        "--port",
        str(spec.base_port + replica),
        "--tp",
        str(spec.tp),
        "--base-gpu-id",
        str(first_device + replica * spec.tp),
        "--dtype",
        dtype,
        "--enable-return-routed-experts",
        "--skip-tokenizer-init",
        "--weight-version",
        "0",
        *spec.server_args,
    ]


def launch_problem(recipe: Recipe) -> str | None:
    """Why T1 cannot launch the recipe's servers here (one preflight line), or None when it can.

    Cheap: looks the ``sglang`` package up without importing it, and asks torch for the CUDA devices.
    """
    spec = recipe.engine
    assert isinstance(spec, SGLangEngineSpec)
    lacks = []
    if importlib.util.find_spec("sglang") is None:
        lacks.append("the sglang package is not installed")
    import torch

    need = recipe.plan.devices
    if not torch.cuda.is_available():
        lacks.append("no CUDA device is visible")
    elif torch.cuda.device_count() < need:
        lacks.append(f"torch sees {torch.cuda.device_count()} CUDA device(s), the plan needs {need} here")
    if not lacks:
        return None
    return (
        f"engine.kind 'sglang': launching servers needs the sglang package and CUDA devices "
        f"({'; '.join(lacks)}); give engine.urls of running servers or use engine.kind: embedded"
    )


@dataclass
class ServerProcess:
    """One launched server: its process and its log file.

    Attributes:
        url: the server's base URL.
        process: the running ``sglang.launch_server``.
        log_path: where its stdout and stderr go.
    """

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes]

    @classmethod
    def start(cls, command: list[str], *, url: str, log_path: Path) -> ServerProcess:
        """Starts ``command`` in its own process group, logging to ``log_path``."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = log_path.open("ab")
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return cls(url=url, process=process, log_path=log_path, _log=log)

    def exited(self) -> str | None:
        """Why the server is gone (its exit status and log tail), or None while it runs."""
        code = self.process.poll()
        if code is None:
            return None
        tail = self.log_path.read_bytes()[-2000:].decode(errors="replace")
        return f"sglang.launch_server exited with status {code}; log {self.log_path} ends:\n{tail}"

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM to the server's process group, SIGKILL after ``grace_s``; idempotent."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()
        self._log.close()


def wait_ready(
    server: SGLangEngine,
    *,
    grace_s: float,
    period_s: float = 1.0,
    process: ServerProcess | None = None,
) -> None:
    """Waits until ``server`` answers ``/health_generate`` (it has loaded its weights and can generate).

    Args:
        server: the client of the server (its ``num_layers``, ``top_k``, ``num_experts`` are the recipe's).
        grace_s: deadline for the server to become ready, seconds (``liveness.probe_grace_s``: loading
            weights and compiling kernels are slow by construction, T1 §7).
        period_s: pause between readiness probes, seconds.
        process: the launched process, whose early exit ends the wait with its log.

    Raises:
        EngineError: not ready within ``grace_s``, or the process exited.
    """
    deadline = time.monotonic() + grace_s
    last = "no probe answered yet"
    while True:
        gone = process.exited() if process is not None else None
        if gone is not None:
            raise EngineError(f"SGLang {server.base_url} did not start: {gone}")
        try:
            server.get("/health_generate", timeout_s=min(server.probe_deadline_s, grace_s))
            break
        except EngineError as exc:
            last = str(exc)
        if time.monotonic() + period_s > deadline:
            raise EngineError(
                f"SGLang {server.base_url} not ready within liveness.probe_grace_s = {grace_s:g} s: {last}"
            )
        time.sleep(period_s)


def check_model(server: SGLangEngine) -> None:
    """Checks that ``server`` serves the recipe's model: one probe ``/generate`` of one token on ``[0, 1]``.

    The answer must carry the client's weight version and routing of ``2`` rows of ``L * k`` ids below
    ``E`` (the served model's layer count, top-k and expert count are the recipe's).

    Raises:
        EngineError: the answer's routing does not fit the recipe's model, or its version is not the
            client's.
    """
    answer = server.post(
        "/generate",
        SGLangEngine.request_payload(
            [0, 1],
            SamplingParams(temperature=0.0, max_new_tokens=1),
            return_logprob=False,
            return_routed_experts=True,
            routed_experts_start_len=0,
        ),
        timeout_s=server.probe_deadline_s,
    )
    try:
        server.parse_answer(
            answer,
            prompt_tokens=2,
            return_logprob=False,
            return_routed_experts=True,
            start_len=0,
            latency_s=0.0,
        )
    except RoutingMismatchError as exc:
        raise EngineError(
            f"SGLang {server.base_url} does not serve the recipe's model (L = {server.num_layers}, "
            f"k = {server.top_k}, E = {server.num_experts}): {exc}"
        ) from exc
