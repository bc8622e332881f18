"""`validate` verdicts with a scripted sandbox (no bubblewrap): counts, one-sentence texts, Ctrl-C."""

import asyncio
import json
import textwrap
from pathlib import Path

import pytest

from t1_rollout.validate import SandboxLedger, validate_pool
from t1_sandbox.base import ExecResult, Sandbox
from t1_tasks import Pool, load_task

ISSUE_TESTS = """
    import pytest

    @pytest.mark.parametrize("n", [1, 2, 3])
    def test_cases(n):
        assert n

    class TestThing:
        def test_method(self):
            assert True
"""
UNKNOWN_TESTS = """
    import pytest

    CASES = [1, 2, 3]

    @pytest.mark.parametrize("n", CASES)
    def test_cases(n):
        assert n
"""
PLAIN_TESTS = "def test_a():\n    pass\n\ndef test_b():\n    pass\n"


def make_task(root: Path, tests: str, *, agent_s: float = 30.0, verifier_s: float = 30.0):
    for d in ("environment", "tests", "solution"):
        (root / d).mkdir(parents=True)
    (root / "task.toml").write_text(
        f'[metadata]\ncategory = "x"\ndifficulty = "easy"\n[agent]\ntimeout_sec = {agent_s}\n'
        f"[verifier]\ntimeout_sec = {verifier_s}\n"
    )
    (root / "instruction.md").write_text("do it\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "tests" / "test.sh").write_text("true\n")
    (root / "tests" / "test_outputs.py").write_text(textwrap.dedent(tests))
    (root / "solution" / "solve.sh").write_text("true\n")
    return load_task(root)


def ctrf(*statuses: str) -> dict:
    tests = [{"name": f"t{i}", "status": s} for i, s in enumerate(statuses)]
    return {"results": {"tool": {"name": "pytest"}, "summary": {"tests": len(tests)}, "tests": tests}}


class ScriptedSandbox(Sandbox):
    """Plays back what solve.sh and test.sh do; the oracle run is told apart by the solution upload."""

    made: list["ScriptedSandbox"] = []

    def __init__(self, *, solve: ExecResult, verify: dict[str, ExecResult], report: dict[str, dict | None]):
        self.solve, self.verify, self.report = solve, verify, report
        self.kind = "nop"
        self.closed = False
        ScriptedSandbox.made.append(self)

    async def start(self, environment_dir, *, timeout_s):
        pass

    async def upload(self, local, remote, *, timeout_s=60, read_only=False):
        if remote == "/solution":
            self.kind = "oracle"

    async def exec(self, command, *, timeout_s, cwd=None, env=None, cpu_time_s=None):
        if "solve.sh" in command:
            return self.solve
        if "sha256sum" in command:  # run_verifier hashes the report as test.sh left it, then sets it aside
            return ran()
        if "find /logs/" in command:  # run_verifier lists the report folder, then copies a selection
            report = self.report[self.kind]
            return ran(f"f {len(json.dumps(report))} ctrf.json\0" if report is not None else "")
        if command.startswith("rm -rf /tmp/.t1-verifier-out"):  # staging the selection, and clearing it
            return ran()
        return self.verify[self.kind]

    async def download(self, remote, local, *, timeout_s=60):
        local.mkdir(parents=True, exist_ok=True)
        if self.report[self.kind] is not None:
            (local / "ctrf.json").write_text(json.dumps(self.report[self.kind]))

    async def open_shell(self):
        raise NotImplementedError

    async def close(self):
        self.closed = True


def ran(stdout: str = "", code: int | None = 0, timed_out: bool = False) -> ExecResult:
    return ExecResult(stdout=stdout, stderr="", exit_code=code, timed_out=timed_out, duration_s=0.1)


def validate(task, tmp_path, **script):
    script.setdefault("solve", ran())
    script.setdefault("verify", {"oracle": ran("4 passed"), "nop": ran("1 failed")})
    result = asyncio.run(
        validate_pool(
            Pool("test", (task,)), sandbox_factory=lambda: ScriptedSandbox(**script), work_dir=tmp_path / "w"
        )
    )
    return result.tasks[0]


def test_a_parametrized_pool_reported_4_of_4_is_valid(tmp_path):
    task = make_task(tmp_path / "issue", ISSUE_TESTS)
    assert task.n_assertions == 4  # 3 cases + 1 class method (the regex said 2)
    r = validate(
        task,
        tmp_path,
        report={"oracle": ctrf(*["passed"] * 4), "nop": ctrf("passed", "failed", "passed", "passed")},
    )
    assert r.ok, r.problems
    assert (r.oracle.passed, r.oracle.expected_total) == (4, 4)


def test_a_report_with_more_assertions_than_tests_define_says_so_once(tmp_path):
    task = make_task(tmp_path / "two", PLAIN_TESTS)
    r = validate(task, tmp_path, report={"oracle": ctrf(*["passed"] * 4), "nop": ctrf("failed", "failed")})
    assert r.problems == ["oracle: the verifier reported 4 assertions where tests/ define 2"]


def test_an_unknown_count_trusts_the_report_but_still_needs_all_passed_and_one_failed(tmp_path):
    task = make_task(tmp_path / "unknown", UNKNOWN_TESTS)
    assert task.n_assertions is None
    good = validate(task, tmp_path, report={"oracle": ctrf(*["passed"] * 3), "nop": ctrf("failed")})
    assert good.ok, good.problems
    wrong = validate(
        task, tmp_path, report={"oracle": ctrf("passed", "failed", "passed"), "nop": ctrf("failed")}
    )
    assert wrong.problems == ["oracle passes 2/3 assertions (failed: t1)"]
    weak = validate(task, tmp_path, report={"oracle": ctrf(*["passed"] * 3), "nop": ctrf(*["passed"] * 3)})
    assert weak.problems == ["weak verifier: a do-nothing agent passes every assertion"]


def test_solve_sh_timeout_says_the_deadline_with_decimals_and_no_empty_tail(tmp_path):
    task = make_task(tmp_path / "slow", PLAIN_TESTS, agent_s=0.5)
    r = validate(
        task, tmp_path, solve=ran(code=None, timed_out=True), report={"oracle": None, "nop": ctrf("failed")}
    )
    assert r.problems == [
        "oracle: solution/solve.sh timed out after 0.5 s (agent.timeout_sec in task.toml); it printed nothing"
    ]


def test_solve_sh_failure_quotes_the_end_of_its_output_on_one_line(tmp_path):
    task = make_task(tmp_path / "crash", PLAIN_TESTS)
    r = validate(
        task,
        tmp_path,
        solve=ran("step 1\n\nboom: no such file\n", code=3),
        report={"oracle": None, "nop": None},
    )
    assert r.problems[0] == "oracle: solution/solve.sh exited 3; its last output: step 1 boom: no such file"


def test_verifier_timeout_prints_half_a_second_not_zero(tmp_path):
    task = make_task(tmp_path / "vslow", PLAIN_TESTS, verifier_s=0.5)
    verify = {"oracle": ran(code=None, timed_out=True), "nop": ran(code=None, timed_out=True)}
    r = validate(task, tmp_path, verify=verify, report={"oracle": None, "nop": None})
    expected = "verifier timed out after 0.5 s (verifier.timeout_sec in task.toml); it printed nothing"
    assert r.problems == [f"oracle: {expected}", f"do-nothing: {expected}"]


def test_a_missing_report_is_one_sentence_without_repeats_or_an_empty_tail(tmp_path):
    task = make_task(tmp_path / "noreport", PLAIN_TESTS)
    verify = {"oracle": ran("", code=2), "nop": ran("ERROR: file not found: /tests/test_x.py\n", code=4)}
    r = validate(task, tmp_path, verify=verify, report={"oracle": None, "nop": None})
    assert r.problems == [
        "oracle: tests/test.sh exited 2 and wrote no per-assertion report (ctrf.json or JUnit *.xml in "
        "/logs/verifier); it printed nothing",
        "do-nothing: tests/test.sh exited 4 and wrote no per-assertion report (ctrf.json or JUnit *.xml in "
        "/logs/verifier); its last output: ERROR: file not found: /tests/test_x.py",
    ]
    for problem in r.problems:
        assert problem.count("per-assertion report") == 1 and not problem.rstrip().endswith((":", ";"))


def test_a_work_dir_that_is_a_file_is_refused_once_up_front(tmp_path):
    task = make_task(tmp_path / "t", PLAIN_TESTS)
    (tmp_path / "file").write_text("x")
    made_before = len(ScriptedSandbox.made)
    with pytest.raises(ValueError, match="not a directory"):
        asyncio.run(
            validate_pool(Pool("t", (task,)), sandbox_factory=lambda: None, work_dir=tmp_path / "file")  # type: ignore[arg-type]
        )
    assert len(ScriptedSandbox.made) == made_before


class HangingSandbox(ScriptedSandbox):
    async def exec(self, command, *, timeout_s, cwd=None, env=None, cpu_time_s=None):
        self.started = True
        await asyncio.sleep(3600)


def test_cancelling_a_validation_closes_every_sandbox_it_opened_and_the_ledger_says_so(tmp_path):
    tasks = tuple(make_task(tmp_path / f"t{i}", PLAIN_TESTS) for i in range(3))
    ledger = SandboxLedger()
    made: list[HangingSandbox] = []

    def factory():
        made.append(HangingSandbox(solve=ran(), verify={}, report={}))
        return made[-1]

    async def main():
        run = asyncio.ensure_future(
            validate_pool(Pool("t", tasks), sandbox_factory=factory, concurrency=2, ledger=ledger)
        )
        while sum(getattr(s, "started", False) for s in made) < 2:
            await asyncio.sleep(0.01)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(main())
    assert len(made) == 2 and all(s.closed for s in made)
    assert (ledger.opened, ledger.closed, ledger.open_now) == (2, 2, 0)
