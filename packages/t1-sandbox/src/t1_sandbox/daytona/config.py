"""What a Daytona sandbox is created with: credentials, resources, image, lifecycle intervals, labels.

Pure functions over the recipe's ``DaytonaSandboxSpec`` and the task's ``task.toml``; nothing here imports
the SDK or makes a call, so preflight stays cheap. Sources: the Daytona SDK 0.226 (``DaytonaConfig``,
``Resources`` in whole GiB, ``auto_stop_interval`` / ``auto_delete_interval`` in minutes); Harbor's
``DaytonaEnvironment`` (harbor_tb.md §4: image choice snapshot > ``docker_image`` > Dockerfile); T1 §7, §7.4
(one core, small memory and disk; explicit reclamation; 5400 s remote deadline).
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from t1_sandbox.base import SandboxError
from t1_spec import DaytonaSandboxSpec, Recipe

if TYPE_CHECKING:
    from t1_tasks import Task

__all__ = [
    "RUN_LABEL",
    "TASK_LABEL",
    "Placement",
    "credential_problems",
    "environment_problems",
    "lifecycle_problems",
    "parse_size_mib",
    "placement_for",
]

#: The label every sandbox of a run carries (``t1.run=<run id>``): how orphans of a dead run are found.
RUN_LABEL = "t1.run"
#: The label naming the task a sandbox was made for (for reading a listing; nothing depends on it).
TASK_LABEL = "t1.task"

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_MIB_PER_UNIT = {"": 1 / 1024**2, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2}


def parse_size_mib(value: object, where: str) -> float:
    """A size of ``task.toml`` in MiB: a number of MiB (``memory_mb = 2048``) or text (``memory = "2G"``).

    Text takes a unit K, M, G or T, optionally with ``i`` and ``B`` (``"512Mi"``, ``"10GB"``), counted in
    powers of 1024 as Docker and Harbor read them; a bare number in text is bytes.

    Raises:
        SandboxError: not a positive number or a size of that form (naming ``where``).
    """
    if isinstance(value, bool):
        raise SandboxError(f"{where} must be a size, got {value!r}")
    if isinstance(value, int | float):
        if value <= 0 or not math.isfinite(value):
            raise SandboxError(f"{where} must be a positive size, got {value!r}")
        return float(value)
    match = _SIZE.match(str(value))
    if not match or float(match.group(1)) <= 0:
        raise SandboxError(f'{where} must be a size such as 2048 or "2G", got {value!r}')
    return float(match.group(1)) * _MIB_PER_UNIT[match.group(2).lower()]


@dataclass(frozen=True)
class Placement:
    """What one sandbox is created from and with.

    Attributes:
        cpu: vCPUs.
        memory_gib: memory, whole GiB (Daytona's unit; a task's MiB rounded up, never down).
        disk_gib: disk, whole GiB (rounded up likewise).
        snapshot: the snapshot to create from, or None.
        image: a registry image to create from (``docker_image``), or None.
        dockerfile: the task's Dockerfile Daytona builds, or None.
        network_block_all: no egress (the recipe's ``network`` off, or the task's ``allow_internet = false``
            or ``network_mode = "no-network"``).
        auto_stop_min: ``auto_stop_interval`` sent, minutes.
        auto_delete_min: ``auto_delete_interval`` sent, minutes.
        labels: the sandbox's labels (``t1.run`` and ``t1.task``).
    """

    cpu: int
    memory_gib: int
    disk_gib: int
    snapshot: str | None
    image: str | None
    dockerfile: Path | None
    network_block_all: bool
    auto_stop_min: int
    auto_delete_min: int
    labels: dict[str, str]


def _task_environment(environment_dir: Path) -> tuple[dict[str, Any], str]:
    toml = environment_dir.parent / "task.toml"
    if not toml.is_file():
        return {}, str(toml)
    try:
        table = tomllib.loads(toml.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SandboxError(f"{toml}: cannot be read for the sandbox's resources: {exc}") from exc
    env = table.get("environment", {})
    if not isinstance(env, dict):
        raise SandboxError(f"{toml}: [environment] must be a table")
    return env, str(toml)


def _gib(env: dict[str, Any], keys: tuple[str, str], cap: int, where: str) -> int:
    """Whole GiB from ``<key>_mb`` (MiB) or the legacy ``<key>`` text ("2G"), at most the recipe's ``cap``."""
    mb_key, text_key = keys
    for key in (mb_key, text_key):
        if key in env:
            asked = math.ceil(parse_size_mib(env[key], f"{where} [environment].{key}") / 1024)
            return max(1, min(asked, cap))
    return cap


def placement_for(
    spec: DaytonaSandboxSpec, environment_dir: Path, *, run_id: str, task_id: str | None = None
) -> Placement:
    """The resources, image, network and lifecycle of the sandbox for the task at ``environment_dir``.

    Each of the recipe's ``sandbox.cpus``, ``memory_gib`` and ``disk_gib`` is the most a sandbox gets: a task
    whose ``[environment]`` asks for less (``cpus``, ``memory_mb`` or ``memory``, ``storage_mb`` or
    ``storage``) gets its own request, as the Docker backend does.
    The image is ``sandbox.snapshot`` when set, else the task's ``docker_image``, else its Dockerfile.

    Raises:
        SandboxError: a malformed ``task.toml`` size or cpu count (naming the file and key), or no
            Dockerfile where one is needed.
    """
    env, where = _task_environment(environment_dir)
    cpus = env.get("cpus", spec.cpus)
    if isinstance(cpus, bool) or not isinstance(cpus, int | float) or cpus <= 0:
        raise SandboxError(f"{where} [environment].cpus must be a positive number, got {cpus!r}")
    dockerfile = environment_dir / "Dockerfile"
    image = env.get("docker_image") if spec.snapshot is None else None
    if image is not None and not isinstance(image, str):
        raise SandboxError(f"{where} [environment].docker_image must be text, got {image!r}")
    if spec.snapshot is None and image is None and not dockerfile.is_file():
        raise SandboxError(
            f"{dockerfile}: missing; a Daytona sandbox is created from sandbox.snapshot, the task's "
            "[environment].docker_image or its environment/Dockerfile"
        )
    allow_internet = env.get("allow_internet", True) is not False and env.get("network_mode") != "no-network"
    return Placement(
        cpu=max(1, min(math.ceil(cpus), spec.cpus)),
        memory_gib=_gib(env, ("memory_mb", "memory"), spec.memory_gib, where),
        disk_gib=_gib(env, ("storage_mb", "storage"), spec.disk_gib, where),
        snapshot=spec.snapshot,
        image=image,
        dockerfile=dockerfile if spec.snapshot is None and image is None else None,
        network_block_all=not (spec.network and allow_internet),
        auto_stop_min=spec.auto_stop_min,
        auto_delete_min=spec.auto_delete_min,
        labels={RUN_LABEL: run_id, TASK_LABEL: task_id or environment_dir.parent.name},
    )


def credential_problems(spec: DaytonaSandboxSpec) -> list[str]:
    """What stops the SDK from authenticating, one line each starting with the recipe field (empty: ready).

    Cheap: it reads the environment and looks the SDK up without importing it.
    """
    problems = []
    if importlib.util.find_spec("daytona") is None:
        problems.append(
            "sandbox.kind 'daytona': the daytona SDK is not installed "
            "(install the extra: pip install 't1-sandbox[daytona]')"
        )
    if not os.environ.get(spec.api_key_env):
        problems.append(
            f"sandbox.api_key_env: the environment variable {spec.api_key_env} is unset or empty; "
            "export your Daytona API key there (the key never goes into a recipe)"
        )
    return problems


def lifecycle_problems(recipe: Recipe) -> list[str]:
    """The auto-stop interval against the trial's deadline (T1 §7.4), one line each (empty: consistent).

    An auto-stop shorter than ``rollout.remote_deadline_s`` could stop a live trial that waits on the model
    between two commands; the SDK's own 15-minute default did exactly that to agents (harbor_tb.md §6).
    """
    spec = recipe.sandbox
    assert isinstance(spec, DaytonaSandboxSpec)
    need = math.ceil(recipe.rollout.remote_deadline_s / 60)
    if spec.auto_stop_min < need:
        return [
            f"sandbox.auto_stop_min {spec.auto_stop_min}: below rollout.remote_deadline_s "
            f"{recipe.rollout.remote_deadline_s:g} s ({need} min); Daytona would stop a trial that is still "
            f"live, so set it to at least {need}"
        ]
    return []


def environment_problems(task: Task, spec: DaytonaSandboxSpec) -> list[str]:
    """Why the Daytona backend cannot run ``task``'s environment, one line each (Daytona is not asked).

    Refused: a malformed ``[environment]`` size or cpu count, no Dockerfile, image or snapshot
    (`placement_for`), a task that needs GPUs (this backend asks for none), and ``network_mode =
    "allowlist"`` (Daytona's allow list takes CIDR ranges, not the task's host names).
    """
    problems = []
    env = task.environment
    if env.gpus:
        problems.append(f"{task.id}: [environment].gpus = {env.gpus}: the daytona sandbox asks for no GPUs")
    if env.network_mode == "allowlist":
        problems.append(
            f'{task.id}: [environment].network_mode = "allowlist": not built for daytona (its allow list '
            "takes CIDR ranges, not host names)"
        )
    try:
        placement_for(spec, Path(task.environment_dir), run_id="check", task_id=task.id)
    except SandboxError as exc:
        problems.append(f"{task.id}: {exc}")
    return problems
