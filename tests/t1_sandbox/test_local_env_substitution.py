"""The local backend's Dockerfile ``ENV`` substitutes ``$NAME`` and ``${NAME}`` as Docker does.

``ENV PATH=/app/.venv/bin:$PATH`` (a uv project's image) kept the text ``$PATH`` literally, so no command of
the sandbox was found (``bwrap: execvp bash: No such file or directory``).
"""

from __future__ import annotations

import os
import shutil

import pytest

from t1_sandbox.local import LocalSandbox

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(
        shutil.which("bwrap") is None or os.geteuid() != 0,
        reason="needs bubblewrap (apt-get install bubblewrap) and root",
    ),
]


async def test_env_substitutes_earlier_values_as_docker_does(tmp_path):
    # as Docker: one ENV line sees the values from before it (B's ${A} is still unset), unset names are empty
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nWORKDIR /app\nENV PATH=/app/.venv/bin:$PATH\n"
        "ENV A=one B=${A}-two\nENV C=$A$B$UNSET.\n"
    )
    async with LocalSandbox() as sb:
        await sb.start(env, timeout_s=30)
        r = await sb.exec('echo "$PATH|$A|$B|$C"', timeout_s=10)
    assert r.stdout == (
        "/app/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|one|-two|one-two.\n"
    ), r
