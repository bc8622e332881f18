"""A command the verifier's launch finds through the image's ``PATH`` in a folder the agent could write.

Task images often put a folder of the task root first on ``PATH`` (``ENV PATH=/app/.venv/bin:$PATH``, a uv
project's virtual environment); the task root is the agent's. The verifier's launch runs ``bash`` (and
``test.sh`` the commands it names) by ``PATH`` lookup: a ``bash`` the agent left in such a folder would run
in place of the verifier (as root on Docker) and could write a passing report. The unsolved task must still
score 0, finished.
"""

from __future__ import annotations

import pytest

from .test_sealed_verifier import FORGED_CTRF, _unsolved, _verify

_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: The agent's ``bash``: for ``test.sh`` it prints a passing pytest line and writes a forged report.
_FAKE_BASH = (
    "#!/bin/sh\n"
    'case "$*" in *test.sh*)\n'
    "  /bin/mkdir -p /logs/verifier; /bin/cp /app/forged.json /logs/verifier/ctrf.json\n"
    "  echo 1 > /logs/verifier/reward.txt\n"
    '  echo "============================== 4 passed in 0.10s =============================="\n'
    "  exit 0;;\n"
    "esac\n"
    'exec /bin/bash "$@"\n'
)


@pytest.mark.parametrize("folder", ["/app/.venv/bin", "/app"])
async def test_a_bash_the_agent_left_on_the_images_path_does_not_run_the_verifier(
    make_sandbox, tmp_path, folder
):
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text(
        f"FROM debian:bookworm-slim\nWORKDIR /app\nENV PATH={folder}:{_SYSTEM_PATH}\n"
    )
    files = {f"{folder}/bash": _FAKE_BASH, "/app/forged.json": FORGED_CTRF}
    for name in ("curl", "uv", "pytest", "python3"):
        files[f"{folder}/{name}"] = _FAKE_BASH
    agent = f"chmod 0755 {folder}/*"
    run, report, verdict, _ = await _verify(make_sandbox, env, tmp_path, files, agent=agent)
    _unsolved(run, report, verdict)


@pytest.mark.parametrize("name", ["mkdir", "tar", "chmod", "rm"])
async def test_a_system_tool_the_agent_left_on_the_images_path_does_not_drop_the_trial(
    make_sandbox, tmp_path, name, backend_kind
):
    # T1's own steps after the agent (the tests' upload, the report's reset) must not run the agent's tool: a
    # tool that fails them would turn the agent's honest 0 into a dropped trial
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text(
        f"FROM debian:bookworm-slim\nWORKDIR /app\nENV PATH=/app/bin:{_SYSTEM_PATH}\n"
    )
    files = {f"/app/bin/{name}": "#!/bin/sh\necho planted >&2\nexit 1\n"}
    run, report, verdict, _ = await _verify(make_sandbox, env, tmp_path, files, agent="chmod 0755 /app/bin/*")
    if backend_kind != "docker":
        # T1's later steps (the report's sealing, its copy-back) run the agent's tools in its own stopped
        # sandbox, as its uid: they may fail there, but as the agent's doing, scored 0, never dropped
        assert (verdict.status, verdict.reward.value) == ("finished", 0.0), verdict
        return
    _unsolved(run, report, verdict)


async def test_a_disk_the_agent_left_full_scores_zero_not_dropped(make_sandbox, tmp_path, backend_kind):
    # the agent's last act fills its disk cap: the verifier starts with no free byte (a drop would let the
    # agent trade its 0 for a discarded trial)
    if backend_kind == "daytona":
        pytest.skip("the Daytona spec has no disk_mb (the provider's disk)")
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    fill = "for i in $(seq 200); do head -c $((1 << 20)) /dev/zero > /app/f$i 2>/dev/null || break; done; :"
    sandbox = lambda: make_sandbox(disk_mb=64)  # noqa: E731 - the spec's disk cap, skipped where not enforced
    run, report, verdict, _ = await _verify(sandbox, env, tmp_path, agent=fill)
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0), (verdict, run.error)


#: The agent's ``timeout``: T1 hashes the report with ``timeout 30 sha256sum``; this one first rewrites it.
_FAKE_TIMEOUT = (
    "#!/bin/sh\n"
    'case "$*" in *sha256sum*ctrf.json*) /bin/cp /app/forged.json /logs/verifier/ctrf.json;; esac\n'
    'case "$*" in *sha256sum*reward.txt*) echo 1 > /logs/verifier/reward.txt;; esac\n'
    'shift; exec "$@"\n'
)


async def test_a_tool_the_agent_left_on_the_images_path_does_not_rewrite_the_report_after_test_sh(
    make_sandbox, tmp_path
):
    # T1's steps after test.sh (the report's hashing, its copy-back) run in the verifier's sandbox: a tool
    # they name, found in a folder of the agent's on the image PATH, would rewrite the report before hashing
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text(
        f"FROM debian:bookworm-slim\nWORKDIR /app\nENV PATH=/app/bin:{_SYSTEM_PATH}\n"
    )
    files = {"/app/bin/timeout": _FAKE_TIMEOUT, "/app/forged.json": FORGED_CTRF}
    run, report, verdict, _ = await _verify(make_sandbox, env, tmp_path, files, agent="chmod 0755 /app/bin/*")
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0), (verdict, run.error)
    assert report.passed == 0, report


#: The program under test fills every folder it can write (1 MiB files: under the per-file size limit), then
#: answers wrong: run by the tests during the verifier, it leaves pytest no byte for its report.
_FILLING_PROGRAM = """import os, sys
for folder in ("/app", "/tmp", "/logs/verifier", os.path.expanduser("~")):
    for i in range(100000):
        try:
            with open(os.path.join(folder, f"fill-{os.getpid()}-{i}"), "wb") as fh:
                fh.write(bytes(1 << 20))
        except OSError:
            break
print("answer", int(sys.argv[1]) + 1)
"""


async def test_a_program_that_fills_the_disk_during_the_tests_scores_zero_not_dropped(
    make_sandbox, tmp_path, backend_kind
):
    # the disk grows when the agent phase ends (a disk the agent left full), but the program under test
    # runs in the verifier: filling the disk then must not turn its 0 into a dropped trial either
    if backend_kind == "daytona":
        pytest.skip("the Daytona spec has no disk_mb (the provider's disk)")
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    sandbox = lambda: make_sandbox(disk_mb=64)  # noqa: E731 - the spec's disk cap, skipped where not enforced
    files = {"/app/prog.py": _FILLING_PROGRAM}
    run, report, verdict, _ = await _verify(sandbox, env, tmp_path, files)
    # pytest's report finds no byte left (ENOSPC): no case counted, the agent's 0, never a dropped trial
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0), (verdict, run.error)
