"""An unmodified Terminal-Bench 2 ``test.sh`` verifies offline: T1's home with uv, a wheelhouse, a Python.

The Docker test runs the script exactly as Terminal-Bench 2 writes it (apt-get, the astral.sh bootstrap,
``source $HOME/.local/bin/env``, ``uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5``) in a
container without network; the unit tests check the pieces with a recording sandbox and a fake pip.
"""

from __future__ import annotations

import asyncio
import shutil
import stat
from pathlib import Path

import pytest

from t1_rollout import verifier_toolchain as vt
from t1_sandbox import wheelhouse as wh
from t1_sandbox.base import ExecResult, Sandbox

TB2_TEST_SH = """#!/bin/bash

apt-get update
apt-get install -y curl

curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh

source $HOME/.local/bin/env

uvx \\
  -p 3.13 \\
  -w pytest==8.4.1 \\
  -w pytest-json-ctrf==0.3.5 \\
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA

if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
TESTS_PY = (
    "from pathlib import Path\n\n\n"
    "def test_file():\n    assert Path('/app/out.txt').read_text() == 'ok\\n'\n\n\n"
    "def test_exists():\n    assert Path('/app/out.txt').exists()\n"
)


class Recording(Sandbox):
    def __init__(self, network: bool | None):
        self.network = network
        self.uploads: list[tuple[Path, str, bool, list[str]]] = []

    async def start(self, environment_dir, *, timeout_s):
        pass

    async def upload(self, local, remote, *, timeout_s=60, read_only=False):
        self.uploads.append((Path(local), remote, read_only, sorted(p.name for p in Path(local).iterdir())))

    async def exec(self, command, *, timeout_s, cwd=None, env=None, cpu_time_s=None):
        return ExecResult("", "", 0, False, 0.0)

    async def download(self, remote, local, *, timeout_s=60):
        pass

    async def open_shell(self):
        raise NotImplementedError

    async def close(self):
        pass


def _tests(root: Path, test_sh: str = TB2_TEST_SH) -> Path:
    tests = root / "tests"
    tests.mkdir(parents=True)
    (tests / "test.sh").write_text(test_sh)
    (tests / "test_outputs.py").write_text(TESTS_PY)
    return tests


def test_the_pins_of_test_sh_are_fetched_for_its_python_and_uploaded_read_only(tmp_path, monkeypatch):
    asked: list[tuple[list[str], str]] = []
    house = tmp_path / "house"
    house.mkdir()
    for name in ("pytest-8.4.1-py3-none-any.whl", "pytest_json_ctrf-0.3.5-py3-none-any.whl"):
        (house / name).write_bytes(b"wheel")

    def fill(requirements, python):
        asked.append((requirements, python))
        return house, []

    monkeypatch.setattr(vt, "fill_wheelhouse", fill)
    box = Recording(network=False)
    given = asyncio.run(vt.provision(box, _tests(tmp_path), network=False))
    assert asked == [(["pytest==8.4.1", "pytest-json-ctrf==0.3.5"], "3.13")]
    ((_, remote, read_only, names),) = box.uploads
    assert (remote, read_only) == (vt.WHEELS_DIR, True) and len(names) == 2
    assert f"UV_FIND_LINKS={vt.WHEELS_DIR}" in given.prelude and "UV_OFFLINE=1" in given.prelude
    assert f"HOME={vt.HOME_DIR}" in given.prelude and "/.local/bin/env" in given.prelude
    assert "2 wheels" in given.describe() and "offline" in given.describe()
    # with network, uv may still use the index: no offline switch
    online = asyncio.run(vt.provision(Recording(network=True), tmp_path / "tests", network=True))
    assert "UV_OFFLINE" not in online.prelude and "UV_FIND_LINKS" in online.prelude


def test_a_script_that_installs_nothing_gets_the_home_and_no_wheelhouse(tmp_path, monkeypatch):
    monkeypatch.setattr(vt, "fill_wheelhouse", lambda r, p: pytest.fail("nothing to fetch"))
    box = Recording(network=False)
    given = asyncio.run(vt.provision(box, _tests(tmp_path, "pytest /tests -rA\n"), network=False))
    assert box.uploads == [] and given.wheels == ()
    assert "UV_FIND_LINKS" not in given.prelude and f"HOME={vt.HOME_DIR}" in given.prelude


def test_the_wheelhouse_is_fetched_once_per_requirement_set_and_names_what_it_could_not_get(
    tmp_path, monkeypatch
):
    calls: list[list[str]] = []
    fake = tmp_path / "fakepip"
    fake.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do last="$a"; done\n'
        'case "$last" in no-such-pkg*) echo "ERROR: No matching distribution" >&2; exit 1;; esac\n'
        'while [ "$1" != "-d" ]; do shift; done; touch "$2/${last%%=*}-1.0-py3-none-any.whl"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    real_run = wh.subprocess.run

    def run(cmd, **kw):
        calls.append(cmd)
        return real_run(cmd, **kw)

    monkeypatch.setattr(wh, "HOST_CACHE", tmp_path / "cache")
    monkeypatch.setattr(wh, "_pip_command", lambda: [str(fake)])
    monkeypatch.setattr(wh.subprocess, "run", run)
    monkeypatch.setattr(wh, "_MISSED", {})
    folder, problems = wh.fill_wheelhouse(["pytest==8.4.1", "no-such-pkg==1"], "3.13")
    assert sorted(p.name for p in folder.glob("*.whl")) == ["pytest-1.0-py3-none-any.whl"]
    assert len(problems) == 1 and problems[0].startswith("no-such-pkg==1: the package index gave no wheel")
    assert len(calls) == 2 and "--python-version" in calls[0] and "3.13" in calls[0]
    again, problems_again = wh.fill_wheelhouse(["no-such-pkg==1", "pytest==8.4.1"], "3.13")
    assert (again, problems_again) == (folder, problems) and len(calls) == 2  # not retried, order-free
    # a complete fill is kept on disk for every later process
    whole, none = wh.fill_wheelhouse(["pytest==8.4.1"], "3.13")
    assert none == [] and (whole / ".complete").is_file() and len(calls) == 3
    monkeypatch.setattr(wh, "_MISSED", {})
    assert wh.fill_wheelhouse(["pytest==8.4.1"], "3.13") == (whole, []) and len(calls) == 3


def _docker_ready() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        import docker

        docker.from_env().ping()
    except Exception:
        return False
    return True


def _tb2_task(root: Path, base: str, python: str = "3.13") -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "solution").mkdir()
    _tests(root, TB2_TEST_SH.replace("-p 3.13", f"-p {python}"))
    (root / "environment" / "Dockerfile").write_text(f"FROM {base}\nWORKDIR /app\n")
    (root / "solution" / "solve.sh").write_text("#!/bin/bash\necho ok > /app/out.txt\n")
    (root / "instruction.md").write_text("Write ok to /app/out.txt.\n")
    (root / "task.toml").write_text(
        'version = "1.0"\n[metadata]\ncategory = "test"\n[verifier]\ntimeout_sec = 120.0\n'
        "[environment]\nallow_internet = false\n"
    )
    return root


@pytest.mark.docker
@pytest.mark.skipif(not _docker_ready(), reason="needs a Docker daemon")
def test_an_unmodified_tb2_test_sh_verifies_offline_in_docker(tmp_path):
    from t1.run.build import sandbox_factory
    from t1_rollout.validate import validate_task
    from t1_sandbox.docker.toolchain import extra_pythons
    from t1_spec import load_recipe
    from t1_tasks import load_task

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "tiny-docker.yaml")
    assert recipe.sandbox.network is False
    factory = sandbox_factory(recipe)
    # python:3.13-slim-bookworm stands in as Debian trixie, whose python3.13 uvx -p 3.13 finds
    good = asyncio.run(
        validate_task(
            load_task(_tb2_task(tmp_path / "py313", "python:3.13-slim-bookworm")),
            sandbox_factory=factory,
            work_dir=tmp_path / "out",
        )
    )
    assert good.ok, good.problems
    assert (good.oracle.passed, good.oracle.total, good.oracle.report_source) == (2, 2, "ctrf")
    assert (good.nop.passed, good.nop.error) == (0, None)
    # Debian bookworm has CPython 3.11: the toolchain's 3.13 (this host's, when it has one) serves -p 3.13
    if any(version == "3.13" for version, _ in extra_pythons()):
        bookworm = asyncio.run(
            validate_task(
                load_task(_tb2_task(tmp_path / "bookworm", "debian:bookworm-slim")),
                sandbox_factory=factory,
                work_dir=tmp_path / "out",
            )
        )
        assert bookworm.ok, bookworm.problems
    # a Python neither the image nor the toolchain has: the verifier does not run, and the cause says why
    bad = asyncio.run(
        validate_task(
            load_task(_tb2_task(tmp_path / "py310", "debian:bookworm-slim", python="3.10")),
            sandbox_factory=factory,
            work_dir=tmp_path / "out",
        )
    )
    assert not bad.ok
    assert "the verifier did not run" in bad.problems[0], bad.problems
    assert "no python3.10 on the verifier's PATH" in bad.problems[0], bad.problems
