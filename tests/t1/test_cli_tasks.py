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
    assert "the 1 task is valid" in result.output and "validating 1 task of" in result.output

    _task(tmp_path / "weak", "weak-one", WEAK)
    result = runner.invoke(app, ["tasks", "validate", str(tmp_path / "weak")])
    assert result.exit_code == 1, result.output
    assert "weak verifier" in result.output and "weak-one" in result.output
    assert "1 of 1 task failed validation" in result.stdout
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


# ------------------------------------------------------------ assertion counts, verdict texts, host, Ctrl-C

PARAMETRIZED = """
    import pytest
    from pathlib import Path

    @pytest.mark.parametrize("line", [0, 1, 2])
    def test_lines(line):
        assert Path("/app/out.txt").read_text().splitlines()[line] == "hello"

    class TestFile:
        def test_exists(self):
            assert Path("/app/out.txt").is_file()
"""
NON_LITERAL = """
    import pytest

    CASES = ["a", "b"]

    @pytest.mark.parametrize("c", CASES)
    def test_c(c):
        assert c
"""


def _parametrized_pool(root: Path) -> Path:
    _task(root, "a-parametrized", PARAMETRIZED)
    solve = root / "a-parametrized" / "solution" / "solve.sh"
    solve.write_text("printf 'hello\\nhello\\nhello\\n' > /app/out.txt\n")
    toml = root / "a-parametrized" / "task.toml"
    toml.write_text(toml.read_text() + "[verifier]\ntimeout_sec = 0.5\n[agent]\ntimeout_sec = 90\n")
    _task(root, "b-non-literal", NON_LITERAL)
    return root


def _row(output: str, task_id: str) -> list[str]:
    return next(line.split() for line in output.splitlines() if line.split()[:1] == [task_id])


def test_list_counts_parametrize_cases_and_class_methods_and_marks_unknown_counts(tmp_path):
    result = runner.invoke(app, ["tasks", "list", str(_parametrized_pool(tmp_path))])
    assert result.exit_code == 0, result.output
    # id, category, difficulty, assertions, agent s, verifier s, cpus, memory MB
    assert _row(result.stdout, "a-parametrized")[3:6] == ["4", "90", "0.5"]  # 3 cases + 1 method; not "0" s
    assert _row(result.stdout, "b-non-literal")[3] == "?"
    assert "assertions ?: not known without running pytest" in " ".join(result.stdout.split())


def test_stats_leaves_unknown_counts_out_and_says_how_many(tmp_path):
    result = runner.invoke(app, ["tasks", "stats", str(_parametrized_pool(tmp_path))])
    assert result.exit_code == 0, result.output
    assert "2 tasks, 4 assertions (and 1 tasks whose count is known only when run" in result.stdout


@pytest.mark.parametrize("keep", ["file", "file/below"])
def test_validate_keep_that_is_not_a_directory_is_refused_up_front_with_exit_2(tmp_path, keep):
    (tmp_path / "file").write_text("not a directory")
    result = runner.invoke(app, ["tasks", "validate", "--keep", str(tmp_path / keep)])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("--keep") == 1 and "error:" in result.stderr
    assert "validating" not in result.stdout  # refused before any task ran


def test_validate_keep_creates_a_missing_directory(tmp_path):
    # the pool is absent (exit 2 after --keep was checked): no sandbox is needed to see the directory made
    keep = tmp_path / "a" / "b"
    result = runner.invoke(app, ["tasks", "validate", str(tmp_path / "absent"), "--keep", str(keep)])
    assert result.exit_code == 2 and "not a directory" in result.stderr and "--keep" not in result.stderr
    assert keep.is_dir()


def test_validate_without_bwrap_says_once_how_to_install_it(tmp_path, monkeypatch):
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "bwrap" else real_which(name))
    result = runner.invoke(app, ["tasks", "validate"])
    assert result.exit_code == 1, result.output
    assert result.output.count("apt-get install bubblewrap") == 1
    assert "validating" not in result.stdout and "FAIL" not in result.stdout


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_validate_interrupted_by_ctrl_c_says_so_and_that_every_sandbox_was_reclaimed(
    tmp_path, monkeypatch, signame
):
    import asyncio
    import signal

    import t1_sandbox.local
    from t1 import cli_tasks
    from t1_sandbox.base import Sandbox

    made: list = []

    class CtrlCSandbox(Sandbox):
        """Presses Ctrl-C (SIGINT to this process) while its solution runs."""

        def __init__(self):
            self.closed = False
            made.append(self)

        async def start(self, environment_dir, *, timeout_s):
            pass

        async def upload(self, local, remote, *, timeout_s=60):
            pass

        async def exec(self, command, *, timeout_s, cwd=None, env=None, cpu_time_s=None):
            if len(made) == 2:
                os.kill(os.getpid(), getattr(signal, signame))
            await asyncio.sleep(60)

        async def download(self, remote, local, *, timeout_s=60):
            pass

        async def open_shell(self):
            raise NotImplementedError

        async def close(self):
            self.closed = True

    monkeypatch.setattr(cli_tasks, "_sandbox_host_problems", lambda: [])
    monkeypatch.setattr(t1_sandbox.local, "LocalSandbox", CtrlCSandbox)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        result = runner.invoke(app, ["tasks", "validate", "-j", "2"])
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert result.exit_code == 130, result.output
    assert len(made) == 2 and all(s.closed for s in made)
    (line,) = result.stderr.splitlines()
    assert line == (
        "interrupted: validation stopped after 0 of 9 tasks; the checks in flight were cancelled and all 2 "
        "sandboxes it started were reclaimed"
    )


@needs_bwrap
def test_validate_passes_a_parametrized_task_and_trusts_the_report_for_an_unknown_count(tmp_path):
    root = _parametrized_pool(tmp_path)
    toml = root / "a-parametrized" / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 0.5", "timeout_sec = 60"))
    result = runner.invoke(app, ["tasks", "validate", str(root)])
    # b-non-literal's verifier passes whatever the agent does: weak, judged on the 2 cases it reported
    assert result.exit_code == 1, result.output
    a, b = _row(result.stdout, "a-parametrized"), _row(result.stdout, "b-non-literal")
    assert a[1:4] == ["4/4", "0/4", "ok"], a
    assert b[1:3] == ["2/2", "2/2"] and "weak verifier" in " ".join(b), b


@needs_bwrap
def test_validate_verifier_timeout_of_half_a_second_is_printed_as_such(tmp_path):
    root = tmp_path / "pool"
    _task(root, "slow", "import time\n\ndef test_slow():\n    time.sleep(5)\n")
    toml = root / "slow" / "task.toml"
    toml.write_text(toml.read_text() + "[verifier]\ntimeout_sec = 0.5\n")
    result = runner.invoke(app, ["tasks", "validate", str(root)])
    assert result.exit_code == 1, result.output
    text = " ".join(result.stdout.split())
    assert "verifier timed out after 0.5 s (verifier.timeout_sec in task.toml)" in text
    assert "after 0 s" not in text


# ------------------------------------------------------------ stats: record, recipe, --json, --png


def _two_task_pool(root: Path) -> Path:
    _task(root, "a-hello", GOOD)  # 3 assertions
    _task(root, "b-parametrized", PARAMETRIZED)  # 4 assertions
    return root


def _write_record(path: Path, observed: dict[str, tuple[int, str]], pool: Path) -> Path:
    import datetime

    from t1_tasks import ValidationRecord, write_record
    from t1_tasks.validation import CheckRecord, TaskRecord

    def check(total, source, solve):
        return CheckRecord(
            passed=total, total=total, report_source=source, solve_s=solve, verifier_s=2.0, duration_s=3.0
        )

    rows = tuple(
        TaskRecord(id=tid, verdict="ok", oracle=check(n, src, 0.5), nop=check(n, src, None))
        for tid, (n, src) in observed.items()
    )
    record = ValidationRecord(
        pool=str(pool),
        created=datetime.datetime.now(datetime.UTC),
        t1_version="0",
        duration_s=1.0,
        tasks=rows,
    )
    return write_record(record, path)


def test_stats_json_has_the_documented_keys_and_the_suggested_scale(tmp_path):
    import json
    import math

    import numpy as np

    root = _two_task_pool(tmp_path / "pool")
    result = runner.invoke(app, ["tasks", "stats", str(root), "--json", "--recipe", "recipes/tiny-cpu.yaml"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in ("median", "p90", "max", "suggested_scale", "recipe_scale", "n_tasks", "categories"):
        assert key in data, key
    for key in ("difficulties", "per_assertion_report_fraction", "runtimes"):
        assert key in data, key
    assert data["p90"] == pytest.approx(np.percentile([3, 4], 90))
    assert data["suggested_scale"] == math.ceil(np.percentile([3, 4], 90)) == 4
    assert data["recipe_scale"] == 20 and data["n_tasks"] == 2 and data["max"] == 4
    assert data["per_assertion_report_fraction"] is None and data["runtimes"] == {}


def test_stats_with_a_record_prefers_observed_counts_and_shows_report_share_and_runtimes(tmp_path):
    import json

    root = _two_task_pool(tmp_path / "pool")
    record = _write_record(
        tmp_path / "r.json", {"a-hello": (12, "ctrf"), "b-parametrized": (0, "reward.txt")}, root
    )
    result = runner.invoke(app, ["tasks", "stats", str(root), "--validated", str(record), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["max"] == 12 and data["observed"]["n"] == 1  # b fell back to reward.txt: static 4 kept
    assert data["per_assertion_report_fraction"] == 0.5
    assert (
        data["runtimes"]["oracle_solve_s"]["median"] == 0.5 and data["runtimes"]["verifier_s"]["max"] == 2.0
    )
    text = runner.invoke(app, ["tasks", "stats", str(root), "--validated", str(record)])
    assert text.exit_code == 0, text.output
    out = " ".join(text.stdout.split())
    assert "per-assertion reports (CTRF or JUnit): 1 of 2 tasks (50%" in out and "93%" in out
    assert "observed (record" in out and "suggested S = ceil(p90) = 12" in out


def test_stats_text_histogram_sums_to_the_task_count_and_old_lines_stay(tmp_path):
    root = _parametrized_pool(tmp_path / "pool")  # 4 known, 1 unknown
    result = runner.invoke(app, ["tasks", "stats", str(root)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = lines.index("histogram (assertions | tasks):")
    bars = [line for line in lines[start + 1 :] if " | " in line]
    assert sum(int(line.rsplit(" ", 1)[1]) for line in bars) == 2
    assert bars[-1].strip().startswith("? |")
    assert "assertions per task (static): p10 4, p50 4, p90 4, max 4" in result.stdout


def test_stats_png_is_a_valid_png(tmp_path):
    png = tmp_path / "h.png"
    result = runner.invoke(app, ["tasks", "stats", "--png", str(png), "--recipe", "recipes/tiny-cpu.yaml"])
    assert result.exit_code == 0, result.output
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and 0 < len(data) < 100_000
    assert f"histogram written to {png}" in " ".join(result.stdout.split())


@pytest.mark.parametrize(
    ("where", "says"),
    [
        (lambda tmp: tmp, "is a directory; give a file path"),
        (lambda tmp: tmp / "missing" / "h.png", "does not exist; create the directory"),
        (lambda tmp: tmp / "file.txt" / "h.png", "is not a directory; create the directory"),
    ],
    ids=["directory", "missing-parent", "parent-is-a-file"],
)
def test_stats_refuses_an_unwritable_png_with_exit_2_naming_the_option(tmp_path, where, says):
    (tmp_path / "file.txt").write_text("x")
    png = where(tmp_path)
    result = runner.invoke(app, ["tasks", "stats", "--png", str(png)])
    assert result.exit_code == 2, result.output
    assert f"--png {png}" in result.stderr and says in " ".join(result.stderr.split())
    assert "Errno" not in result.stderr and not (tmp_path / "missing").exists()


def test_stats_refuses_a_record_of_another_version_with_exit_2(tmp_path):
    import json

    record = _write_record(tmp_path / "r.json", {"a-hello": (3, "ctrf")}, tmp_path)
    data = json.loads(record.read_text())
    data["version"] = "t1-validation/v0"
    record.write_text(json.dumps(data))
    result = runner.invoke(app, ["tasks", "stats", "--validated", str(record)])
    assert result.exit_code == 2, result.output
    assert "version 't1-validation/v0' is not supported" in result.stderr


@needs_bwrap
def test_validate_record_feeds_stats_the_observed_counts(tmp_path):
    import json

    from t1_tasks import read_record

    _task(tmp_path / "pool", "hello", GOOD)
    path = tmp_path / "rec.json"
    result = runner.invoke(app, ["tasks", "validate", str(tmp_path / "pool"), "--record", str(path)])
    assert result.exit_code == 0, result.output
    (row,) = read_record(path).tasks
    assert (row.id, row.verdict, row.static_assertions) == ("hello", "ok", 3)
    assert (row.oracle.passed, row.oracle.total, row.oracle.report_source) == (3, 3, "ctrf")
    assert row.nop.passed < row.nop.total == 3 and row.oracle.solve_s is not None
    assert row.oracle.verifier_s > 0 and row.nop.solve_s is None
    stats = runner.invoke(app, ["tasks", "stats", str(tmp_path / "pool"), "--validated", str(path), "--json"])
    data = json.loads(stats.stdout)
    assert data["observed"]["max"] == 3 and data["per_assertion_report_fraction"] == 1.0


def test_stats_and_audit_refuse_a_record_of_another_pool(tmp_path):
    root = _two_task_pool(tmp_path / "pool")
    other = _write_record(tmp_path / "r.json", {"a-hello": (3, "ctrf")}, tmp_path / "elsewhere")
    for verb in ("stats", "audit"):
        result = runner.invoke(app, ["tasks", verb, str(root), "--validated", str(other)])
        assert result.exit_code == 2, (verb, result.output)
        assert "validation record of pool" in result.output, verb


def test_validate_fails_a_bundle_whose_instruction_links_to_a_host_file(tmp_path):
    # The attack: instruction.md -> a host file; validate said ok and the file reached the agent's prompt.
    good = load_pool("builtin:mini").get("csv-region-totals").path
    shutil.copytree(good, tmp_path / "pool" / "linked")
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN=hunter2\n")
    (tmp_path / "pool" / "linked" / "instruction.md").unlink()
    (tmp_path / "pool" / "linked" / "instruction.md").symlink_to(secret)
    result = runner.invoke(app, ["tasks", "validate", str(tmp_path / "pool")])
    assert result.exit_code == 1, result.output
    flat = " ".join(result.stdout.split())
    assert "links outside the bundle are not followed" in flat and str(secret) in flat
    assert "1 of 1 task failed validation: linked" in result.stdout
    assert "hunter2" not in result.stdout
