"""The suite's fixtures build a working sandbox of every backend through the seam alone."""

from __future__ import annotations


async def test_a_sandbox_from_the_suite_runs_a_command_and_is_reclaimed(make_sandbox, environment_dir):
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=60)
        result = await sb.exec("echo hi; pwd", timeout_s=30)
    assert result.ok
    assert result.stdout.split() == ["hi", "/app"]
