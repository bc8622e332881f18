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


def test_malformed_bundle_exits_2_naming_the_field(tmp_path):
    task = tmp_path / "t"
    for d in ("environment", "tests", "solution"):
        (task / d).mkdir(parents=True)
    (task / "task.toml").write_text('[metadata]\ncategory = "x"\n')
    for rel in ("instruction.md", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh"):
        (task / rel).write_text("x\n")
    result = runner.invoke(app, ["tasks", "validate", str(tmp_path)])
    assert result.exit_code == 2
    assert "metadata.difficulty" in result.output


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
