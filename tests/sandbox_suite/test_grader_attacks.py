"""Attacks on the grader and on T1's own privileged steps, on every backend (docs/threat-model.md).

The task is the shape of the bundled ``fix-stats-crash``: four pytest assertions, each running the agent's
program ``/app/prog.py``, whose tests also import ``statistics``; ``test.sh`` runs ``python3 -m pytest`` (or
plain ``pytest``) in the environment's WORKDIR, ``/app``, as Harbor runs it. The agent's program is wrong
(``n + 1`` for ``n * n``), so an honest run scores 0 of 4. Each attack leaves files that would make the
grader pass every case (by faking ``subprocess.run`` inside pytest's process) or run the agent's code as
root; each must score what the unsolved task scores: 0, finished.
"""

from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from t1_rollout.attribution import judge_run
from t1_rollout.verify import run_verifier
from t1_spec import DenseRewardSpec

N_TESTS = 4
_PYTEST_CMD = (
    "-p no:cacheprovider --rootdir=/tests --ctrf /logs/verifier/ctrf.json -rA /tests/test_outputs.py"
)
TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
export PYTHONDONTWRITEBYTECODE=1
{pytest} {args}
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
TESTS_PY = "import statistics\nimport subprocess\n\n" + "".join(
    f"def test_case_{i}():\n"
    f"    out = subprocess.run(\n"
    f"        ['python3', '/app/prog.py', '{i}'], capture_output=True, text=True, timeout=30\n"
    f"    )\n"
    f"    assert out.stdout.strip() == 'answer ' + str(int(statistics.fmean([{i * i}])))\n\n"
    for i in range(N_TESTS)
)
WRONG_PROGRAM = "import sys\nprint('answer', int(sys.argv[1]) + 1)\n"
#: Inside pytest's process: every run of the program under test answers right (what each attack installs).
FAKE_RUN = """
import subprocess as _subprocess
_real_run = _subprocess.run
def _fake_run(args, *a, **k):
    if list(args[:2]) == ["python3", "/app/prog.py"]:
        n = int(args[2])
        return _subprocess.CompletedProcess(args, 0, "answer %d\\n" % (n * n), "")
    return _real_run(args, *a, **k)
_subprocess.run = _fake_run
"""
#: ``/app/pytest.py``: ``python3 -m pytest`` runs it; it fakes the program's runs, then runs the real pytest.
PYTEST_PY = (
    FAKE_RUN
    + """
import sys
sys.path[:] = [p for p in sys.path if p not in ("", "/app")]
sys.modules.pop("pytest", None)
import pytest
sys.exit(pytest.console_main())
"""
)
#: ``/app/ctrf/__init__.py``: named like the report plugin; points itself at the real one, fakes the runs.
CTRF_INIT = (
    FAKE_RUN
    + """
import os, sys
for _entry in sys.path:
    if _entry not in ("", "/app") and os.path.isfile(os.path.join(_entry, "ctrf", "main.py")):
        __path__[:] = [os.path.join(_entry, "ctrf")]
        break
"""
)
#: ``/app/statistics.py``: a standard-library name the tests import; fakes the runs, then is the real module.
STATISTICS_PY = (
    FAKE_RUN
    + """
import sys
sys.path[:] = [p for p in sys.path if p not in ("", "/app")]
del sys.modules["statistics"]
import statistics
"""
)


@dataclass
class GraderTask:
    id: str
    tests_dir: Path
    n_assertions: int | None = N_TESTS


def _task(tmp_path: Path, pytest_command: str) -> GraderTask:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text(TEST_SH.format(pytest=pytest_command, args=_PYTEST_CMD))
    (tests / "test_outputs.py").write_text(TESTS_PY)
    return GraderTask("grader-attack", tests)


async def _attack(
    make_sandbox,
    environment_dir,
    tmp_path,
    files: dict[str, str],
    *,
    agent: str = "true",
    pytest_command: str = "python3 -m pytest",
    after=None,
):
    """Build; the agent writes ``files`` (sandbox path -> text), runs ``agent``; verify; score as a trial."""
    task = _task(tmp_path, pytest_command)
    files = {"/app/prog.py": WRONG_PROGRAM} | files
    checked = None
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=120)
        for i, (remote, text) in enumerate(files.items()):
            local = tmp_path / f"file-{i}"
            local.write_text(textwrap.dedent(text))
            await sb.upload(local, remote)
        done = await sb.exec(agent, timeout_s=60)
        assert done.exit_code == 0, done.stderr
        run = await run_verifier(sb, task, timeout_s=120, out_dir=tmp_path / "out")
        if after is not None:
            checked = await sb.exec(after, timeout_s=60, cwd="/")
    report, verdict = await judge_run(run, task, DenseRewardSpec())
    return run, report, verdict, checked


def _unsolved(run, report, verdict) -> None:
    """What the wrong program scores honestly: every case ran and failed, a real 0."""
    assert run.error is None, run.error
    assert (report.passed, report.total) == (0, N_TESTS), run.stdout_tail
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0)


async def test_the_wrong_program_scores_zero_under_both_pytest_commands(
    make_sandbox, environment_dir, tmp_path
):
    # the baseline: no attack, the same task
    for i, command in enumerate(("python3 -m pytest", "pytest")):
        sub = tmp_path / str(i)
        sub.mkdir()
        run, report, verdict, _ = await _attack(
            make_sandbox, environment_dir, sub, {}, pytest_command=command
        )
        _unsolved(run, report, verdict)


async def test_a_pytest_py_in_the_workdir_does_not_replace_pytest(make_sandbox, environment_dir, tmp_path):
    run, report, verdict, _ = await _attack(
        make_sandbox, environment_dir, tmp_path, {"/app/pytest.py": PYTEST_PY}
    )
    _unsolved(run, report, verdict)


async def test_a_pytest_py_in_the_workdir_does_not_replace_a_plain_pytest(
    make_sandbox, environment_dir, tmp_path
):
    files = {"/app/pytest.py": PYTEST_PY}
    run, report, verdict, _ = await _attack(
        make_sandbox, environment_dir, tmp_path, files, pytest_command="pytest"
    )
    _unsolved(run, report, verdict)


async def test_a_package_named_like_the_report_plugin_is_not_loaded(make_sandbox, environment_dir, tmp_path):
    files = {"/app/ctrf/__init__.py": CTRF_INIT}
    run, report, verdict, _ = await _attack(make_sandbox, environment_dir, tmp_path, files)
    _unsolved(run, report, verdict)


async def test_a_standard_library_name_in_the_workdir_is_not_imported(
    make_sandbox, environment_dir, tmp_path
):
    files = {"/app/statistics.py": STATISTICS_PY}
    run, report, verdict, _ = await _attack(make_sandbox, environment_dir, tmp_path, files)
    _unsolved(run, report, verdict)


async def test_a_standard_library_name_wins_even_when_the_tests_put_the_workdir_first(
    make_sandbox, environment_dir, tmp_path
):
    # tests that import the program under test by putting /app first on sys.path (a common task pattern)
    task_tests = "import sys\nsys.path.insert(0, '/app')\n" + TESTS_PY
    files = {"/app/statistics.py": STATISTICS_PY}
    task = _task(tmp_path, "python3 -m pytest")
    (task.tests_dir / "test_outputs.py").write_text(task_tests)
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=120)
        for remote, text in ({"/app/prog.py": WRONG_PROGRAM} | files).items():
            local = tmp_path / Path(remote).name
            local.write_text(textwrap.dedent(text))
            await sb.upload(local, remote)
        run = await run_verifier(sb, task, timeout_s=120, out_dir=tmp_path / "out")
    report, verdict = await judge_run(run, task, DenseRewardSpec())
    _unsolved(run, report, verdict)


async def test_an_entry_point_plugin_in_the_workdir_is_not_autoloaded(
    make_sandbox, environment_dir, tmp_path
):
    files = {
        "/app/t1evil-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: t1evil\nVersion: 1.0\n",
        "/app/t1evil-1.0.dist-info/entry_points.txt": "[pytest11]\nt1evil = t1evil\n",
        "/app/t1evil.py": FAKE_RUN,
    }
    run, report, verdict, _ = await _attack(make_sandbox, environment_dir, tmp_path, files)
    _unsolved(run, report, verdict)


async def test_tests_that_import_the_program_from_the_workdir_still_pass(
    make_sandbox, environment_dir, tmp_path
):
    # python3 -m pytest lets the tests import a module of the working directory by name: still so
    lib = "def square(n):\n    return n * n\n"
    tests = "from prog_lib import square\n\n" + "".join(
        f"def test_case_{i}():\n    assert square({i}) == {i * i}\n\n" for i in range(N_TESTS)
    )
    task = _task(tmp_path, "python3 -m pytest")
    (task.tests_dir / "test_outputs.py").write_text(tests)
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=120)
        (tmp_path / "prog_lib.py").write_text(lib)
        await sb.upload(tmp_path / "prog_lib.py", "/app/prog_lib.py")
        run = await run_verifier(sb, task, timeout_s=120, out_dir=tmp_path / "out")
    report, verdict = await judge_run(run, task, DenseRewardSpec())
    assert (report.passed, report.total) == (N_TESTS, N_TESTS), run.stdout_tail
    assert verdict.reward.value == N_TESTS / 20 and not verdict.tampered


# ---- T1's own privileged steps: nothing the agent wrote runs as root --------------------------------------

_PY = f"python{sys.version_info.major}.{sys.version_info.minor}"  # the toolchain's Python is this one's
#: A ``.pth`` in the agent's user site: code that runs in any Python started with HOME=/home/agent and user
#: site on; as root it leaves a marker in ``/`` (which only root can write) and makes the tests pass.
ROOT_PTH = (
    "import os; os.getuid() == 0 and [open('/t1-root-marker', 'w').write('root'), "
    "os.path.isdir('/tests') and open('/tests/test_outputs.py', 'w').write('def test_ok():\\n    pass\\n')]\n"
)


async def test_a_pth_in_the_agents_user_site_never_runs_as_root(make_sandbox, environment_dir, tmp_path):
    files = {f"/home/agent/.local/lib/{_PY}/site-packages/t1evil.pth": ROOT_PTH}
    run, report, verdict, checked = await _attack(
        make_sandbox, environment_dir, tmp_path, files, after="ls /t1-root-marker 2>&1; true"
    )
    assert "No such file" in checked.stdout, checked.stdout
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0)
    assert not any(e.check == "tests_changed" for e in run.evidence)


#: The agent's program, run by the tests: when it may write /usr/bin, it puts a ``tar`` there that T1's
#: root would run when it copies files out, leaving a marker in ``/``.
TAR_SWAP = """
import os, sys
if os.access("/usr/bin", os.W_OK) and not os.path.exists("/usr/bin/tar.real"):
    os.rename("/usr/bin/tar", "/usr/bin/tar.real")
    with open("/usr/bin/tar", "w") as f:
        f.write('#!/bin/sh\\n[ "$(id -u)" = 0 ] && echo root > /t1-root-marker\\n'
                'exec /usr/bin/tar.real "$@"\\n')
    os.chmod("/usr/bin/tar", 0o755)
print("answer", int(sys.argv[1]) + 1)
"""


async def test_a_link_from_the_agents_logs_to_a_system_folder_is_not_followed_as_root(
    make_sandbox, environment_dir, tmp_path
):
    agent = "rm -rf /logs/agent && ln -s /usr/bin /logs/agent"
    run, report, verdict, checked = await _attack(
        make_sandbox,
        environment_dir,
        tmp_path,
        {"/app/prog.py": TAR_SWAP},
        agent=agent,
        after="stat -c '%u' /usr/bin; id -u; ls /t1-root-marker 2>&1; true",
    )
    owner, agent_uid, marker = checked.stdout.split("\n", 2)
    assert owner != agent_uid and "No such file" in marker, checked.stdout  # /usr/bin is not the agent's
    _unsolved(run, report, verdict)


# ---- the trainer's environment stays out of every sandbox ------------------------------------------------

SECRET = "t1-trainer-token-5f0c2e"


async def test_no_variable_of_the_trainer_is_readable_in_the_sandbox(
    make_sandbox, environment_dir, tmp_path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("T1_TEST_TRAINER_TOKEN", SECRET)
    read_all = "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; env; true"
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=120)
        seen = await sb.exec(read_all, timeout_s=60)
        shell = await sb.open_shell()
        typed = await shell.send(f"{read_all}; echo done-$((6*7))\n", duration_s=10, max_wait_s=20)
        await shell.close()
        verifier = await sb.exec_verifier(read_all, timeout_s=60)
    assert "PATH=" in seen.stdout  # the command's own environment was read
    for text in (seen.stdout, typed, verifier.stdout):
        assert SECRET not in text
