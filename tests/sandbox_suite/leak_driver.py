"""A process that starts sandboxes through the ``Sandbox`` seam and is stopped by a signal (the leak suite).

Usage: ``python leak_driver.py CONFIG_JSON ENVIRONMENT_DIR MODE``. ``CONFIG_JSON`` is ``leaks.isolate``'s
settings. ``MODE``:

- ``hold``: start three sandboxes (one holding 50,000 files, so that its reclaim takes a while), each with a
  running exec and a shell with a background job, print ``ready <status file>`` and wait; stopped as
  ``t1 train`` is (``t1.run.signals``: Ctrl-C, SIGTERM and SIGHUP), it writes a ``status.json`` the way
  ``t1.run.driver.Run`` does and exits 130; ``ready`` is followed by the pid of its sandbox watchdog;
- ``once``: start one sandbox, run ``echo ok`` in it, close it, exit 0 (a new run after a ``kill -9``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from leaks import apply_isolation  # noqa: E402

from t1.run.run_dir import RunDir  # noqa: E402
from t1.run.signals import deferred_signals, run_interruptible, stop_signals  # noqa: E402
from t1_sandbox import SANDBOXES  # noqa: E402
from t1_sandbox.watchdog import watchdog_pid  # noqa: E402
from t1_spec import DaytonaSandboxSpec, LocalSandboxSpec, load_recipe  # noqa: E402

TINY_DOCKER = Path(__file__).resolve().parents[2] / "recipes" / "tiny-docker.yaml"
SPECS = {
    "local": LocalSandboxSpec,
    "docker": lambda: load_recipe(TINY_DOCKER).sandbox,
    "daytona": lambda: DaytonaSandboxSpec(control_timeout_s=60),  # the test's fake API, from the environment
}
MANY_FILES = (
    "python3 -c \"import os\nfor d in range(50):\n os.mkdir(f'/tmp/m{d}')\n"
    " for i in range(1000): open(f'/tmp/m{d}/{i}', 'w').close()\""
)


def make(config: dict):
    kind = config["kind"]
    return SANDBOXES.load(kind).from_spec(SPECS[kind]())


async def hold(config: dict, env: Path) -> None:
    async with make(config) as a, make(config) as b, make(config) as c:
        for sb in (a, b, c):
            await sb.start(env, timeout_s=60)
        result = await a.exec(MANY_FILES, timeout_s=120)
        assert result.exit_code == 0, result.stderr
        running = [asyncio.ensure_future(sb.exec("sleep 600", timeout_s=900)) for sb in (a, b, c)]
        for sb in (a, b, c):
            shell = await sb.open_shell()
            await shell.send("sleep 700 &\n", duration_s=0.2, max_wait_s=2)
        await asyncio.sleep(0.3)
        print(f"ready {watchdog_pid()}", flush=True)  # the watchdog that reclaims them after a kill -9
        await asyncio.gather(*running)


async def once(config: dict, env: Path) -> None:
    async with make(config) as sb:
        await sb.start(env, timeout_s=60)
        result = await sb.exec("echo ok", timeout_s=30)
        assert result.stdout == "ok\n", result


def main() -> int:
    config, env, mode = json.loads(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    apply_isolation(config)
    if mode == "once":
        asyncio.run(once(config, env))
        return 0
    rundir = RunDir(Path(tempfile.mkdtemp(prefix="t1-leak-run-")))
    print(f"status {rundir.root / 'status.json'}", flush=True)
    with stop_signals() as token:
        rundir.write_status("running", 0, None)
        try:
            run_interruptible(hold(config, env))
        except KeyboardInterrupt:
            with deferred_signals():
                rundir.write_status("interrupted", 0, f"interrupted by {token.reason or 'Ctrl-C (SIGINT)'}")
            return 130
    rundir.write_status("finished", 0, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
