"""mini-swe-agent, installed from PyPI in its own environment, drives a mini-pool task through T1's endpoint.

The trial runs end to end as a training trial does (`t1_rollout.trial.run_trial`): a local sandbox builds the
task's environment; mini-swe-agent (its ``mini`` command, litellm as its client, its stock ``docker``
environment pointed at ``t1-sandbox-exec``) calls ``/v1/chat/completions`` with tools; the endpoint renders,
checks and records every call; the held-out verifier grades the sandbox; the reward is the dense P / S; the
sample is stitched from the recorded ids. The model is scripted (its answers are fixed texts, sampled as
ids): what is under test is the capture and the stitching, T1 §4.1 and §4.2.

mini-swe-agent is never a dependency of T1's packages: the test builds a virtual environment with ``uv venv``
and ``uv pip install`` from PyPI, cached under the temporary directory (``T1_HARNESS_CACHE`` moves it), and
skips with the reason when PyPI cannot be reached.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from t1_rollout.engine.base import Generation, SamplingParams
from t1_rollout.external import ExternalHarness
from t1_rollout.harness import HarnessConfig
from t1_rollout.trial import TrialLimits, run_trial
from t1_sandbox.local import LocalSandbox
from t1_spec.reward import DenseRewardSpec
from t1_tasks import load_pool
from t1_tito import ChatTemplate, TitoSession, load_tokenizer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        shutil.which("bwrap") is None or os.geteuid() != 0,
        reason="the local sandbox needs bubblewrap (apt-get install bubblewrap) and root",
    ),
]

HARNESS_PACKAGE = "mini-swe-agent==2.4.6"
L, K = 4, 2
FIX = (
    "chmod 0755 /app/srv/bin/*.sh && chmod 0644 /app/srv/conf/* && chmod 0700 /app/srv/secrets && "
    "chmod 0600 /app/srv/secrets/* && chmod -R o-w /app/srv"
)
ANSWERS = [
    ("I will look at the tree and its modes first.", "ls -laR /app/srv"),
    ("Now I apply the policy to each part of the tree.", FIX),
    (
        "The modes follow the policy; checking them once more.",
        "stat -c '%a %n' /app/srv/bin/* /app/srv/secrets",
    ),
    ("Done; submitting.", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
]


def _tool_text(thought: str, command: str) -> str:
    call = json.dumps({"name": "bash", "arguments": {"command": command}})
    return f"{thought}\n<tool_call>\n{call}\n</tool_call>"


class ScriptedModel:
    """The engine: emits the ids of scripted answers (``<tool_call>`` as its control id) and their rows."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.answers = [_tool_text(*a) for a in ANSWERS]
        self.weight_version = 11
        self.prompts: list[list[int]] = []

    async def generate(
        self,
        input_ids,
        sampling,
        *,
        return_logprob=True,
        return_routed_experts=True,
        routed_experts_start_len=0,
    ):
        self.prompts.append(list(input_ids))
        text = self.answers.pop(0) if self.answers else "I have nothing more to do."
        out = self.tokenizer.encode(text, allow_special=True) + [self.tokenizer.im_end_id]
        start = routed_experts_start_len
        pos = np.arange(start, len(input_ids) + len(out) - 1)
        # the row of stream position j names expert j mod 8 in every layer: a misplaced row shows
        routing = np.broadcast_to((pos % 8)[:, None, None], (pos.size, L, K)).astype(np.int32).copy()
        logprobs = [-0.01 * (1 + i % 5) for i in range(len(out))]
        return Generation(
            out, logprobs, routing, start, self.weight_version, "stop", len(input_ids), len(out), 0.0
        )


def _uv() -> str:
    uv = shutil.which("uv") or os.environ.get("UV")
    if uv is None:
        pytest.skip("uv is not installed: it builds the harness's own environment")
    return uv


@pytest.fixture(scope="module")
def mini_swe_agent() -> Path:
    """``bin/mini`` of a virtual environment holding only mini-swe-agent and its dependencies (cached)."""
    cache = Path(os.environ.get("T1_HARNESS_CACHE", tempfile.gettempdir())) / "t1-harness-venvs"
    venv = cache / HARNESS_PACKAGE.replace("==", "-")
    stamp = venv / ".t1-installed"
    if not stamp.exists():
        uv = _uv()
        shutil.rmtree(venv, ignore_errors=True)
        cache.mkdir(parents=True, exist_ok=True)
        made = subprocess.run(
            [uv, "venv", "-q", "--python", sys.executable, str(venv)], capture_output=True, text=True
        )
        assert made.returncode == 0, made.stderr
        install = subprocess.run(
            [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), HARNESS_PACKAGE],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if install.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            text = install.stderr.lower()
            if any(w in text for w in ("dns", "connect", "network", "resolve", "timed out", "unreachable")):
                pytest.skip(
                    f"PyPI is unreachable, {HARNESS_PACKAGE} cannot be installed: {install.stderr[-300:]}"
                )
            raise AssertionError(f"installing {HARNESS_PACKAGE} failed: {install.stderr}")
        stamp.write_text(HARNESS_PACKAGE)
    return venv / "bin" / "mini"


def _mini_command(mini: Path) -> tuple[str, ...]:
    return (
        str(mini), "--yolo", "--exit-immediately",
        "--model", "openai/$T1_MODEL",
        "--task", "$T1_INSTRUCTION",
        "--environment-class", "docker",
        "--output", "$T1_TRIAL_DIR/trajectory.json",
        "-c", "mini.yaml",
        "-c", "environment.image=t1-sandbox",
        "-c", "environment.executable=$T1_SANDBOX_EXEC",
        "-c", "environment.cwd=/app",
        "-c", "environment.timeout=60",
        "-c", "model.model_kwargs.api_base=$OPENAI_BASE_URL",
        "-c", "model.model_kwargs.api_key=$OPENAI_API_KEY",
        "-c", "model.cost_tracking=ignore_errors",
        "-c", "agent.step_limit=8",
    )  # fmt: skip


async def test_mini_swe_agent_solves_a_mini_task_through_the_endpoint(mini_swe_agent, tmp_path):
    task = load_pool("builtin:mini").get("fix-permissions")
    tokenizer = load_tokenizer("qwen3.5")
    tito = TitoSession(
        tokenizer, ChatTemplate(), repair="retokenized", normalize_max_s=96, normalize_max_u=16
    )
    model = ScriptedModel(tokenizer)
    home = tmp_path / "home"  # mini-swe-agent keeps its global config under HOME: not the host's
    harness = ExternalHarness(
        _mini_command(mini_swe_agent),
        {"HOME": str(home), "MSWEA_CONFIGURED": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        kill_grace_s=2.0,
    )
    config = HarnessConfig(
        max_turns=10, agent_deadline_s=240, max_new_tokens=256, context_tokens=16384, agent=harness
    )
    rec = await run_trial(
        task,
        sandbox_factory=LocalSandbox,
        engine=model,
        tito=tito,
        sampling=SamplingParams(),
        harness=config,
        limits=TrialLimits(remote_deadline_s=600, agent_deadline_s=240, verifier_deadline_s=120),
        reward_spec=DenseRewardSpec(),
        out_dir=tmp_path / "verifier",
    )
    log = tmp_path / "verifier" / f"{rec.trial_id}.harness.log"
    assert rec.status == "finished", f"{rec.cause}\n--- harness log ---\n{log.read_text()[-3000:]}"
    episode = rec.episode
    assert episode.finish == "harness_exit" and len(episode.turns) == len(ANSWERS)

    # the verifier graded what mini-swe-agent did in the sandbox: every assertion passes, dense P / S
    report = rec.to_json()
    assert report["assertions_passed"] == report["assertions_total"] > 0
    assert rec.reward.value == pytest.approx(report["assertions_passed"] / DenseRewardSpec().scale)

    # every call was built from the previous call's ids (mini-swe-agent sends its history back unchanged)
    turns = episode.turns
    for prev, nxt in zip(turns, turns[1:], strict=False):
        full = [*prev.prompt_ids.tolist(), *prev.output_ids.tolist()]
        assert nxt.prompt_ids[: len(full)].tolist() == full
    assert [t.policy_version for t in turns] == [11] * len(turns)
    calls = report["endpoint_calls"]
    assert [c["prompt"] for c in calls] == ["rendered"] + ["tito"] * (len(turns) - 1)

    # the stitched sample: one chunk, four aligned streams, drift 0 in the loss region, R3 rows in place
    audit = rec.stitch.audit
    print(
        "TITO audit (mini-swe-agent, fix-permissions):",
        json.dumps(
            {
                "boundaries": audit.case_counts,
                "splits": audit.splits,
                "drifted": audit.drifted_loss_tokens,
                "loss_tokens": audit.loss_tokens,
                "total_tokens": audit.total_tokens,
                "retokenized_context_tokens": audit.retokenized_context_tokens,
            }
        ),
    )
    assert audit.case_counts["strict"] == len(turns) - 1 and audit.splits == 0
    assert audit.drifted_loss_tokens == 0
    (sample,) = rec.samples
    sample.validate()
    last = turns[-1]
    assert sample.token_ids.tolist() == [*last.prompt_ids.tolist(), *last.output_ids.tolist()]
    assert sample.routing.shape == (len(sample.token_ids) - 1, L, K)
    assert sample.routing[:, 0, 0].tolist() == [j % 8 for j in range(len(sample.token_ids) - 1)]
    sampled = np.concatenate([t.output_ids for t in turns])
    assert sample.token_ids[sample.loss_mask.astype(bool)].tolist() == sampled.tolist()
    logprobs = np.concatenate([t.output_logprobs for t in turns])
    # stored as float32 in the sample
    assert np.array_equal(sample.rollout_logprobs[sample.loss_mask.astype(bool)], logprobs.astype(np.float32))


@pytest.mark.slow
def test_t1_train_steps_with_mini_swe_agent_and_logs_to_wandb_offline(mini_swe_agent, tmp_path, monkeypatch):
    """One PPO step of tiny-cpu whose trials mini-swe-agent drives (the random tiny model answers)."""
    from typer.testing import CliRunner

    from t1.cli import app

    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("WANDB_SILENT", "true")
    command = json.dumps(list(_mini_command(mini_swe_agent)))
    env = json.dumps(
        {"HOME": str(tmp_path / "home"), "MSWEA_CONFIGURED": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    )
    recipe = tmp_path / "tiny-mini.yaml"
    recipe.write_text(
        f"schema: t1/v1\nextends: {Path(__file__).resolve().parents[2] / 'recipes' / 'tiny-cpu.yaml'}\n"
        "name: tiny-mini\n"
        "ppo: {steps: 1, batch_size: 2}\n"
        "rollout: {launched: 2, max_turns: 2, "
        f"harness: {{kind: external, command: {command}, env: {env}}}}}\n"
        f"logging: {{run_root: {tmp_path / 'runs'}, wandb: {{mode: offline, project: t1-e2e}}}}\n"
    )
    result = CliRunner().invoke(app, ["train", str(recipe)])
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "runs").iterdir()
    (row,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert row["trials_finished"] == 2 and row["tito_drift_loss_region"] == 0.0
    assert row["actor/logprob_gap_replay"] < 1e-3  # R3 rows of the endpoint's calls replayed in training
    records = [json.loads(p.read_text()) for p in sorted((run / "trajectories").rglob("*.json"))]
    for trial in records:
        assert trial["status"] == "finished", trial["cause"]
        assert trial["finish"] in ("harness_exit", "max_turns")
        assert len(trial["endpoint_calls"]) == trial["turns"] >= 1
        assert sum(trial["tito"]["boundaries"].values()) == trial["turns"] - 1
    (wandb_file,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    assert wandb_file.stat().st_size > 0
    assert any((wandb_file.parent / "files" / "media" / "images" / "plots").glob("reward*.png"))
