"""The test environment's own pytest takes precedence over the toolchain's lean fallback.

A Terminal-Bench 2 ``test.sh`` pins ``uvx -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5``; the
per-assertion report (the dense reward, T1 §5.2) is written by that report plugin, so it matches Harbor's only
when uvx's environment runs its own pins, not the toolchain's pytest and json-ctrf. A bare ``pytest`` with
none installed still runs the toolchain's.

Wheels come from the host's wheelhouse cache (``t1_sandbox.wheelhouse.HOST_CACHE``, filled by earlier
verifier runs); nothing is downloaded here: without a cached ``pytest-8.4.1`` wheel the tests are skipped.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from t1_rollout import verifier_toolchain as vt
from t1_sandbox import wheelhouse as wh

PINNED = ("pytest", "8.4.1")  # a pytest of the wheelhouse other than the toolchain's own
REPORT_PLUGIN = ("pytest_json_ctrf", "0.3.5")
_DEPENDENCIES = ("pluggy", "iniconfig", "packaging", "pygments")
TESTS_PY = (
    "import pytest\n\n\n"
    "@pytest.mark.parametrize('n', [1, 2, 3])\n"
    "def test_number(n):\n    assert n > 0\n\n\n"
    "def test_plain():\n    assert True\n"
)

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)


def _cached_wheelhouse(python: str) -> Path | None:
    """A host wheelhouse folder for CPython ``python`` holding the pins and their dependencies, or None."""
    tag = "cp" + python.replace(".", "")
    for folder in sorted(wh.HOST_CACHE.glob(f"{tag}-*")):
        names = [p.name for p in folder.glob("*.whl")]
        wanted = [f"{PINNED[0]}-{PINNED[1]}-", f"{REPORT_PLUGIN[0]}-{REPORT_PLUGIN[1]}-"]
        wanted += [f"{d}-" for d in _DEPENDENCIES]
        if all(any(n.startswith(w) for n in names) for w in wanted):
            return folder
    return None


def _serve_cached_wheels(monkeypatch, python: str) -> None:
    folder = _cached_wheelhouse(python)
    if folder is None:
        pytest.skip(f"no cached wheelhouse with pytest {PINNED[1]} for Python {python} in {wh.HOST_CACHE}")
    monkeypatch.setattr(vt, "fill_wheelhouse", lambda requirements, py: (folder, []))


def _task(root: Path, test_sh: str, base: str = "debian:bookworm-slim") -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "solution").mkdir()
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(test_sh)
    (root / "tests" / "test_outputs.py").write_text(TESTS_PY)
    (root / "environment" / "Dockerfile").write_text(f"FROM {base}\nWORKDIR /app\n")
    (root / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    (root / "instruction.md").write_text("Nothing to do.\n")
    (root / "task.toml").write_text(
        'version = "1.0"\n[metadata]\ncategory = "test"\n[verifier]\ntimeout_sec = 180.0\n'
        "[environment]\nallow_internet = false\n"
    )
    return root


REWARD = (
    "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
)


def _uvx_test_sh(python: str | None) -> str:
    pin = f"-p {python} " if python else ""
    uvx = f"uvx {pin}-w pytest=={PINNED[1]} -w pytest-json-ctrf=={REPORT_PLUGIN[1]}"
    return (
        "#!/bin/bash\n"
        f"{uvx} pytest --version --version\n"
        f"{uvx} pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA\n" + REWARD
    )


BARE_TEST_SH = (
    "#!/bin/bash\n"
    "pytest --version --version\n"
    "pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA\n" + REWARD
)


def _check(task_dir: Path, factory, work_dir: Path) -> str:
    """Run the oracle check of ``task_dir``; its verifier's captured output (pytest's ``--version`` lines)."""
    from t1_rollout.validate import run_check
    from t1_rollout.verify import CAPTURED_LOG
    from t1_tasks import load_task

    task = load_task(task_dir)
    check = asyncio.run(run_check(task, "oracle", sandbox_factory=factory, work_dir=work_dir))
    log = (work_dir / task.id / "oracle" / CAPTURED_LOG).read_text(errors="replace")
    assert check.report_source == "ctrf" and check.total and check.passed == check.total, (check, log[-3000:])
    return log


def _versions(log: str) -> tuple[str, str, list[str]]:
    """pytest's version, where it was imported from, and the third-party plugins it lists."""
    found = re.search(r"This is pytest version (\S+), imported from (\S+)", log)
    assert found, log[-3000:]
    plugins = re.findall(r"^\s+(pytest-json-ctrf-\S+)", log, flags=re.M)
    return found.group(1).rstrip(","), found.group(2), plugins


@needs_bwrap
@pytest.mark.slow
def test_uvx_pins_run_their_own_pytest_and_report_plugin_locally(tmp_path, monkeypatch):
    from t1_sandbox.local import LocalSandbox
    from t1_sandbox.local.toolchain import TOOLCHAIN_MOUNT

    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    _serve_cached_wheels(monkeypatch, python)
    log = _check(_task(tmp_path / "uvx", _uvx_test_sh(None)), LocalSandbox, tmp_path / "out")
    version, where, plugins = _versions(log)
    assert version == PINNED[1] and not where.startswith(TOOLCHAIN_MOUNT), log[-3000:]
    assert plugins and all(p.startswith(f"pytest-json-ctrf-{REPORT_PLUGIN[1]}") for p in plugins), plugins


@needs_bwrap
@pytest.mark.slow
def test_a_bare_pytest_with_none_installed_runs_the_toolchains_with_its_report_plugin(tmp_path):
    import pytest as own_pytest

    from t1_sandbox.local import LocalSandbox
    from t1_sandbox.local.toolchain import TOOLCHAIN_MOUNT

    log = _check(_task(tmp_path / "bare", BARE_TEST_SH), LocalSandbox, tmp_path / "out")
    version, where, plugins = _versions(log)
    assert version == own_pytest.__version__ and where.startswith(f"{TOOLCHAIN_MOUNT}/site-packages/"), log
    assert len(plugins) == 1, plugins


def _docker_ready() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        import docker

        docker.from_env().ping()
    except Exception:
        return False
    return True


@pytest.mark.docker
@pytest.mark.skipif(not _docker_ready(), reason="needs a Docker daemon")
def test_uvx_pins_run_their_own_pytest_and_report_plugin_in_docker(tmp_path, monkeypatch):
    import pytest as own_pytest

    from t1.run.build import sandbox_factory
    from t1_sandbox.docker.toolchain import ROOT
    from t1_spec import load_recipe

    _serve_cached_wheels(monkeypatch, "3.13")
    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "tiny-docker.yaml")
    factory = sandbox_factory(recipe)
    task = _task(tmp_path / "uvx", _uvx_test_sh("3.13"), base="python:3.13-slim-bookworm")
    version, where, plugins = _versions(_check(task, factory, tmp_path / "out"))
    assert version == PINNED[1] and not where.startswith(ROOT), where
    assert plugins and all(p.startswith(f"pytest-json-ctrf-{REPORT_PLUGIN[1]}") for p in plugins), plugins
    # a bare pytest in the same image (none installed) is the toolchain's, with its report plugin
    bare = _task(tmp_path / "bare", BARE_TEST_SH, base="python:3.13-slim-bookworm")
    version, where, plugins = _versions(_check(bare, factory, tmp_path / "out"))
    assert version == own_pytest.__version__ and where.startswith(f"{ROOT}/site-packages/"), where
    assert len(plugins) == 1, plugins


def _guarded(python: str, code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run ``python -c code`` with the verifier's variables: the guard alone on ``PYTHONPATH``."""
    from t1_sandbox.local.toolchain import FALLBACK_SITE_VARIABLE, GUARD_SOURCE

    toolchain = tmp_path / "toolchain"
    (toolchain / "guard").mkdir(parents=True)
    shutil.copy(GUARD_SOURCE, toolchain / "guard" / "sitecustomize.py")
    (toolchain / "site-packages").symlink_to(Path(pytest.__file__).resolve().parent.parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST", "VIRTUAL_ENV"))}
    env["PYTHONPATH"] = str(toolchain / "guard")
    env[FALLBACK_SITE_VARIABLE] = str(toolchain / "site-packages")
    return subprocess.run([python, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)


SHOW = "import sys, pytest; print(pytest.__file__); print(sys.path[0]); print(sys.path[-1])"


def test_a_python_without_pytest_gets_the_fallback_site_last(tmp_path):
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    if not base.is_file() or Path(sys.base_prefix) == Path(sys.prefix):
        pytest.skip("needs this venv's base interpreter")
    probe = subprocess.run([str(base), "-I", "-c", "import pytest"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"{base} has a pytest of its own")
    done = _guarded(str(base), SHOW, tmp_path)
    where, first, last = done.stdout.split()
    fallback = str(tmp_path / "toolchain" / "site-packages")
    assert where.startswith(fallback + os.sep) and last == fallback, done.stdout + done.stderr
    assert first == str(tmp_path / "toolchain" / "guard")  # the guard stays first


def test_a_python_with_its_own_pytest_never_sees_the_fallback_site(tmp_path):
    # this venv's pytest is found first; the fallback (the same files under another path) is not appended
    done = _guarded(sys.executable, SHOW, tmp_path)
    where, first, last = done.stdout.split()
    assert "toolchain" not in where and "toolchain" not in last, done.stdout + done.stderr
    assert first == str(tmp_path / "toolchain" / "guard")


def test_the_environments_report_plugin_wins_over_the_fallbacks_when_both_are_on_the_path(tmp_path):
    # a venv with json-ctrf 0.3.5 and no pytest: the fallback (pytest and json-ctrf 0.6) is appended, and
    # pluggy registers one plugin per entry-point name, the first distribution on sys.path: the venv's
    from uv import find_uv_bin

    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    folder = _cached_wheelhouse(python)
    base = Path(sys.base_prefix) / "bin" / f"python{python}"
    if folder is None or not base.is_file():
        pytest.skip(
            f"no cached pytest-json-ctrf {REPORT_PLUGIN[1]} wheel in {wh.HOST_CACHE}, or no base Python"
        )
    (wheel,) = folder.glob(f"{REPORT_PLUGIN[0]}-{REPORT_PLUGIN[1]}-*.whl")
    uv, venv = find_uv_bin(), tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", str(base), str(venv)], check=True, timeout=120)
    install = [uv, "pip", "install", "-q", "--offline", "--no-deps", "--python", str(venv / "bin" / "python")]
    subprocess.run([*install, str(wheel)], check=True, timeout=120)
    done = _guarded(
        str(venv / "bin" / "python"), "import pytest; pytest.main(['--version', '--version'])", tmp_path
    )
    out = done.stdout + done.stderr
    assert "This is pytest version" in out and str(tmp_path / "toolchain") in out, out  # the fallback's
    plugins = re.findall(r"^\s+(pytest-json-ctrf-\S+) at (\S+)", out, flags=re.M)
    assert [(p, w.startswith(str(venv))) for p, w in plugins] == [
        (f"pytest-json-ctrf-{REPORT_PLUGIN[1]}", True)
    ]
