"""The verifier's import guard (``sandbox/verifier_site/sitecustomize.py``) on this host's Python, no sandbox.

Each case runs a Python with the guard's folder first on ``PYTHONPATH`` (as every verifier launch does) in a
working directory that holds the agent's ``pytest.py``, ``statistics.py`` and a ``ctrf`` package, each of
which prints ``AGENT`` when imported; the grader must never import them, whatever the command line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from t1_sandbox.local.toolchain import FALLBACK_SITE_VARIABLE, GUARD_SOURCE

AGENT = "import sys; print('AGENT', __name__, file=sys.stderr); sys.exit(3)\n"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An agent's working directory: files named like pytest, a standard-library module and the plugin."""
    app = tmp_path / "app"
    (app / "ctrf").mkdir(parents=True)
    for name in ("pytest.py", "statistics.py", "py.py", "ctrf/__init__.py"):
        (app / name).write_text(AGENT)
    (app / "prog_lib.py").write_text("def square(n):\n    return n * n\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_x.py").write_text(
        "import statistics\nfrom prog_lib import square\n\n"
        "def test_square():\n    assert square(3) == statistics.fmean([9])\n"
    )
    return app


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run ``argv`` as the verifier does: ``<toolchain>/guard`` on ``PYTHONPATH``, the fallback site named."""
    toolchain = cwd.parent / "toolchain"
    if not toolchain.exists():
        (toolchain / "guard").mkdir(parents=True)
        shutil.copy(GUARD_SOURCE, toolchain / "guard" / "sitecustomize.py")
        site = next(p for p in sys.path if p.endswith("site-packages"))
        (toolchain / "site-packages").symlink_to(site)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
    env["PYTHONPATH"] = f"{toolchain}/guard"
    env[FALLBACK_SITE_VARIABLE] = f"{toolchain}/site-packages"
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "flags",
    [
        ["-m", "pytest"],
        ["-B", "-m", "pytest"],
        ["-X", "dev", "-m", "pytest"],
        ["-mpytest"],
        ["-Bm", "pytest"],
    ],
)
def test_python_m_pytest_runs_the_real_pytest_and_keeps_workdir_imports(workdir: Path, flags: list[str]):
    tests = workdir.parent / "tests"
    done = _run([sys.executable, *flags, "-p", "no:cacheprovider", "-q", str(tests)], workdir)
    assert "AGENT" not in done.stderr + done.stdout, done.stderr
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr


def test_without_the_guard_the_agents_pytest_py_runs(workdir: Path):
    # the attack the guard stops: Python's own rule puts the working directory first under -m
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q"], cwd=workdir, env=env, capture_output=True, text=True
    )
    assert "AGENT __main__" in done.stderr


def test_a_program_that_is_not_pytest_keeps_its_own_folder_on_the_path(workdir: Path, tmp_path: Path):
    prog = tmp_path / "prog"
    prog.mkdir()
    (prog / "helper.py").write_text("VALUE = 42\n")
    (prog / "main.py").write_text("import helper, sys\nprint(helper.VALUE, sys.flags.safe_path)\n")
    done = _run([sys.executable, str(prog / "main.py")], workdir)
    assert done.stdout.split() == ["42", "False"], done.stderr


def test_a_stdlib_name_resolves_to_the_standard_library_when_tests_put_the_workdir_first(workdir: Path):
    tests = workdir.parent / "tests"
    (tests / "test_x.py").write_text(
        f"import sys\nsys.path.insert(0, {str(workdir)!r})\nimport statistics\n\n"
        "def test_real():\n    assert statistics.__file__.startswith(sys.base_prefix)\n"
    )
    done = _run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(tests)], workdir)
    assert "AGENT" not in done.stderr and "1 passed" in done.stdout, done.stdout + done.stderr


def test_python_c_gets_the_real_pytest_and_still_imports_the_workdirs_own_modules(workdir: Path):
    tests = workdir.parent / "tests"
    code = f"import sys, pytest; sys.exit(pytest.main(['-p', 'no:cacheprovider', '-q', {str(tests)!r}]))"
    done = _run([sys.executable, "-c", code], workdir)
    assert "AGENT" not in done.stderr and "1 passed" in done.stdout, done.stdout + done.stderr
    own = _run([sys.executable, "-c", "import prog_lib; print(prog_lib.square(3))"], workdir)
    assert own.stdout.strip() == "9", own.stderr


def test_python_m_unittest_gets_the_real_unittest(workdir: Path):
    (workdir / "unittest.py").write_text(AGENT)
    tests = workdir.parent / "tests"
    (tests / "test_u.py").write_text(
        "import unittest\n\n"
        "class T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(1, 2)\n"
    )
    done = _run([sys.executable, "-m", "unittest", "discover", "-s", str(tests), "-p", "test_u.py"], workdir)
    assert "AGENT" not in done.stderr and "FAILED (failures=1)" in done.stderr, done.stderr
