"""Every command in the README's bash blocks runs, with small overrides, and exits as the README says.

`COMMANDS` holds each command exactly as the README writes it (its comment dropped) with what the test adds
(fewer steps, a temporary run root) and the exit code expected; a command the README gains or changes fails
`test_every_readme_command_is_covered` until it is listed here. The long ones are marked slow
(`uv run pytest -m slow tests/docs/test_readme_commands.py`). Not run here: the install lines (run in fresh
containers by `test_readme_install.py`) and `uv run pytest` itself (this suite).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SANDBOX = shutil.which("bwrap") is not None and os.geteuid() == 0


@dataclass(frozen=True)
class Run:
    """How the test runs one README command: ``extra`` appended, ``code`` expected, ``slow`` marked."""

    extra: str = ""
    code: int = 0
    slow: bool = False
    skip: str | None = None
    sandbox: bool = False  # needs the local sandbox (bubblewrap, as root), as the README says


IN_CONTAINERS = "run in fresh containers: test_readme_install"
RUNS = 'logging.run_root="$out/runs"'
# one PPO step of one sample on each of the three tasks, no critic warm-up
SMALL = "ppo.steps=1 ppo.samples_per_task=1 ppo.ppo_epochs=1 rollout.launched=3 rollout.admitted=3 "
SMALL += "critic_warmup.enabled=false"
COMMANDS: dict[str, Run] = {
    # Quick start
    "apt-get update && apt-get install -y pipx bubblewrap": Run(skip=IN_CONTAINERS),
    'pipx install uv && export PATH="$HOME/.local/bin:$PATH"': Run(skip=IN_CONTAINERS),
    # --dry-run: the test leaves the environment every other test runs in as it is
    "uv sync --all-packages --compile-bytecode": Run("--frozen --dry-run"),
    "uv run t1 train recipes/tiny-cpu.yaml": Run(f"ppo.steps=1 {RUNS}", slow=True, sandbox=True),
    "uv run pytest": Run(skip="the suite itself; .ci/run runs it"),
    # Does it learn?
    "uv run python tools/bench/bench_learning.py": Run("--seeds 1 --steps 2 --arms ppo", slow=True),
    "uv run t1 sft recipes/tiny-learn.yaml": Run(
        'sft.epochs=1 sft.output="$out/sft"', slow=True, sandbox=True
    ),
    "uv run t1 train recipes/tiny-learn-three-ppo.yaml": Run(
        f"model.init=random model.checkpoint=null {SMALL} {RUNS}",
        slow=True,
        sandbox=True,
    ),
    "uv run python tools/bench/bench_learning_recipe.py": Run(
        '--steps 1 --arms learn sft.epochs=1 sft.output="$out/sft-bench" model.checkpoint="$out/sft-bench" '
        f"{SMALL} {RUNS}",
        slow=True,
        sandbox=True,
    ),
    "uv run python tools/bench/bench_heldout.py": Run(
        '--out "$out/heldout" --train 3 --heldout 2 --arms ppo-critic --seeds 0 --steps 1 --eval-every 1 '
        "--attempts 1 --sft-tasks 0 ppo.batch_size=2 ppo.samples_per_task=1 rollout.launched=2 "
        "rollout.admitted=2 critic_warmup.enabled=false",
        slow=True,
        sandbox=True,
    ),
    # Other commands
    "uv run t1 train recipes/tiny-ray.yaml trainer.checkpoint_every=1": Run(
        f"ppo.steps=1 {RUNS}", slow=True, sandbox=True
    ),
    "uv run t1 train recipes/tiny-ray-dp2.yaml": Run(f"ppo.steps=1 {RUNS}", slow=True, sandbox=True),
    "uv run t1 recipe validate recipes/tiny-cpu.yaml": Run(sandbox=True),
    "uv run t1 recipe validate recipes/t1-122b.yaml": Run(code=1),  # the README: exit 1 here
    "uv run t1 recipe validate recipes/t1-122b.yaml --spec-only": Run(),
    "uv run t1 recipe show recipes/grpo.yaml": Run(),
    "uv run t1 recipe diff recipes/grpo.yaml": Run(),
    "tools/check_plan recipes/t1-122b.yaml": Run(),
    "uv run t1 plan search recipes/t1-122b.yaml": Run(),
    "out=$(mktemp -d)": Run(skip="the test gives $out a temporary folder of its own"),
    'uv run t1 tasks validate --record "$out/mini.json"': Run("--limit 2", slow=True, sandbox=True),
    'uv run t1 tasks stats --validated "$out/mini.json" --recipe recipes/tiny-cpu.yaml': Run(slow=True),
    'uv run t1 tasks audit --validated "$out/mini.json"': Run(slow=True),
    "uv run t1 eval builtin:mini --recipe recipes/tiny-cpu.yaml --policy oracle": Run(
        "pool.limit=2", slow=True, sandbox=True
    ),
    'uv run mkdocs build --strict -d "$out/site"': Run("--quiet", slow=True),
}


def readme_commands() -> list[str]:
    """Every command line of the README's ```bash blocks, without its trailing comment, in order."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(), re.S):
        for line in block.splitlines():
            command = re.sub(r"\s+#\s.*$", "", line).strip()
            if command:
                out.append(command)
    return out


def test_every_readme_command_is_covered():
    commands = readme_commands()
    assert sorted(commands) == sorted(COMMANDS), {
        "not in COMMANDS": sorted(set(commands) - set(COMMANDS)),
        "not in the README": sorted(set(COMMANDS) - set(commands)),
    }


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    """One folder shared by the commands, as the README's single ``out=$(mktemp -d)`` is."""
    return tmp_path_factory.mktemp("readme")


def _params():
    for command, run in COMMANDS.items():
        marks = [pytest.mark.slow] if run.slow else []
        if run.skip:
            marks.append(pytest.mark.skip(reason=run.skip))
        elif run.sandbox and not SANDBOX:
            marks.append(pytest.mark.skip(reason="the local sandbox needs bubblewrap and root"))
        yield pytest.param(command, run, marks=marks, id=command[:60])


@pytest.mark.parametrize(("command", "run"), list(_params()))
def test_readme_command_runs(command, run, out):
    env = {**os.environ, "out": str(out), "OMP_NUM_THREADS": "1"}
    script = f"{command} {run.extra}".strip()
    done = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == run.code, f"{script}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
