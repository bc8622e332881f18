"""One terminal for the three shells: the same command gives the same observation on local, Docker, Daytona.

Each backend runs through its real shell: the local one under bubblewrap, the Docker one in a container of
the tiny Docker recipe (skipped, with the preflight's reason, where no daemon answers or the local base images
are missing), the Daytona one through the real SDK against the fake Daytona API (``daytona_fake.py``). The
expected observation is built here from the bytes the command prints, not from the terminal module.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import pytest

from t1_sandbox.base import Sandbox
from t1_spec import DaytonaSandboxSpec, load_recipe

REPO = Path(__file__).resolve().parents[2]
TINY_DOCKER = load_recipe(REPO / "recipes" / "tiny-docker.yaml")
MIB = 1024 * 1024
#: The unread bound of every shell, written out (2 MiB: 1 MiB of head and 1 MiB of tail survive).
BOUND = 2 * MIB

#: 3 MiB of output (one line of ``a``), framed by two words, so that the head, the tail and the count show.
FLOOD = f"echo HEAD; head -c {3 * MIB} /dev/zero | tr '\\0' a; echo; echo TAIL\n"


def _expected(command: str, printed: str) -> str:
    """What a 2 MiB-bounded terminal shows: its first and last MiB with the count cut between, at the cut."""
    screen = "$ " + command + printed + "$ "  # first prompt, the echo of the typed line, output, next prompt
    cut = len(screen) - BOUND
    return screen[:MIB] + f"\n[... {cut} bytes omitted ...]\n" + screen[-MIB:]


def _flood_printed() -> str:
    return "HEAD\n" + "a" * (3 * MIB) + "\nTAIL\n"


def _environment(tmp_path: Path) -> Path:
    env = tmp_path / "task" / "environment"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (tmp_path / "task" / "task.toml").write_text("")
    return env


def _local() -> Sandbox:
    if shutil.which("bwrap") is None or os.geteuid() != 0:
        pytest.skip("the local sandbox needs bubblewrap and root")
    from t1_sandbox.local import LocalSandbox

    return LocalSandbox()


def _docker() -> Sandbox:
    from t1_sandbox.docker import DockerSandbox

    if problems := DockerSandbox.preflight(TINY_DOCKER):
        pytest.skip("; ".join(problems))
    return DockerSandbox.from_spec(TINY_DOCKER.sandbox)


@pytest.fixture
def daytona_api(tmp_path, monkeypatch):
    if shutil.which("bwrap") is None:
        pytest.skip("the fake Daytona API runs commands with bwrap")
    sys.path.insert(0, str(Path(__file__).parent))
    from daytona_fake import FakeDaytona

    server = FakeDaytona(tmp_path).start()
    monkeypatch.setenv("DAYTONA_API_KEY", "test-key")
    monkeypatch.setenv("DAYTONA_API_URL", server.url)
    yield server
    server.stop()


def _daytona() -> Sandbox:
    from t1_sandbox.daytona import DaytonaSandbox

    return DaytonaSandbox.from_spec(DaytonaSandboxSpec(control_timeout_s=10))


async def _observe(sandbox: Sandbox, environment: Path, commands: list[str]) -> list[str]:
    async with sandbox:
        await sandbox.start(environment, timeout_s=60)
        shell = await sandbox.open_shell()
        return [await shell.send(c, duration_s=60, max_wait_s=90) for c in commands]


@pytest.mark.parametrize(
    "kind",
    ["local", pytest.param("docker", marks=pytest.mark.docker), "daytona"],
)
def test_a_3_mib_flood_reads_the_same_on_every_backend_with_the_count_at_the_cut(kind, tmp_path, request):
    if kind == "daytona":
        request.getfixturevalue("daytona_api")
    sandbox = {"local": _local, "docker": _docker, "daytona": _daytona}[kind]()
    flood, after = asyncio.run(_observe(sandbox, _environment(tmp_path), [FLOOD, "echo fine\n"]))
    assert flood == _expected(FLOOD, _flood_printed())
    assert after == "echo fine\nfine\n$ "


def test_the_three_backends_give_identical_observations(tmp_path, request):
    """Local, Docker and Daytona side by side (a backend this machine cannot run is left out, said why)."""
    makers = {"local": _local, "docker": _docker, "daytona": _daytona}
    seen: dict[str, list[str]] = {}
    skipped: dict[str, str] = {}
    for kind, make in makers.items():
        try:
            if kind == "daytona":
                request.getfixturevalue("daytona_api")
            sandbox = make()
        except pytest.skip.Exception as why:
            skipped[kind] = str(why)
            continue
        seen[kind] = asyncio.run(
            _observe(sandbox, _environment(tmp_path / kind), [FLOOD, "cd /tmp; echo $((6*7)) $PWD\n"])
        )
    if len(seen) < 2:
        pytest.skip(f"fewer than two backends run here: {skipped}")
    first, *others = seen.values()
    for kind, observed in seen.items():
        assert observed == first, f"{kind} reads differently from {next(iter(seen))}"
    assert first[1] == "cd /tmp; echo $((6*7)) $PWD\n42 /tmp\n$ "
