"""A bare ``pip install`` then a bare ``pytest`` in ``test.sh`` verifies offline on the image's Python.

Harbor runs such a script (Terminal-Bench 2's headless-terminal: ``pip install pytest==8.4.1 requests==2.32.5
pytest-json-ctrf==0.3.5`` then ``pytest --ctrf ...``) with the image's own ``pip`` and ``pytest``. Offline,
T1 gives that ``pip`` wheels for its own Python (``t1_rollout.verifier_toolchain``: the ``pip`` first on the
verifier's PATH is asked its version), and the toolchain's ``pytest`` command hands over to the ``pytest``
that ``pip`` installed when only root can change it (``t1_sandbox.docker.toolchain``). Before: pip found
only the host's CPython 3.12 wheels (``charset_normalizer``: no version for 3.13) and the toolchain's
pytest ran under 3.12 without ``requests``: the verifier ran no test.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from t1_spec import load_recipe

REPO = Path(__file__).resolve().parents[2]
TINY_DOCKER = REPO / "recipes" / "tiny-docker.yaml"
pytestmark = pytest.mark.docker

_TEST_SH = """#!/bin/bash
pip install pytest==8.4.1 requests==2.32.5 pytest-json-ctrf==0.3.5
pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
_TESTS = """import sys

import pytest
import requests


def test_the_images_python_runs_the_tests():
    assert sys.version_info[:2] == (3, 13)


def test_the_pinned_packages_were_installed():
    assert requests.__version__ == "2.32.5" and pytest.__version__ == "8.4.1"
"""


def _bundle(tmp_path: Path) -> Path:
    root = tmp_path / "pool" / "bare-pip"
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text('version = "1.0"\n\n[verifier]\ntimeout_sec = 300.0\n')
    (root / "instruction.md").write_text("Nothing to do.\n")
    (root / "environment" / "Dockerfile").write_text("FROM python:3.13-slim-bookworm\nWORKDIR /app\n")
    (root / "environment" / "token").write_text(secrets.token_hex(8))  # a fresh image
    (root / "tests" / "test.sh").write_text(_TEST_SH)
    (root / "tests" / "test_outputs.py").write_text(_TESTS)
    return root.parent


async def test_a_bare_pip_then_pytest_verifies_offline_on_the_images_python(tmp_path):
    from t1_reward import read_report
    from t1_rollout.verify import run_verifier
    from t1_sandbox.docker import DockerSandbox
    from t1_sandbox.docker import client as dc
    from t1_tasks import load_pool

    recipe = load_recipe(TINY_DOCKER)
    if problems := DockerSandbox.preflight(recipe):
        pytest.skip("; ".join(problems))
    task = load_pool(_bundle(tmp_path), strict=False).get("bare-pip")
    sb = DockerSandbox.from_spec(recipe.sandbox)  # no network in the trial
    try:
        async with sb:
            await sb.start(task.environment_dir, timeout_s=600)
            run = await run_verifier(sb, task, timeout_s=300, out_dir=tmp_path / "out")
    finally:
        if sb.choice is not None:
            dc.api_client(None).remove_image(sb.choice.image, force=True)
    report = read_report(run.out_dir, timed_out=run.timed_out, crashed=run.crashed)
    assert run.network is False and run.error is None, run.error
    assert (report.source, report.passed, report.total) == ("ctrf", 2, 2), run.stdout_tail
    assert "python 3.13" not in (run.toolchain or "").split("not provided")[-1], run.toolchain


async def test_a_pytest_on_path_that_the_agent_could_rewrite_is_not_run(tmp_path):
    """The image's ``pytest`` is world-writable (the agent could have replaced it): the toolchain's runs."""
    from t1_reward import read_report
    from t1_rollout.verify import run_verifier
    from t1_sandbox.docker import DockerSandbox
    from t1_sandbox.docker import client as dc
    from t1_tasks import load_pool

    recipe = load_recipe(TINY_DOCKER)
    if problems := DockerSandbox.preflight(recipe):
        pytest.skip("; ".join(problems))
    root = _bundle(tmp_path)
    forged = (
        '{"results": {"tool": {"name": "pytest"}, "summary": {"tests": 1, "passed": 1, "failed": 0}, '
        '"tests": [{"name": "test_outputs.py::test_fails", "status": "passed", "duration": 1}]}}'
    )
    (root / "bare-pip" / "environment" / "Dockerfile").write_text(
        "FROM python:3.13-slim-bookworm\nWORKDIR /app\n"
        f"RUN printf '#!/bin/sh\\necho %s > /logs/verifier/ctrf.json\\n' '{forged}' > /usr/local/bin/pytest "
        "&& chmod 0777 /usr/local/bin/pytest\n"
    )
    (root / "bare-pip" / "tests" / "test.sh").write_text(
        "#!/bin/bash\npytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA\n"
    )
    (root / "bare-pip" / "tests" / "test_outputs.py").write_text("def test_fails():\n    assert False\n")
    task = load_pool(root, strict=False).get("bare-pip")
    sb = DockerSandbox.from_spec(recipe.sandbox)
    try:
        async with sb:
            await sb.start(task.environment_dir, timeout_s=600)
            run = await run_verifier(sb, task, timeout_s=300, out_dir=tmp_path / "out")
    finally:
        if sb.choice is not None:
            dc.api_client(None).remove_image(sb.choice.image, force=True)
    report = read_report(run.out_dir, timed_out=run.timed_out, crashed=run.crashed)
    assert (report.source, report.passed, report.total) == ("ctrf", 0, 1), run.stdout_tail
    assert "test session starts" in run.stdout_tail
