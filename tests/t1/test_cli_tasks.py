"""`t1 tasks list / stats / validate`: output and exit codes (0 ok, 1 failing task, 2 bad input)."""

import os
import shutil
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t1.cli import app
from t1_tasks import load_pool

runner = CliRunner()
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0, reason="needs bubblewrap and root"
)


def test_list_shows_every_task_with_category_and_assertions():
    result = runner.invoke(app, ["tasks", "list"])
    assert result.exit_code == 0, result.output
    for task in load_pool("builtin:mini"):
        line = next(line for line in result.output.splitlines() if task.id in line)
        assert task.category in line and f" {task.n_assertions} " in line


def test_stats_prints_category_mix_and_percentiles():
    result = runner.invoke(app, ["tasks", "stats", "builtin:mini"])
    assert result.exit_code == 0, result.output
    assert "version-control" in result.output and "p90" in result.output


@pytest.mark.parametrize("pool", ["builtin:nope", "/nonexistent/pool"])
def test_bad_pool_exits_2(pool):
    result = runner.invoke(app, ["tasks", "list", pool])
    assert result.exit_code == 2


def _broken_pool(root: Path) -> Path:
    """Four bundles: one complete (a copy of a mini task), three broken in different ways."""
    good = load_pool("builtin:mini").get("csv-region-totals").path
    shutil.copytree(good, root / "a-good")
    shutil.copytree(good, root / "b-bad-toml")
    toml = (root / "b-bad-toml" / "task.toml").read_text().replace('difficulty = "easy"', "difficulty = 3")
    (root / "b-bad-toml" / "task.toml").write_text(toml)
    shutil.copytree(good, root / "c-no-test-sh")
    (root / "c-no-test-sh" / "tests" / "test.sh").unlink()
    shutil.copytree(good, root / "d-no-instruction")
    (root / "d-no-instruction" / "instruction.md").unlink()
    return root


BROKEN = {
    "b-bad-toml": "task.toml: field metadata.difficulty",
    "c-no-test-sh": "tests/test.sh: missing",
    "d-no-instruction": "instruction.md: missing",
}


@pytest.mark.parametrize("verb", ["list", "stats"])
def test_list_and_stats_show_the_good_tasks_and_every_broken_bundle_with_its_error(tmp_path, verb):
    result = runner.invoke(app, ["tasks", verb, str(_broken_pool(tmp_path))])
    assert result.exit_code == 1, result.output
    for task_id, error in BROKEN.items():
        line = next(line for line in result.stdout.splitlines() if line.strip().startswith(task_id))
        assert error in line, line
    if verb == "list":
        assert any(line.split()[:1] == ["a-good"] for line in result.stdout.splitlines())
    else:
        assert "text-processing" in result.stdout and "1 tasks" in result.stdout  # only the good one counted
    assert result.stderr == ""  # reported, not an error line


def test_validate_reports_every_broken_bundle_as_a_failure_exit_1(tmp_path):
    # Every bundle broken: nothing to run in a sandbox, so this needs no bubblewrap.
    root = _broken_pool(tmp_path)
    shutil.rmtree(root / "a-good")
    result = runner.invoke(app, ["tasks", "validate", str(root)])
    assert result.exit_code == 1, result.output
    for task_id, error in BROKEN.items():
        assert f"  {task_id}: " in result.stdout and error in result.stdout
        row = next(line for line in result.stdout.splitlines() if line.strip().startswith(f"{task_id}  "))
        assert "broken bundle" in row
    assert "3 of 3 tasks failed validation: b-bad-toml, c-no-test-sh, d-no-instruction" in result.stdout
    # The exit code is not reported as an error (the stray "error: 1" after the summary).
    assert result.stderr == ""


@pytest.mark.parametrize("verb", ["list", "stats", "validate"])
def test_a_missing_or_empty_pool_still_exits_2(tmp_path, verb):
    result = runner.invoke(app, ["tasks", verb, str(tmp_path / "absent")])
    assert result.exit_code == 2 and "not a directory" in result.stderr
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["tasks", verb, str(tmp_path / "empty")])
    assert result.exit_code == 2 and "no task bundles" in result.stderr


def test_list_footer_says_training_applies_the_recipe_deadlines_and_limits_not_task_toml():
    result = runner.invoke(app, ["tasks", "list"])
    assert result.exit_code == 0, result.output
    header = next(line for line in result.stdout.splitlines() if line.split()[:1] == ["id"])
    assert "cpus" in header and "memory MB" in header
    footer = " ".join(result.stdout.split())
    for words in (
        "shown for information",
        "rollout.agent_deadline_s",
        "rollout.verifier_deadline_s",
        "sandbox limits",
        "nothing uses [environment]",
    ):
        assert words in footer, words


def _task(root: Path, name: str, tests: str) -> None:
    t = root / name
    for d in ("environment", "tests", "solution"):
        (t / d).mkdir(parents=True)
    (t / "task.toml").write_text('[metadata]\ncategory = "scripting"\ndifficulty = "easy"\n')
    (t / "instruction.md").write_text("Write hello to /app/out.txt\n")
    (t / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (t / "tests" / "test.sh").write_text(
        load_pool("builtin:mini").tasks[0].tests_dir.joinpath("test.sh").read_text()
    )
    (t / "tests" / "test_outputs.py").write_text(textwrap.dedent(tests))
    (t / "solution" / "solve.sh").write_text("echo hello > /app/out.txt\n")


GOOD = """
    from pathlib import Path

    def test_exists():
        assert Path("/app/out.txt").is_file()

    def test_content():
        assert Path("/app/out.txt").read_text() == "hello\\n"

    def test_only_file():
        assert [p.name for p in Path("/app").iterdir()] == ["out.txt"]
"""
WEAK = "def test_a():\n    pass\n\ndef test_b():\n    pass\n\ndef test_c():\n    pass\n"


@needs_bwrap
def test_validate_exits_0_on_a_good_pool_and_1_on_a_weak_verifier(tmp_path):
    _task(tmp_path / "good", "hello", GOOD)
    result = runner.invoke(app, ["tasks", "validate", str(tmp_path / "good")])
    assert result.exit_code == 0, result.output
    assert "all 1 tasks valid" in result.output

    _task(tmp_path / "weak", "weak-one", WEAK)
    result = runner.invoke(app, ["tasks", "validate", str(tmp_path / "weak")])
    assert result.exit_code == 1, result.output
    assert "weak verifier" in result.output and "weak-one" in result.output
    assert "1 of 1 tasks failed validation" in result.stdout
    assert result.stderr == ""  # no stray "error: 1" after the summary


@needs_bwrap
def test_validate_runs_the_good_tasks_and_reports_the_broken_next_to_them(tmp_path):
    result = runner.invoke(app, ["tasks", "validate", str(_broken_pool(tmp_path))])
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    rows = {line.split()[0]: line for line in lines if line.strip()[:2] in ("a-", "b-", "c-", "d-")}
    assert "4/4" in rows["a-good"] and rows["a-good"].rstrip().endswith("ok")
    assert all("broken bundle" in rows[task_id] for task_id in BROKEN)
    assert "3 of 4 tasks failed validation: b-bad-toml, c-no-test-sh, d-no-instruction" in result.stdout
    assert result.stderr == ""
