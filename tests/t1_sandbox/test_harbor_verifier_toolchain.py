"""The local verifier's toolchain as Harbor task scripts expect it: pytest, uv, uvx, python, bytecode kept.

Harbor's task template calls ``pytest`` directly and Terminal-Bench 2's ``test.sh`` runs ``uvx ... pytest``
(harbor_tb.md §1.3); its Python must not recompile the standard library on every start (a read-only mirror
without ``__pycache__`` made ``import asyncio`` several times slower inside than outside).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from t1_sandbox.local import LocalSandbox

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)
TOOLS = ("python", "python3", "pytest", "uv", "uvx")


async def _started(
    tmp_path: Path, dockerfile: str = "FROM debian:bookworm-slim\nWORKDIR /app\n"
) -> LocalSandbox:
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text(dockerfile)
    sandbox = LocalSandbox()
    await sandbox.start(env, timeout_s=60)
    return sandbox


async def test_pytest_uv_uvx_and_python_are_on_the_verifiers_path_only(tmp_path):
    async with await _started(tmp_path) as sb:
        found = await sb.exec_verifier(f"command -v {' '.join(TOOLS)}", timeout_s=60)
        assert found.stdout.split() == [f"/opt/t1-verifier/bin/{t}" for t in TOOLS], found
        versions = await sb.exec_verifier("pytest --version && uv --version && uvx --version", timeout_s=60)
        assert versions.ok, versions.stderr
        assert (
            "pytest " in versions.stdout + versions.stderr
            and "uv " in versions.stdout
            and "uvx " in versions.stdout
        )
        same = await sb.exec_verifier("python -c 'import sys; print(sys.executable)'", timeout_s=60)
        assert same.stdout.strip() == "/opt/t1-verifier/bin/python"
        agent = await sb.exec(
            "test -e /opt/t1-verifier/bin/uv || test -e /opt/t1-verifier/bin/pytest", timeout_s=30
        )
        assert agent.exit_code == 1  # the agent's execs never see the toolchain


async def test_a_harbor_template_test_sh_runs_pytest_directly(tmp_path):
    """Harbor's ``harbor tasks init`` pytest template: ``pytest /tests/test_outputs.py -rA`` with no uv."""
    async with await _started(tmp_path) as sb:
        tests = tmp_path / "tests"
        tests.mkdir()
        (tests / "test_outputs.py").write_text("def test_a():\n    assert 1 + 1 == 2\n")
        (tests / "test.sh").write_text("#!/bin/bash\npytest /tests/test_outputs.py -rA -p no:cacheprovider\n")
        await sb.upload(tests, "/tests", read_only=True)
        run = await sb.exec_verifier("bash /tests/test.sh", timeout_s=120)
        assert run.ok and "1 passed" in run.stdout, run.stdout + run.stderr


async def test_the_standard_library_is_loaded_from_bytecode_not_recompiled(tmp_path):
    async with await _started(tmp_path) as sb:
        run = await sb.exec_verifier(
            "python3 -v -c 'import asyncio' 2>&1 | grep '^# code object from'", timeout_s=60
        )
        loaded = run.stdout.splitlines()
        assert any("asyncio" in line for line in loaded), run.stdout[-2000:]
        from_source = [line for line in loaded if line.rstrip("'").endswith(".py")]
        assert from_source == [], from_source[:5]  # every module came from a .pyc
        written = await sb.exec_verifier(
            'python3 -c \'import asyncio, os; d = os.path.dirname(asyncio.__cached__); open(d + "/x", "w")\'',
            timeout_s=60,
        )
        assert (
            written.exit_code != 0 and "Read-only file system" in written.stderr
        )  # read-only after the build


async def test_the_verifier_runs_in_the_dockerfiles_last_workdir_by_default(tmp_path):
    """Harbor runs test.sh with no cwd: the container's WORKDIR (``[environment].workdir`` when set)."""
    dockerfile = "FROM debian:bookworm-slim\nWORKDIR /app\nWORKDIR /app/project\n"
    async with await _started(tmp_path, dockerfile) as sb:
        here = await sb.exec_verifier("pwd", timeout_s=30)
        assert here.stdout.strip() == "/app/project"
