"""`t1 eval`: the oracle is the mini pool's ceiling, do-nothing its floor; a saved actor is evaluated."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t1.cli import app

REPO = Path(__file__).resolve().parents[2]
TINY = str(REPO / "recipes" / "tiny-cpu.yaml")
SHORT = ["evaluation.attempts=1", "pool.limit=2"]
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_checkpoint_with_a_policy_that_samples_no_model_is_refused():
    result = CliRunner().invoke(
        app, ["eval", "builtin:mini", "--recipe", TINY, "--policy", "oracle", "--checkpoint", "runs/x"]
    )
    assert result.exit_code == 2 and "--checkpoint is for --policy model" in result.output


def test_an_unknown_policy_is_refused_naming_the_choices():
    result = CliRunner().invoke(app, ["eval", "builtin:mini", "--recipe", TINY, "--policy", "random"])
    assert result.exit_code == 2 and "model, oracle, do-nothing" in result.output


@needs_bwrap
def test_oracle_resolves_the_mini_pool_and_draws_it(tmp_path):
    png = tmp_path / "eval.png"
    data = _json(
        CliRunner().invoke(
            app,
            [
                "eval",
                "builtin:mini",
                "--recipe",
                TINY,
                "--policy",
                "oracle",
                "--json",
                "--png",
                str(png),
                *SHORT,
            ],
        )
    )
    assert {
        "resolved_rate",
        "mean_reward",
        "pass_at_k",
        "trials",
        "failed",
        "per_category",
        "per_difficulty",
    } <= set(data)
    assert (data["trials"], data["failed"], data["resolved_rate"]) == (2, 0, 1.0)
    assert data["pass_at_k"] == {"1": 1.0}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_split_naming_a_task_the_pool_lacks_is_refused_naming_the_field():
    result = CliRunner().invoke(
        app, ["eval", "builtin:mini", "--recipe", TINY, "--policy", "oracle", "pool.tasks=[no-such-task]"]
    )
    assert result.exit_code == 2 and "pool.tasks: ['no-such-task'] not in" in result.output
    assert "override pool.tasks=null" in result.output


@needs_bwrap
def test_the_recipes_split_cuts_the_evaluated_pool():
    data = _json(
        CliRunner().invoke(
            app,
            [
                "eval",
                "builtin:mini",
                "--recipe",
                TINY,
                "--policy",
                "do-nothing",
                "--json",
                "evaluation.attempts=1",
                "pool.tasks=[fix-permissions,wordfreq-script]",
            ],
        )
    )
    assert (data["tasks"], data["trials"]) == (2, 2)


@needs_bwrap
def test_do_nothing_resolves_nothing_and_prints_the_table():
    result = CliRunner().invoke(
        app, ["eval", "builtin:mini", "--recipe", TINY, "--policy", "do-nothing", *SHORT]
    )
    assert result.exit_code == 0, result.output
    overall = next(line for line in result.output.splitlines() if line.strip().startswith("overall"))
    # group, tasks, trials, failed, resolved, ...
    assert overall.split()[1:5] == ["2", "2", "0", "0.000"]


def test_a_checkpoint_of_another_model_is_refused_before_any_trial(tmp_path, tiny_model_spec):
    from t1_spec import PPOSpec
    from t1_trainer.torch_backend import TorchBackend
    from t1_trainer.weights import save_weights

    other = tiny_model_spec.model_copy(update={"num_layers": 2, "full_attention_interval": 2})
    save_weights(TorchBackend(model_spec=other, ppo_spec=PPOSpec(batch_size=2), seed=0), tmp_path)
    result = CliRunner().invoke(
        app, ["eval", "builtin:mini", "--recipe", TINY, "--checkpoint", str(tmp_path)]
    )
    assert result.exit_code == 2, result.output
    assert "does not fit the model of the recipe's model section" in result.output


@needs_bwrap
@pytest.mark.e2e
def test_the_model_policy_evaluates_a_saved_actor(tmp_path, tiny_model_spec):
    from t1_spec import PPOSpec
    from t1_trainer.torch_backend import TorchBackend
    from t1_trainer.weights import save_weights

    save_weights(TorchBackend(model_spec=tiny_model_spec, ppo_spec=PPOSpec(batch_size=2), seed=3), tmp_path)
    result = CliRunner().invoke(
        app,
        [
            "eval", "builtin:mini", "--recipe", TINY, "--checkpoint", str(tmp_path), "--json",
            "evaluation.max_turns=1", "evaluation.attempts=1", "pool.limit=1", "rollout.max_new_tokens=16",
        ],
    )  # fmt: skip
    data = _json(result)
    assert data["policy"] == "model" and data["checkpoint"] == str(tmp_path)
    assert data["trials"] + data["failed"] == 1
    assert any(n.startswith("evaluation.context_tokens 96000: capped") for n in data["notes"])
    if data["trials"]:  # random weights: one turn of noise resolves nothing
        assert data["resolved_rate"] == 0.0 and data["turns_mean"] == 1.0
