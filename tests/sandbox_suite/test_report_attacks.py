"""Attacks on the check of a report against pytest's closing line, on every backend.

The task is the one of ``test_verifier_attacks.py`` (four pytest assertions running the agent's
``/app/prog.py``, a CTRF report; honest maximum under the dense reward 4/20 = 0.2). The program answers
wrong, so pytest's closing line says ``4 failed``; after pytest exits, a process it left rewrites
``ctrf.json`` with the four real test names all passing. Without a flood that rewrite is refused by the
closing line. Here the program also prints 9 MiB into ``test.sh``'s output, more than the 8 MiB the
sandbox keeps of a stream, to cut the closing line away: before it or after it.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from pathlib import Path

from t1_rollout.attribution import judge_run
from t1_rollout.verify import run_verifier
from t1_spec import DenseRewardSpec

from .test_verifier_attacks import FORGED_EXACT, N_TESTS, TEST_SH, TESTS_PY

FLOOD_BYTES = 9 * 1024 * 1024

#: ``test_sh()``: the pid of the bash that runs test.sh (an ancestor); ``flood(pid)``: open its standard
#: output and write FLOOD_BYTES into it.
FLOOD = """
def test_sh():
    pid = os.getppid()
    while pid > 1 and b"test.sh" not in open(f"/proc/{pid}/cmdline", "rb").read():
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    return pid
def flood(pid):
    fd = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY | os.O_APPEND)
    line = b"x" * 1023 + b"\\n"
    for _ in range(FLOOD_BYTES // 1024):
        os.write(fd, line)
    os.close(fd)
""".replace("FLOOD_BYTES", str(FLOOD_BYTES))


@dataclass
class AttackTask:
    id: str
    tests_dir: Path
    n_assertions: int | None = N_TESTS


async def _attack(make_sandbox, environment_dir, tmp_path, program: str):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text(TEST_SH.replace("{post}", "sleep 3"))
    (tests / "test_outputs.py").write_text(TESTS_PY)
    task = AttackTask("attack", tests)
    (tmp_path / "prog.py").write_text(textwrap.dedent(program))
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=60)
        await sb.upload(tmp_path / "prog.py", "/app/prog.py")  # what the agent wrote
        run = await run_verifier(sb, task, timeout_s=120, out_dir=tmp_path / "out")
    report, verdict = await judge_run(run, task, DenseRewardSpec())
    return run, report, verdict


def _program(*, flood_before: bool, flood_after: bool, answer: str = "-1") -> str:
    """Case 0 starts the rewriter (and floods before pytest's closing line when asked); every case answers."""
    rewriter = f"""
import json, os, time
{FLOOD}
ppid = PYTEST
while os.path.exists(f"/proc/{{ppid}}"):
    time.sleep(0.01)
with open("/logs/verifier/ctrf.json", "w") as f:
    json.dump({json.dumps(FORGED_EXACT)}, f)
if {flood_after}:
    flood(TEST_SH)
"""
    return f"""
import os, subprocess, sys
{FLOOD}
n = int(sys.argv[1])
if n == 0:
    code = {rewriter!r}.replace("PYTEST", str(os.getppid())).replace("TEST_SH", str(test_sh()))
    subprocess.Popen(["python3", "-c", code], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if {flood_before}:
        flood(test_sh())
print("answer", {answer})
"""


async def test_the_rewrite_without_a_flood_is_caught_by_the_closing_line(
    make_sandbox, environment_dir, tmp_path
):
    program = _program(flood_before=False, flood_after=False)
    run, report, verdict = await _attack(make_sandbox, environment_dir, tmp_path, program)
    assert report.passed == N_TESTS and report.fallback is None  # the forged report is what was read
    assert verdict.reward.value == 0.0 and verdict.tampered
    assert "pytest_summary" in {e.check for e in verdict.evidence}


async def test_a_flood_before_the_closing_line_does_not_cut_it_away(make_sandbox, environment_dir, tmp_path):
    # the sandbox keeps the head of a stream only: the 9 MiB used to push pytest's closing line out of it,
    # which turned the check off and paid the forged report 4/20; the verifier now keeps head and tail
    program = _program(flood_before=True, flood_after=False)
    run, report, verdict = await _attack(make_sandbox, environment_dir, tmp_path, program)
    captured = (run.out_dir / "test-stdout.txt").read_text(errors="replace")
    assert "bytes omitted" in captured and "4 failed" in captured[-4000:]
    assert report.passed == N_TESTS
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0) and verdict.tampered
    assert "pytest_summary" in {e.check for e in verdict.evidence}


async def test_a_flood_after_the_closing_line_makes_the_report_unverifiable(
    make_sandbox, environment_dir, tmp_path
):
    # more output after pytest closed than the tail keeps: the closing line is gone, so the report is not
    # trusted alone; it scores 0 (the run printed it), never the forged 4/20 and never a dropped trial
    program = _program(flood_before=False, flood_after=True)
    run, report, verdict = await _attack(make_sandbox, environment_dir, tmp_path, program)
    assert report.passed == N_TESTS
    assert (verdict.status, verdict.reward.value, verdict.reward.kind) == ("finished", 0.0, "unverifiable")
    assert [e.check for e in verdict.evidence] == ["pytest_summary_cut"]


async def test_an_honest_program_that_prints_a_lot_is_scored_by_its_assertions(
    make_sandbox, environment_dir, tmp_path
):
    # right answers and 9 MiB printed during the tests, no rewrite: pytest's closing line survives the cut
    program = f"""
import os, sys
{FLOOD}
n = int(sys.argv[1])
if n == 0:
    flood(test_sh())
print("answer", n * n)
"""
    run, report, verdict = await _attack(make_sandbox, environment_dir, tmp_path, program)
    assert run.error is None and not run.evidence and report.fallback is None
    assert (report.passed, report.total) == (N_TESTS, N_TESTS)
    assert (verdict.status, verdict.reward.value, verdict.tampered) == ("finished", N_TESTS / 20, False)
