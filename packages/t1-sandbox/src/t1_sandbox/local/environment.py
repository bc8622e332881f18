"""What the local sandbox can run of a task's environment, checked before any model is built.

The local sandbox has no image store and no network: ``FROM debian:bookworm[-slim]`` is mapped onto this
host's own Debian bookworm userland, mounted read-only, and a build step runs as an unprivileged user with
only a down loopback. `environment_problems` reads a task's ``environment/Dockerfile`` and ``[environment]``
(``t1_tasks.harbor``) and says, one line each, what of it cannot run here and why: another base image, an
instruction outside the subset, a ``RUN`` that installs packages (``apt-get``, ``pip install``, ...) or
downloads (``curl``, ``wget``, ``git clone``), a prebuilt ``docker_image`` with no Dockerfile, GPUs, a
``workdir`` other than the Dockerfile's, or a network policy that the recipe's ``sandbox.network`` would
break. Each line names the real cause and ``sandbox.kind: docker``, the backend that builds the Dockerfile as
written. Static: nothing runs.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from t1_sandbox.base import UnsupportedDockerfileInstruction
from t1_sandbox.dockerfile import logical_lines, parse_dockerfile

if TYPE_CHECKING:
    from t1_spec import Recipe
    from t1_tasks import Task

__all__ = ["DOCKER_HINT", "environment_problems", "run_step_hint"]

#: Ends every refusal: the backend that runs a task the local sandbox cannot.
DOCKER_HINT = (
    "set `sandbox.kind: docker` in the recipe to build and run this task as written (to validate it there: "
    "`t1 tasks validate --recipe RECIPE`, e.g. recipes/tiny-docker.yaml)"
)

# RUN steps that cannot work on a read-only host userland without network, with the cause each meets.
_RUN_NEEDS = (
    (
        re.compile(r"\b(apt-get|apt|aptitude|dpkg -i|apk|dnf|yum|microdnf|zypper|pacman)\b"),
        "installs system "
        "packages, but /usr, /etc and /var are this host's, read-only, and there is no network",
    ),
    (
        re.compile(
            r"\b(pip3?|python3? -m pip|uv pip|uv tool|pipx|conda|mamba|npm|yarn|pnpm|cargo|gem|go) "
            r"(install|add|sync|i)\b"
        ),
        "installs packages from the network, which the local sandbox does not have (and its system "
        "site-packages are this host's, read-only)",
    ),
    (re.compile(r"\b(curl|wget|git clone|git fetch)\b"), "downloads, but the local sandbox has no network"),
)


def run_step_hint(command: str) -> str | None:
    """The cause a ``RUN`` command meets in the local sandbox (package install, download), or None.

    Args:
        command: the ``RUN`` instruction's shell command.

    Returns:
        A clause naming what the step does and why it cannot work locally, or None when it looks local.
    """
    for pattern, why in _RUN_NEEDS:
        if pattern.search(command):
            return why
    return None


def _last_workdir(instructions: list) -> str:
    workdir = "/app"  # the local sandbox's default task root (Harbor's /app)
    for ins in instructions:
        if ins.name == "WORKDIR":
            path = ins.args[0]
            workdir = path if path.startswith("/") else f"{workdir.rstrip('/')}/{path}"
    return workdir


def environment_problems(task: Task, recipe: Recipe | None = None) -> list[str]:
    """Why the local sandbox cannot build or run ``task``'s environment, one line each (empty: it can).

    Args:
        task: the loaded task (``environment_dir``, ``environment``).
        recipe: the run's recipe; its ``sandbox.network`` is held against the task's ``network_mode``.

    Returns:
        Lines naming the Dockerfile and line (or the task.toml key), the cause and `DOCKER_HINT`.
    """
    env = task.environment
    dockerfile = task.environment_dir / "Dockerfile"
    problems: list[str] = []
    instructions: list = []
    runs: list[tuple[int, str]] = []  # (line, command) of every RUN, even when the parse stopped early
    if not dockerfile.is_file():
        image = (
            f"the prebuilt image {env.docker_image!r} (environment.docker_image)" if env.docker_image else ""
        )
        problems.append(
            f"{dockerfile}: missing; the local sandbox builds only from a Dockerfile and has no image store "
            f"to run {image or 'an image'} from; {DOCKER_HINT}"
        )
    else:
        try:
            text = dockerfile.read_text(encoding="utf-8")
            runs = [
                (n, t.partition(" ")[2].strip()) for n, t in logical_lines(text) if t[:4].upper() == "RUN "
            ]
            instructions = parse_dockerfile(dockerfile)
        except UnsupportedDockerfileInstruction as exc:
            problems.append(str(exc))
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{dockerfile}: cannot be read: {exc}")
    for line, command in runs:
        if why := run_step_hint(command):
            shown = command if len(command) <= 80 else command[:77] + "..."
            problems.append(f"{dockerfile}:{line}: RUN {shown!r} {why}; {DOCKER_HINT}")
    if env.gpus:
        problems.append(
            f"{task.path / 'task.toml'}: environment.gpus = {env.gpus}: the local sandbox has no GPUs; "
            "use a backend that gives them"
        )
    if env.workdir is not None and instructions and env.workdir != _last_workdir(instructions):
        problems.append(
            f"{task.path / 'task.toml'}: environment.workdir = {env.workdir!r} differs from the Dockerfile's "
            f"last WORKDIR ({_last_workdir(instructions)!r}), which the local sandbox always runs in; "
            "make them the same or use another backend"
        )
    network = bool(recipe is not None and getattr(recipe.sandbox, "network", False))
    if network and env.network_mode != "public":
        problems.append(
            f"{task.path / 'task.toml'}: environment.network_mode = {env.network_mode!r}, but "
            "sandbox.network gives the local sandbox the host's whole network; turn sandbox.network off"
        )
    return problems
