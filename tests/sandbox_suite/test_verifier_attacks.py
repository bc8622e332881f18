"""Attacks on the reward from inside the sandbox, each refused, tagged or scored 0, on every backend.

The task is the shape of the bundled ``fix-stats-crash``: four pytest assertions, each running the agent's
program ``/app/prog.py``, a ``test.sh`` in the mini pool's form (CTRF report, ``reward.json`` on exit). The
agent writes the program; the verifier then runs it. Honest maximum under the dense reward: 4/20 = 0.2.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import textwrap
from dataclasses import dataclass
from pathlib import Path

from t1_rollout.attribution import judge_run
from t1_rollout.verify import run_verifier
from t1_spec import DenseRewardSpec

N_TESTS = 4
TEST_SH = "\n".join(
    [
        "#!/bin/bash",
        "mkdir -p /logs/verifier",
        "rc=1",
        'trap \'if [ "$rc" -eq 0 ]; then r=1.0; else r=0.0; fi; '
        'printf "{\\"reward\\": %s}\\n" "$r" > /logs/verifier/reward.json\' EXIT',
        "export PYTHONDONTWRITEBYTECODE=1",
        "python3 -m pytest -p no:cacheprovider --rootdir=/tests --ctrf /logs/verifier/ctrf.json -rA "
        "/tests/test_outputs.py",
        "rc=$?",
        "{post}",
        'exit "$rc"',
        "",
    ]
)
TESTS_PY = "import subprocess\n\n" + "".join(
    f"def test_case_{i}():\n"
    f"    out = subprocess.run(\n"
    f"        ['python3', '/app/prog.py', '{i}'], capture_output=True, text=True, timeout=30\n"
    f"    )\n"
    f"    assert out.stdout.strip() == 'answer {i * i}'\n\n"
    for i in range(N_TESTS)
)
FORGED_200 = {
    "results": {
        "tool": {"name": "pytest"},
        "summary": {"tests": 200},
        "tests": [{"name": f"test_outputs.py::test_case_{i}", "status": "passed"} for i in range(200)],
    }
}
FORGED_EXACT = {
    "results": {
        "tool": {"name": "pytest"},
        "summary": {"tests": N_TESTS},
        "tests": [{"name": f"test_outputs.py::test_case_{i}", "status": "passed"} for i in range(N_TESTS)],
    }
}


@dataclass
class AttackTask:
    id: str
    tests_dir: Path
    n_assertions: int | None = N_TESTS


def _task(tmp_path: Path, post: str = "") -> AttackTask:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text(TEST_SH.replace("{post}", post))
    (tests / "test_outputs.py").write_text(TESTS_PY)
    return AttackTask("attack", tests)


async def _attack(make_sandbox, environment_dir, tmp_path, program: str, *, post: str = "", deadline=60):
    """Build, let the agent write ``/app/prog.py``, run the verifier, score it as a trial does."""
    task = _task(tmp_path, post)
    (tmp_path / "prog.py").write_text(textwrap.dedent(program))
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=60)
        await sb.upload(tmp_path / "prog.py", "/app/prog.py")  # what the agent wrote
        run = await run_verifier(sb, task, timeout_s=deadline, out_dir=tmp_path / "out")
    report, verdict = await judge_run(run, task, DenseRewardSpec())
    return run, report, verdict


HONEST_BUT_WRONG = """
import sys
print("answer", int(sys.argv[1]) + 1)
"""


async def test_an_honest_wrong_program_is_scored_by_its_assertions(make_sandbox, environment_dir, tmp_path):
    # the baseline of the attacks below: n + 1 is n * n for no n in 0..3, so nothing passes, a real 0
    run, report, verdict = await _attack(make_sandbox, environment_dir, tmp_path, HONEST_BUT_WRONG)
    assert run.error is None and not run.evidence and report.fallback is None
    assert (report.passed, report.total) == (0, N_TESTS)
    assert (verdict.status, verdict.reward.value, verdict.tampered) == ("finished", 0.0, False)


async def test_a_correct_program_scores_its_four_assertions(make_sandbox, environment_dir, tmp_path):
    program = "import sys\nn = int(sys.argv[1])\nprint('answer', n * n)\n"
    run, report, verdict = await _attack(make_sandbox, environment_dir, tmp_path, program)
    assert not verdict.tampered, verdict.evidence
    assert verdict.reward.value == N_TESTS / 20  # the honest maximum, P / S with S = 20 (T1 §5.2, Eq. 20)


async def test_a_forged_read_only_report_of_200_entries_is_refused(
    make_sandbox, environment_dir, tmp_path, backend_kind
):
    program = f"""
    import json, os, sys
    path = "/logs/verifier/ctrf.json"
    if not os.path.exists(path):
        with open(path, "w") as f:
            json.dump({json.dumps(FORGED_200)}, f)
        os.chmod(path, 0o444)
    print("answer", -1)
    """
    run, report, verdict = await _attack(make_sandbox, environment_dir, tmp_path, program)
    if backend_kind == "docker":  # the verifier runs as root there: the plugin overwrites the forged file
        assert (report.passed, report.total) == (0, N_TESTS) and not verdict.tampered
        assert verdict.status == "finished" and verdict.reward.value == 0.0
        return
    assert report.total == 200  # the forged file is what pytest's plugin could not overwrite
    assert verdict.status == "finished" and verdict.reward.value == 0.0 and verdict.tampered
    count = next(e for e in verdict.evidence if e.check == "assertion_count")
    assert (count.claimed, count.known) == (200, N_TESTS)


async def test_a_background_rewriter_after_pytest_is_refused(make_sandbox, environment_dir, tmp_path):
    # the rewriter waits for pytest to exit, then puts its own report in place while test.sh finishes
    program = f"""
    import json, os, subprocess, sys
    if sys.argv[1] == "0":
        code = '''
    import json, os, time
    ppid = os.getppid()
    while os.path.exists(f"/proc/{{ppid}}"):
        time.sleep(0.01)
    with open("/logs/verifier/ctrf.json", "w") as f:
        json.dump({json.dumps(FORGED_EXACT)}, f)
    '''
        subprocess.Popen(["python3", "-c", code.replace("ppid = os.getppid()", f"ppid = {{os.getppid()}}")],
                         start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print("answer", -1)
    """
    run, report, verdict = await _attack(make_sandbox, environment_dir, tmp_path, program, post="sleep 2")
    # exactly the real names, no more than the task has: only pytest's own closing line gives it away
    assert report.passed == N_TESTS and report.fallback is None
    assert verdict.reward.value == 0.0 and verdict.tampered
    summary = next(e for e in verdict.evidence if e.check == "pytest_summary")
    assert (summary.claimed, summary.known) == (N_TESTS, 0)


async def test_deleting_the_failing_entries_does_not_pay_under_the_binary_reward(
    make_sandbox, environment_dir, tmp_path
):
    # two cases right, two wrong; after pytest exits a rewriter drops the failing entries and writes
    # reward.json = 1, so the report left says "2 of 2 passed, solved"; the pool's validation record says 4
    from t1_spec import BinaryRewardSpec
    from t1_tasks.validation import CheckRecord, TaskRecord

    program = """
    import json, os, subprocess, sys
    n = int(sys.argv[1])
    if n == 0:
        code = '''
    import json, os, time
    ppid = PPID
    while os.path.exists(f"/proc/{ppid}"):
        time.sleep(0.01)
    path = "/logs/verifier/ctrf.json"
    data = json.load(open(path))
    data["results"]["tests"] = [t for t in data["results"]["tests"] if t["status"] == "passed"]
    data["results"]["summary"]["tests"] = len(data["results"]["tests"])
    json.dump(data, open(path, "w"))
    open("/logs/verifier/reward.json", "w").write('{"reward": 1.0}')
    '''
        subprocess.Popen(["python3", "-c", code.replace("PPID", str(os.getppid()))],
                         start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print("answer", n * n if n < 2 else -1)
    """
    task = _task(tmp_path, post="sleep 2")
    (tmp_path / "prog.py").write_text(textwrap.dedent(program))
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=60)
        await sb.upload(tmp_path / "prog.py", "/app/prog.py")
        run = await run_verifier(sb, task, timeout_s=60, out_dir=tmp_path / "out")
    oracle = CheckRecord(passed=N_TESTS, total=N_TESTS, report_source="ctrf", verifier_s=1.0, duration_s=2.0)
    validated = TaskRecord(id=task.id, verdict="ok", oracle=oracle)
    report, verdict = await judge_run(run, task, BinaryRewardSpec(), validated=validated)
    assert report.total == N_TESTS and report.passed == 2  # the two deleted assertions are back, as failed
    assert verdict.reward.value == 0.0 and verdict.tampered  # reward.json's "solved" contradicts them


async def test_an_unwritable_report_plus_a_forged_reward_file_scores_zero(
    make_sandbox, environment_dir, tmp_path, backend_kind
):
    # the program makes ctrf.json a directory (the plugin cannot write it) and leaves a read-only
    # reward.json saying "solved" (test.sh's own write fails): the binary fallback is not paid, as pytest
    # started a session and never closed it (the plugin's write failed), so the reward file is not its
    program = """
    import os, sys
    if sys.argv[1] == "0":
        os.makedirs("/logs/verifier/ctrf.json", exist_ok=True)
        with open("/logs/verifier/reward.json", "w") as f:
            f.write('{"reward": 1.0}\\n')
        os.chmod("/logs/verifier/reward.json", 0o444)
    print("answer", -1)
    """
    run, report, verdict = await _attack(make_sandbox, environment_dir, tmp_path, program)
    if backend_kind == "docker":  # the verifier runs as root there: test.sh's own reward.json replaces it
        assert report.fallback is not None and report.binary == 0.0
        assert (verdict.status, verdict.reward.value) == ("finished", 0.0)
        return
    assert report.fallback is not None and report.binary == 1.0  # the forged file is what was read
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0)
    assert verdict.tampered and [e.check for e in verdict.evidence] == ["pytest_summary"]


async def test_filling_the_disk_after_pytest_scores_zero_not_dropped(make_sandbox, environment_dir, tmp_path):
    # the program stops test.sh's bash, waits for pytest to end, fills the sandbox's disk (where T1 stages
    # the output), then lets bash go on: T1's staging fails in a sandbox that still answers
    program = """
    import os, subprocess, sys
    if sys.argv[1] == "0":
        pytest_pid = os.getppid()
        with open(f"/proc/{pytest_pid}/stat") as f:
            bash_pid = int(f.read().rsplit(")", 1)[1].split()[1])
        code = f'''
    import os, signal, time
    os.kill({bash_pid}, signal.SIGSTOP)
    def alive():
        try:
            return open("/proc/{pytest_pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
    while alive():
        time.sleep(0.01)
    for name, chunk in (("/tmp/fill", 65536), ("/tmp/fill2", 1)):
        try:
            with open(name, "wb") as f:
                while True:
                    f.write(b"x" * chunk)
        except OSError:
            pass
    os.kill({bash_pid}, signal.SIGCONT)
    '''
        subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print("answer", -1)
    """
    task = _task(tmp_path)
    (tmp_path / "prog.py").write_text(textwrap.dedent(program))
    async with make_sandbox(disk_mb=64) as sb:
        await sb.start(environment_dir, timeout_s=60)
        await sb.upload(tmp_path / "prog.py", "/app/prog.py")
        run = await run_verifier(sb, task, timeout_s=60, out_dir=tmp_path / "out")
    report, verdict = await judge_run(run, task, DenseRewardSpec())
    assert run.error is None and run.sabotage is not None  # the sandbox answered: not infrastructure
    assert (verdict.status, verdict.reward.value, verdict.reward.kind) == ("finished", 0.0, "no_verdict")


async def test_the_agent_cannot_modify_the_tests(make_sandbox, environment_dir, tmp_path):
    program = """
    import os, pathlib, sys
    for attempt in (
        lambda: pathlib.Path("/tests/test_outputs.py").write_text("def test_ok():\\n    pass\\n"),
        lambda: os.chmod("/tests/test_outputs.py", 0o666),
        lambda: os.remove("/tests/test.sh"),
        lambda: pathlib.Path("/tests/conftest.py").write_text("x = 1\\n"),
        lambda: os.rename("/tests/test.sh", "/tests/t.sh"),
    ):
        try:
            attempt()
            print("WROTE", file=sys.stderr)
        except OSError:
            pass
    print("answer", -1)
    """
    run, report, verdict = await _attack(make_sandbox, environment_dir, tmp_path, program)
    assert "WROTE" not in run.stdout_tail
    assert not any(e.check == "tests_changed" for e in run.evidence)
    assert (report.passed, report.total) == (0, N_TESTS) and verdict.reward.value == 0.0


async def test_tests_are_read_only_and_unchanged_for_the_agents_uid(make_sandbox, environment_dir, tmp_path):
    task = _task(tmp_path)
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=60)
        await sb.upload(task.tests_dir, "/tests", read_only=True)
        for attack in (
            "echo x >> /tests/test.sh",
            "rm -f /tests/test.sh",
            "touch /tests/new.py",
            "chmod u+w /tests/test.sh",
            "mv /tests/test.sh /tests/moved",
            "rm -rf /tests",
        ):
            result = await sb.exec(attack, timeout_s=30)
            assert result.exit_code != 0, f"{attack!r} succeeded in the read-only tests"
        listing = await sb.exec("cd /tests && sha256sum test.sh test_outputs.py && ls -A", timeout_s=30)
    for name in ("test.sh", "test_outputs.py"):
        assert hashlib.sha256((task.tests_dir / name).read_bytes()).hexdigest() in listing.stdout
    assert sorted(listing.stdout.split()[-2:]) == ["test.sh", "test_outputs.py"]


async def test_killing_pytest_scores_zero_not_dropped(make_sandbox, environment_dir, tmp_path):
    program = """
    import os, signal
    os.kill(os.getppid(), signal.SIGKILL)  # pytest, which ran this program
    """
    run, report, verdict = await _attack(make_sandbox, environment_dir, tmp_path, program)
    assert run.error is None and report.fallback is not None  # no usable per-assertion report
    assert verdict.status == "finished" and verdict.reward.value == 0.0


async def test_sleeping_past_the_deadline_scores_zero_not_dropped(make_sandbox, environment_dir, tmp_path):
    program = """
    import time
    time.sleep(600)
    """
    run, report, verdict = await _attack(make_sandbox, environment_dir, tmp_path, program, deadline=5)
    assert run.timed_out and run.error is None
    assert verdict.status == "finished" and verdict.reward.value == 0.0
    assert verdict.reward.kind == "no_verdict" and "verifier_timeout" in verdict.cause


async def test_a_forged_reward_json_plus_a_kill_scores_zero(make_sandbox, environment_dir, tmp_path):
    # reward.json says solved, then test.sh's own shell (pytest's parent) is killed so its trap never runs
    program = """
    import os, signal
    with open("/logs/verifier/reward.json", "w") as f:
        f.write('{"reward": 1.0}')
    pytest_pid = os.getppid()
    with open(f"/proc/{pytest_pid}/stat") as f:
        shell_pid = int(f.read().rsplit(")", 1)[1].split()[1])
    os.kill(shell_pid, signal.SIGKILL)
    os.kill(pytest_pid, signal.SIGKILL)
    """
    run, report, verdict = await _attack(make_sandbox, environment_dir, tmp_path, program)
    assert run.error is None and run.signal == 9
    assert report.binary == 1.0  # the forged file was read, and is ignored
    assert verdict.status == "finished" and verdict.reward.value == 0.0


class _SurvivingWriter:
    """The seam of ``inner``, where a process survives ``test.sh`` (as in one long-lived container) and
    rewrites the report in the moment before the verifier's final kill."""

    def __init__(self, inner, stops=0):
        self.inner = inner
        self.stops = stops

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @contextlib.asynccontextmanager
    async def sealed_verifier(self, tests, remote, *, timeout_s):
        # the agent phase ends in the inner seam (its first stop); the survivor lives in the verifier's box
        async with self.inner.sealed_verifier(tests, remote, timeout_s=timeout_s) as box:
            yield _SurvivingWriter(box, stops=1)

    async def stop_agent(self):
        self.stops += 1
        if self.stops == 2:  # the kill after test.sh: the survivor writes first
            forged = json.dumps(FORGED_EXACT).replace("'", "'\\''")
            await self.inner.exec(f"echo '{forged}' > /logs/.t1-verifier-done/ctrf.json", timeout_s=30)
        await self.inner.stop_agent()


async def test_a_report_changed_after_test_sh_exited_is_refused(make_sandbox, environment_dir, tmp_path):
    task = _task(tmp_path)
    (tmp_path / "prog.py").write_text(HONEST_BUT_WRONG)
    async with make_sandbox() as inner:
        await inner.start(environment_dir, timeout_s=60)
        await inner.upload(tmp_path / "prog.py", "/app/prog.py")
        run = await run_verifier(_SurvivingWriter(inner), task, timeout_s=60, out_dir=tmp_path / "out")
    report, verdict = await judge_run(run, task, DenseRewardSpec())
    changed = next(e for e in run.evidence if e.check == "report_changed")
    assert changed.names == ("ctrf.json (modified)",)
    assert verdict.tampered and verdict.reward.value == 0.0 and verdict.status == "finished"


# ---- a verifier that ran no test: the environment is blamed only from T1's own facts ------------------

#: A Terminal-Bench 2 test.sh: uv bootstrapped from astral.sh, then uvx's pytest with pytest-json-ctrf.
TB2_TEST_SH = """#!/bin/bash
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/ctrf.json \\
  /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
#: The same bootstrap, but the verifier runs offline too: pytest from the verifier's toolchain.
OFFLINE_TEST_SH = """#!/bin/bash
curl -LsSf --max-time 10 https://astral.sh/uv/0.9.5/install.sh | sh || echo "no uv: the toolchain's pytest"
python3 -m pytest -p no:cacheprovider --rootdir=/tests --ctrf /logs/verifier/ctrf.json -rA \
  /tests/test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
#: The agent's program: prints the DNS error a broken bootstrap would print and makes the report unwritable.
FAKE_DNS_FAILURE = """
import os, sys
if sys.argv[1] == "0":
    print("curl: (6) Could not resolve host: astral.sh")  # pytest -rA echoes it into test.sh's output
    os.makedirs("/logs/verifier/ctrf.json", exist_ok=True)
print("answer", int(sys.argv[1]) + 1)
"""


async def _run_with(make_sandbox, environment_dir, tmp_path, test_sh: str, program: str, validated=None):
    task = _task(tmp_path)
    (task.tests_dir / "test.sh").write_text(test_sh)
    (tmp_path / "prog.py").write_text(textwrap.dedent(program))
    async with make_sandbox() as sb:  # the backends' default: no network
        await sb.start(environment_dir, timeout_s=60)
        await sb.upload(tmp_path / "prog.py", "/app/prog.py")
        run = await run_verifier(sb, task, timeout_s=180, out_dir=tmp_path / "out")
    report, verdict = await judge_run(run, task, DenseRewardSpec(), validated=validated)
    return run, report, verdict


async def test_a_bootstrap_that_cannot_reach_astral_sh_is_verified_offline_or_infrastructure_never_a_zero(
    make_sandbox, environment_dir, tmp_path
):
    # test.sh writes reward.txt = 0 after the bootstrap fails; T1 once read it as the binary fallback and
    # trained on the zero. Now T1's home holds uv and uvx and its wheelhouse the pins: where a CPython 3.13
    # is on the verifier's PATH (the Docker toolchain's, on a host that has one) the tests run offline and
    # the wrong answer scores 0 by its assertions; where none is, the verifier ran no test: dropped.
    run, report, verdict = await _run_with(
        make_sandbox, environment_dir, tmp_path, TB2_TEST_SH, HONEST_BUT_WRONG
    )
    assert run.network is False and run.error is None
    assert run.toolchain is not None and "uv and uvx" in run.toolchain
    if report.fallback is None:
        assert (report.source, report.passed, report.total) == ("ctrf", 0, N_TESTS)
        assert (verdict.status, verdict.reward.value) == ("finished", 0.0) and verdict.cause is None
    else:
        assert report.binary == 0.0
        assert verdict.status == "failed" and verdict.reward.value is None
        assert "verifier could not reach astral.sh" in verdict.cause or "did not run" in verdict.cause


async def test_a_fake_dns_failure_does_not_turn_the_agents_zero_into_a_dropped_trial(
    make_sandbox, environment_dir, tmp_path
):
    # The verifier works offline here: the task's oracle got its CTRF report on this machine with no network
    # (the validation record). The agent prints a DNS error and breaks the report: still the agent's 0.
    from t1_tasks.validation import CheckRecord, TaskRecord

    oracle = CheckRecord(
        passed=N_TESTS, total=N_TESTS, report_source="ctrf", duration_s=2.0, network=False, verifier_s=1.0
    )
    validated = TaskRecord(id="attack", verdict="ok", oracle=oracle, per_assertion_report=True, assertions=4)
    run, report, verdict = await _run_with(
        make_sandbox, environment_dir, tmp_path, OFFLINE_TEST_SH, FAKE_DNS_FAILURE, validated
    )
    captured = (run.out_dir / "test-stdout.txt").read_text()
    assert "Could not resolve host: astral.sh" in captured  # what the agent wanted T1 to read
    assert report.fallback is not None
    assert (verdict.status, verdict.reward.value, verdict.reward.kind) == ("finished", 0.0, "no_verdict")
    assert "astral.sh" not in verdict.cause.split("(")[0]  # the cause is the missing report, not the network


async def test_the_offline_verifier_scores_an_honest_run_by_its_assertions(
    make_sandbox, environment_dir, tmp_path
):
    # The baseline of the attack above: the same test.sh without sabotage gives its report (0 of 4 passed).
    run, report, verdict = await _run_with(
        make_sandbox, environment_dir, tmp_path, OFFLINE_TEST_SH, HONEST_BUT_WRONG
    )
    assert report.fallback is None and (report.passed, report.total) == (0, N_TESTS)
    assert (verdict.status, verdict.reward.kind) == ("finished", "dense")
