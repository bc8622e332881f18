"""One preflight for `t1 recipe validate` and `t1 train`: same checks, same words, before any work."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t1.cli import app
from t1.run import PreflightError, Run, preflight
from t1_spec import RecipeError, load_recipe
from t1_trainer.megatron.backend import MISSING_LINE as MISSING_MEGATRON

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "tiny-cpu.yaml"
RECIPES = sorted((REPO / "recipes").glob("*.yaml"))


def test_the_tiny_recipe_is_runnable_here():
    verdict = preflight(load_recipe(TINY))
    assert verdict.ok, verdict.problems
    assert any(n.startswith("rollout.per_node_cap") for n in verdict.notes)
    assert not any("compaction" in n for n in verdict.notes)  # compaction is built: no note says otherwise


def test_missing_bubblewrap_is_named_with_how_to_install_it(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    problems = [p for p in preflight(load_recipe(TINY)).problems if p.startswith("sandbox.kind 'local'")]
    assert problems and any("apt-get install bubblewrap" in p for p in problems)
    with pytest.raises(PreflightError, match="bubblewrap"):
        Run(load_recipe(TINY), {})


def test_a_cuda_device_torch_cannot_see_is_refused_naming_the_field():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    problems = preflight(load_recipe(TINY, ["trainer.device=cuda:0"])).problems
    assert any(p.startswith("trainer.device 'cuda:0'") for p in problems), problems


def test_unbuilt_ppo_settings_are_listed_up_front():
    overrides = ["ppo.routing_replay=false", "ppo.kl_coef=0.1", "ppo.normalize_advantages=true"]
    problems = preflight(load_recipe(TINY, overrides)).problems
    assert [p.split()[0].rstrip(":") for p in problems] == ["ppo.normalize_advantages", "ppo.kl_coef"]


def test_a_backend_kind_without_a_registry_entry_is_refused_once_naming_the_field():
    problems = preflight(load_recipe(REPO / "recipes" / "t1-122b.yaml")).problems
    for field in ("engine.kind 'sglang'",):
        assert sum(p.startswith(field) for p in problems) == 1, (field, problems)
    # sandbox.kind daytona is registered now: its own preflight names what it lacks here (the API key)
    assert not any(p.startswith("sandbox.kind 'daytona': no backend") for p in problems), problems
    if not os.environ.get("DAYTONA_API_KEY"):
        assert (
            sum(
                p.startswith("sandbox.api_key_env: the environment variable DAYTONA_API_KEY")
                for p in problems
            )
            == 1
        )
    # trainer.backend megatron is registered now: its own preflight names what it cannot run here
    assert not any(p.startswith("trainer.backend 'megatron': no backend") for p in problems), problems
    tp_line = "plan.tp 2 on trainer.device cuda"  # tp > 1 is built on the CPU only
    assert any(p.startswith((tp_line, MISSING_MEGATRON)) for p in problems), problems


def test_a_plan_the_capacity_model_refuses_is_refused_before_any_sandbox(tmp_path):
    # M = 2 GiB at b0 = 0.5 GiB: tiny's actor + critic co-resident need 2.35 GiB (T1 §7.1)
    recipe = load_recipe(
        TINY, ["plan.memory_budget_gib=2", "plan.b0_gib=0.5", f"logging.run_root={tmp_path}"]
    )
    (line,) = [p for p in preflight(recipe).problems if p.startswith("plan")]
    assert "logit_buffer" in line or "allocator_residue" in line, line
    with pytest.raises(PreflightError):
        Run(recipe, {})
    assert not any(tmp_path.iterdir())


def test_checkpoint_every_default_and_optimizer_state_are_runnable():
    assert preflight(load_recipe(TINY, ["trainer.checkpoint_every=10"])).ok
    # optimizer states in checkpoints are built (the full run state of t1.run.resume)
    assert preflight(load_recipe(TINY, ["trainer.checkpoint_optimizer=true"])).problems == ()


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.name for p in RECIPES])
def test_validate_and_train_agree_on_every_shipped_recipe(recipe, tmp_path):
    """validate exits 0 exactly when train's preflight accepts; otherwise both print the same lines."""
    verdict = preflight(load_recipe(recipe))
    runner = CliRunner()
    checked = runner.invoke(app, ["recipe", "validate", str(recipe)])
    if verdict.ok:
        assert checked.exit_code == 0, checked.output
        return
    code = 1  # valid, not runnable here: a path the recipe names that this machine lacks included
    assert checked.exit_code == code, checked.output
    trained = runner.invoke(app, ["train", str(recipe), f"logging.run_root={tmp_path}"])
    assert trained.exit_code == code
    for line in verdict.invalid + verdict.problems:
        assert line in checked.output and line in trained.output
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("ppo.normalize_advantages=true", "ppo.normalize_advantages"),
        ("ppo.micro_batch_size=3", "ppo.micro_batch_size"),
    ],
)
def test_settings_validate_once_accepted_and_train_refused_are_refused_by_both(override, field, tmp_path):
    runner = CliRunner()
    checked = runner.invoke(app, ["recipe", "validate", str(TINY), override])
    trained = runner.invoke(app, ["train", str(TINY), override, f"logging.run_root={tmp_path}"])
    assert checked.exit_code != 0 and trained.exit_code != 0
    assert field in checked.output and field in trained.output
    assert not any(tmp_path.iterdir())


def test_spec_only_validation_skips_the_preflight():
    production = str(REPO / "recipes" / "t1-122b.yaml")
    result = CliRunner().invoke(app, ["recipe", "validate", production, "--spec-only"])
    assert result.exit_code == 0, result.output


def test_evaluation_runs_on_pool_sources_and_refuses_a_benchmark_name_in_one_line(tmp_path):
    on = ["evaluation.enabled=true", "evaluation.context_tokens=4096", "pool.limit=5"]
    suite = tmp_path / "suite"
    shutil.copytree(
        REPO / "packages/t1-tasks/src/t1_tasks/pools/mini/wordfreq-script", suite / "wordfreq-script"
    )
    assert preflight(load_recipe(TINY, [*on, f"evaluation.suites=[{suite}]"])).ok
    problems = preflight(load_recipe(TINY, [*on, f"evaluation.suites=[{suite},terminal-bench@2.1]"])).problems
    (line,) = [p for p in problems if p.startswith("evaluation.suites")]
    assert "'terminal-bench@2.1': not a directory" in line and "give a directory of task bundles" in line
    problems = preflight(load_recipe(TINY, [*on, f"evaluation.suites=[{tmp_path / 'empty'}]"])).problems
    assert any(p.startswith("evaluation.suites") for p in problems), problems


def test_evaluation_thinking_is_accepted_because_the_template_has_a_thinking_mode():
    from t1.run.preflight import template_has_thinking

    assert template_has_thinking()
    assert not [
        p for p in preflight(load_recipe(TINY, ["evaluation.thinking=true"])).problems if "thinking" in p
    ]


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("rollout.launched=20", "rollout.launched=20 exceeds the 9 tasks of pool"),
        ("pool.limit=3", "cut by pool.limit 3"),
        ("pool.source=/nonexistent", "pool.source '/nonexistent'"),
        ("logging.run_root=/proc/t1-runs", "logging.run_root '/proc/t1-runs'"),
        ("logging.run_root=/etc/passwd/runs", "/etc/passwd is not a directory"),
        ("pool.audit.file=/nonexistent/audit.jsonl", "pool.audit.file '/nonexistent/audit.jsonl'"),
    ],
)
def test_unusable_pools_and_run_roots_are_not_runnable_here_for_validate_and_train(override, says, tmp_path):
    runner = CliRunner()
    checked = runner.invoke(app, ["recipe", "validate", str(TINY), override])
    root = [] if override.startswith("logging.") else [f"logging.run_root={tmp_path}"]
    trained = runner.invoke(app, ["train", str(TINY), override, *root])
    # the recipe is valid; what this machine holds at those paths is not usable: exit 1, not 2
    assert checked.exit_code == 1 and trained.exit_code == 1, (checked.output, trained.output)
    assert says in checked.output and says in trained.output
    assert not any(tmp_path.iterdir())


def test_a_corrupt_checkpoint_is_not_runnable_here_for_validate_and_train(tmp_path):
    bad = tmp_path / "ckpt" / "actor.safetensors"
    bad.parent.mkdir()
    bad.write_bytes(b"\x08" + b"\x00" * 7 + b"not json")
    runner = CliRunner()
    args = [str(TINY), "model.init=checkpoint", f"model.checkpoint={bad}"]
    checked = runner.invoke(app, ["recipe", "validate", *args])
    trained = runner.invoke(app, ["train", *args, f"logging.run_root={tmp_path / 'runs'}"])
    assert checked.exit_code == 1 and trained.exit_code == 1, (checked.output, trained.output)
    for out in (checked.output, trained.output):
        assert "model.checkpoint" in out and "not a readable safetensors file" in out
    assert not (tmp_path / "runs").exists()


def test_groups_count_as_one_task_each_against_the_pool_size():
    """9 tasks x 2 samples launch 18 trials from the 9-task pool; 20 trials would draw 10 tasks."""
    from t1.run.pools import pool_problems

    fits = ["ppo.samples_per_task=2", "rollout.launched=18", "rollout.admitted=16", "ppo.batch_size=8"]
    assert pool_problems(load_recipe(TINY, fits)) == []
    over = [*fits[:1], "rollout.launched=20", *fits[2:]]
    (line,) = pool_problems(load_recipe(TINY, over))
    assert "rollout.launched=20 / ppo.samples_per_task 2 = 10 tasks per step exceeds the 9 tasks" in line


def test_a_plan_of_several_training_devices_is_refused_by_the_torch_trainer():
    problems = preflight(load_recipe(TINY, ["plan.devices=2", "plan.dp=2"])).problems
    (line,) = [p for p in problems if p.startswith("plan:")]
    assert "2 training devices" in line and "dp 2" in line


def test_train_prints_the_notes_validate_prints_even_when_it_refuses(tmp_path):
    runner = CliRunner()
    args = [str(TINY), "plan.memory_budget_gib=2", "plan.b0_gib=0.5"]
    checked = runner.invoke(app, ["recipe", "validate", *args])
    trained = runner.invoke(app, ["train", *args, f"logging.run_root={tmp_path}"])
    assert checked.exit_code == trained.exit_code == 1
    for note in ("critic_warmup.enabled", "rollout.per_node_cap", "liveness"):
        assert f"note {note}" in checked.output and f"note {note}" in trained.output, note


def test_a_value_error_once_the_run_has_started_is_a_failed_run_not_invalid_input(monkeypatch, tmp_path):
    from t1.run import driver

    def fail(self):
        raise ValueError("a sample's streams disagree")

    monkeypatch.setattr(driver.Run, "run", fail)
    result = CliRunner().invoke(app, ["train", str(TINY), f"logging.run_root={tmp_path}"])
    assert result.exit_code == 1 and "a sample's streams disagree" in result.output


def test_continuation_is_runnable_on_both_runtimes_and_off_by_default():
    assert load_recipe(TINY).rollout.continuation.enabled is False  # as in the paper (T1 §7.4)
    for recipe in (TINY, REPO / "recipes" / "tiny-ray.yaml"):
        for extra in ([], ["trainer.checkpoint_every=1"]):  # with checkpoints: their steps cancel the tail
            verdict = preflight(load_recipe(recipe, ["rollout.continuation.enabled=true", *extra]))
            assert verdict.ok, verdict.problems


@pytest.mark.parametrize(
    ("recipe", "overrides", "says"),
    [
        (
            "tiny-cpu.yaml",
            ["ppo.samples_per_task=2", "rollout.launched=10", "rollout.admitted=8"],
            "groups of ppo.samples_per_task 2 are not built with it",
        ),
    ],
    ids=["groups"],
)
def test_what_continuation_is_not_built_with_is_refused_by_name(recipe, overrides, says):
    # refused on every machine, so by the spec: --spec-only refuses it as validate and train do
    args = [str(REPO / "recipes" / recipe), "rollout.continuation.enabled=true", *overrides]
    with pytest.raises(RecipeError) as info:
        load_recipe(args[0], args[1:])
    lines = [p.message for p in info.value.problems if p.field == "rollout.continuation.enabled"]
    assert len(lines) == 1 and says in lines[0], info.value.problems
    for flags in ([], ["--spec-only"]):
        checked = CliRunner().invoke(app, ["recipe", "validate", *args, *flags])
        assert checked.exit_code == 2 and says in " ".join(checked.output.split())


@pytest.mark.parametrize(
    ("recipe", "overrides", "field"),
    [
        ("tiny-grpo.yaml", ["rollout.launched=5"], "rollout.launched"),
        ("tiny-cpu.yaml", ["pool.category_mix={a: 1.0}"], "pool.category_mix"),
        ("tiny-cpu.yaml", ["tito.normalize_max_s=16", "tito.normalize_max_u=96"], "tito.normalize_max_u"),
    ],
    ids=["launched-splits-a-group", "category-mix", "tito-bounds-swapped"],
)
def test_refusals_that_do_not_depend_on_the_machine_are_the_specs(recipe, overrides, field, tmp_path):
    """What no machine runs is refused by ``--spec-only`` as by validate and train, naming the field."""
    args = [str(REPO / "recipes" / recipe), *overrides]
    runner = CliRunner()
    for command in (
        ["recipe", "validate", *args, "--spec-only"],
        ["recipe", "validate", *args],
        ["train", *args, f"logging.run_root={tmp_path}"],
    ):
        result = runner.invoke(app, command)
        assert result.exit_code == 2 and field in result.output, (command, result.output)
    assert not any(tmp_path.iterdir())
