"""Every verb's exit codes follow one rule (the README's and `t1.cli`'s).

0: success. 1: the input is valid but the check failed or the work cannot be done here (a plan that does not
fit, a failing or broken task, a valid recipe whose preflight refuses it on this machine, paths it names that
this machine lacks included). 2: invalid input (a recipe that does not load or validate, a missing file given
as an argument, bad arguments). Verbs that need sandboxes for 0 or 1 (train, eval, tasks validate) are run to
those codes in their own tests; here each is run to the codes it reaches without a sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t1.cli import app

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "recipes" / "tiny-cpu.yaml")
BIG = str(ROOT / "recipes" / "t1-122b.yaml")
GRPO = str(ROOT / "recipes" / "grpo.yaml")
LEARN = str(ROOT / "recipes" / "tiny-learn.yaml")


def code(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_version_prints_the_package_version():
    from importlib.metadata import version

    assert code("--version") == (0, f"t1 {version('t1')}\n")


def test_recipe_validate_exits_1_for_a_valid_recipe_this_machine_cannot_run():
    # the production recipe's refusals are paths this machine lacks, devices, backends not built: all "here"
    status, out = code("recipe", "validate", BIG)
    assert status == 1, out
    assert (
        out.startswith("valid: ") and "pool.source 'T1-15k'" in out and "cannot run this recipe here" in out
    )


@pytest.mark.parametrize(
    "args",
    [
        ["recipe", "validate", BIG, "--spec-only"],
        ["recipe", "validate", TINY, "--spec-only"],
    ],
)
def test_recipe_validate_spec_only_exits_0_for_a_valid_recipe(args):
    status, out = code(*args)
    assert status == 0, out


@pytest.mark.parametrize(
    "args",
    [
        ["recipe", "validate", "no-such-recipe.yaml"],
        ["recipe", "validate", TINY, "ppo.steps=-1"],
        ["recipe", "validate", BIG, "ppo.steps=-1", "--spec-only"],
    ],
)
def test_recipe_validate_exits_2_for_invalid_input(args):
    status, out = code(*args)
    assert status == 2, out
    assert "valid: " not in out


def test_train_exits_1_for_a_valid_recipe_this_machine_cannot_run_and_2_for_an_invalid_one(tmp_path):
    status, out = code("train", BIG, f"logging.run_root={tmp_path}")
    assert status == 1 and "cannot run this recipe here" in out, out
    status, out = code("train", TINY, "ppo.steps=-1", f"logging.run_root={tmp_path}")
    assert status == 2, out
    status, out = code("train", TINY, f"pool.source={tmp_path / 'no-pool'}", f"logging.run_root={tmp_path}")
    assert status == 1 and "pool.source" in out, out  # a path the recipe names, absent here
    assert not any(tmp_path.iterdir())  # refused before any run directory


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["recipe", "show", TINY], 0),
        (["recipe", "show", "no-such-recipe.yaml"], 2),
        (["recipe", "schema", "--section", "ppo"], 0),
        (["recipe", "schema", "--section", "no-such-section"], 2),
        (["recipe", "diff", GRPO], 0),
        (["recipe", "diff", TINY], 2),  # nothing to compare: no extends:, no --against, no overrides
    ],
)
def test_recipe_show_schema_diff(args, expected):
    status, out = code(*args)
    assert status == expected, out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["plan", "check", BIG], 0),
        (["plan", "check", BIG, "plan.token_wall=2000000"], 1),  # the capacity model refuses it
        (["plan", "check", "no-such-recipe.yaml"], 2),
        (["plan", "search", BIG], 0),
        (["plan", "search", "no-such-recipe.yaml"], 2),
        (["plan", "split", "--devices", "8", "--generation-work", "16", "--training-work", "41"], 0),
        (["plan", "split", "--devices", "0", "--generation-work", "16", "--training-work", "41"], 2),
    ],
)
def test_plan_verbs(args, expected):
    status, out = code(*args)
    assert status == expected, out


def test_plan_calibrate_exits_2_for_a_bad_csv(tmp_path):
    csv = tmp_path / "peaks.csv"
    csv.write_text("not,a,measurement\nx,y,z\n")
    status, out = code("plan", "calibrate", str(csv), "--recipe", BIG)
    assert status == 2, out


def _broken_pool(tmp_path: Path) -> Path:
    broken = tmp_path / "pool" / "broken-task"
    broken.mkdir(parents=True)
    (broken / "task.toml").write_text("version = [\n")  # not TOML: a broken bundle of a pool that loads
    return tmp_path / "pool"


@pytest.mark.parametrize("verb", ["list", "stats", "audit"])
def test_tasks_read_only_verbs(verb, tmp_path):
    assert code("tasks", verb, "builtin:mini")[0] == 0
    status, out = code("tasks", verb, str(_broken_pool(tmp_path)))
    assert status == 1, out  # a broken bundle: the pool loaded, the check failed
    status, out = code("tasks", verb, str(tmp_path / "no-such-pool"))
    assert status == 2, out


def test_tasks_overlap(tmp_path):
    assert code("tasks", "overlap", "builtin:mini", "builtin:mini")[0] == 1  # every task matches itself
    status, out = code("tasks", "overlap", "builtin:mini", str(tmp_path / "no-such-pool"))
    assert status == 2, out


def test_tasks_validate_exits_2_for_a_keep_that_is_not_a_directory(tmp_path):
    keep = tmp_path / "file"
    keep.write_text("")
    status, out = code("tasks", "validate", "builtin:mini", "--keep", str(keep))
    assert status == 2, out


def test_eval_exits_2_for_a_missing_pool(tmp_path):
    status, out = code("eval", str(tmp_path / "no-such-pool"), "--recipe", TINY, "--policy", "oracle")
    assert status == 2, out


def test_sft_exits_2_without_an_sft_section_and_1_for_trajectories_this_machine_lacks(tmp_path):
    status, out = code("sft", TINY)
    assert status == 2, out
    missing = tmp_path / "no-such-trajectories.jsonl"
    status, out = code(
        "sft",
        LEARN,
        "sft.source=trajectories",
        f"sft.trajectories={missing}",
        f"sft.output={tmp_path / 'out'}",
    )
    assert status == 1 and str(missing) in out, out


def test_plot_exits_2_for_a_folder_that_is_not_a_run(tmp_path):
    status, out = code("plot", str(tmp_path))
    assert status == 2, out


def test_reward(tmp_path):
    status, out = code("reward", str(tmp_path / "no-such-folder"))
    assert status == 2, out
    (tmp_path / "reward.json").write_text(json.dumps({"reward": 1.0}))
    status, out = code("reward", str(tmp_path))
    assert status == 0, out
