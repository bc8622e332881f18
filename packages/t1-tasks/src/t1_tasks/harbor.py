"""Harbor's ``task.toml`` as T1 reads it: every key honoured, kept for a backend, refused, or warned about.

Harbor parses ``task.toml`` into its ``TaskConfig`` pydantic model (``harbor/models/task/config.py``),
which ignores keys it does not know (pydantic's default). `parse_task_config` walks every key of the file:
each key of Harbor's model is read into `HarborConfig` (and used by T1 or by the sandbox backend that can use
it), or refused with a `TaskError` that names the key and why T1 cannot honour it; a key Harbor's model does
not have (``[task] format``, which many community tasks carry, or a misspelt ``memroy_mb``) is ignored as
Harbor ignores it, and named in `HarborConfig.warnings` (printed by ``t1 tasks list`` and ``validate``), so a
task Harbor loads is not refused. Legacy keys are mapped as Harbor maps them:

- ``version`` is ``schema_version`` (Harbor's ``handle_version_rename``); ``version = "1.0"`` is accepted;
- ``[environment] memory = "2G"`` and ``storage = "10G"`` become ``memory_mb`` and ``storage_mb`` (``G`` is
  1024 MB, ``M`` is 1 MB, ``K`` is 1/1024 MB, fractions rounded down, as ``_parse_size_to_mb``); a value that
  disagrees with an explicit ``memory_mb`` / ``storage_mb`` is refused, as Harbor refuses it;
- ``[environment] allow_internet`` becomes ``network_mode`` (``public`` or ``no-network``) unless
  ``network_mode`` or ``allowed_hosts`` is set; ``allowed_hosts`` without ``network_mode`` means
  ``allowlist`` (Harbor's ``_validate_network_policy_fields``).

What T1 cannot run (multi-step tasks, Windows containers, a separate verifier container, per-phase users
or network policies, MCP servers, skills, healthchecks, TPUs, host variables resolved into the sandbox,
artifacts) is refused by name rather than run differently from what the task asks. Source: Harbor
``TaskConfig``, ``EnvironmentConfig``, ``VerifierConfig``, ``AgentConfig`` at v0.13.1 (harbor_tb.md §1.2);
T1 §3.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_AGENT_TIMEOUT_S",
    "DEFAULT_BUILD_TIMEOUT_S",
    "DEFAULT_VERIFIER_TIMEOUT_S",
    "HarborConfig",
    "HarborEnvironment",
    "TaskError",
    "parse_size_mb",
    "parse_task_config",
]

# Harbor's code default for the verifier is 600 s; the agent has no limit in code, the docs say 600 s.
DEFAULT_AGENT_TIMEOUT_S = 600.0
DEFAULT_VERIFIER_TIMEOUT_S = 600.0
DEFAULT_BUILD_TIMEOUT_S = 600.0  # Harbor EnvironmentConfig.build_timeout_sec
NETWORK_MODES = ("public", "no-network", "allowlist")
_HOST_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_IPV4 = re.compile(r"^(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)$")


class TaskError(ValueError):
    """A task bundle is malformed; the message names the file and the field (or missing path)."""


@dataclass(frozen=True)
class HarborEnvironment:
    """``[environment]`` of a task: what the task asks of the sandbox that runs it.

    T1's sandboxes take their limits from the recipe's ``sandbox`` section; these values are what a backend
    that can honour them reads (the Docker and Daytona backends), and what a backend's
    ``check_environment`` holds against what it can do.

    Attributes:
        docker_image: a prebuilt image to run instead of building ``environment/Dockerfile`` (None: build).
        cpus: CPU cores the task asks for (None: the sandbox's default).
        memory_mb: memory in MB (``memory = "2G"`` gives 2048; None: the sandbox's default).
        storage_mb: disk in MB (``storage = "10G"`` gives 10240; None: the sandbox's default).
        gpus: GPUs the task needs (0: none).
        gpu_types: acceptable GPU types (empty: any).
        network_mode: ``public``, ``no-network`` or ``allowlist`` (Harbor's default ``public``); the most
            network the task may have, never a promise: the local sandbox gives none.
        allowed_hosts: host names reachable under ``allowlist`` (lower case, no trailing dot).
        build_timeout_s: seconds to build the environment (Harbor default 600).
        workdir: the working directory commands run in, overriding the Dockerfile's last ``WORKDIR``.
    """

    docker_image: str | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    gpus: int = 0
    gpu_types: tuple[str, ...] = ()
    network_mode: str = "public"
    allowed_hosts: tuple[str, ...] = ()
    build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S
    workdir: str | None = None


@dataclass(frozen=True)
class HarborConfig:
    """The parsed ``task.toml``.

    Attributes:
        schema_version: ``schema_version`` (or the legacy ``version``); None when absent.
        name: ``[task].name`` (``org/name``), None when absent.
        metadata: ``[metadata]`` as written (free-form; ``category``, ``difficulty`` and ``tags`` checked).
        agent_timeout_s: ``[agent].timeout_sec`` in seconds (default 600).
        verifier_timeout_s: ``[verifier].timeout_sec`` in seconds (default 600).
        environment: ``[environment]``.
        warnings: one line per key that Harbor's model does not have (ignored, as Harbor ignores it),
            naming the file and the dotted key.
    """

    schema_version: str | None
    name: str | None
    metadata: dict[str, Any]
    agent_timeout_s: float
    verifier_timeout_s: float
    environment: HarborEnvironment
    warnings: tuple[str, ...] = ()


class _Reader:
    """Reads one table of the file, remembering which keys were read so that the rest can be refused."""

    def __init__(
        self, where: str, table: dict[str, Any], dotted: str = "", warnings: list[str] | None = None
    ) -> None:
        self.where, self.table, self.dotted = where, table, dotted
        self.seen: set[str] = set()
        self.warnings: list[str] = warnings if warnings is not None else []

    def key(self, name: str) -> str:
        return f"{self.dotted}.{name}" if self.dotted else name

    def error(self, name: str, why: str) -> TaskError:
        return TaskError(f"{self.where}: field {self.key(name)} {why}")

    def get(self, name: str) -> Any:
        self.seen.add(name)
        return self.table.get(name)

    def sub(self, name: str) -> _Reader:
        value = self.get(name)
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise self.error(name, "must be a table")
        return _Reader(self.where, value, self.key(name), self.warnings)

    def string(self, name: str) -> str | None:
        value = self.get(name)
        if value is not None and not isinstance(value, str):
            raise self.error(name, f"must be a string, got {value!r}")
        return value

    def strings(self, name: str) -> tuple[str, ...]:
        value = self.get(name)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(name, f"must be a list of strings, got {value!r}")
        return tuple(value)

    def seconds(self, name: str, default: float) -> float:
        value = self.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise self.error(name, f"must be a positive number of seconds, got {value!r}")
        if not math.isfinite(value):
            raise self.error(name, f"must be a finite number of seconds, got {value!r}")
        return float(value)

    def count(self, name: str, *, zero: bool = False, whole: bool = True) -> float | None:
        value = self.get(name)
        if value is None:
            return None
        ok = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
        ok = ok and (value >= 0 if zero else value > 0) and (not whole or value == int(value))
        if not ok:
            kind = "whole number" if whole else "number"
            raise self.error(name, f"must be a {kind} {'>= 0' if zero else '> 0'}, got {value!r}")
        return value

    def refuse_if_set(self, name: str, why: str) -> None:
        """Refuse ``name`` unless it is absent or empty (``[]``, ``{}``, ``""``: Harbor's own defaults)."""
        value = self.get(name)
        if value not in (None, [], {}, ""):
            raise self.error(name, f"= {value!r} is not supported: {why}")

    def finish(self) -> None:
        """Warn about every key of the table that no reader looked at: Harbor ignores it, and so does T1."""
        for name in self.table:
            if name not in self.seen:
                self.warnings.append(
                    f"{self.where}: field {self.key(name)} is not a key of Harbor's task model "
                    "(TaskConfig); ignored, as Harbor ignores it"
                )


def parse_size_mb(text: str) -> int:
    """A Harbor size string (``"2G"``, ``"512M"``, ``"2048K"``) in MB, as Harbor's ``_parse_size_to_mb``.

    ``G`` is 1024 MB, ``M`` 1 MB, ``K`` 1/1024 MB (case-insensitive); fractions of a MB are rounded down.

    Raises:
        ValueError: no ``G``/``M``/``K`` suffix, or not a number before it.
    """
    size = text.strip().upper()
    factors = {"G": 1024.0, "M": 1.0, "K": 1.0 / 1024}
    if not size or size[-1] not in factors:
        raise ValueError(f"{text!r} is not a size like '2G', '512M' or '2048K'")
    try:
        number = float(size[:-1])
    except ValueError:
        raise ValueError(f"{text!r} is not a size like '2G', '512M' or '2048K'") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{text!r} must be a positive size")
    return int(number * factors[size[-1]])


def _legacy_size(env: _Reader, legacy: str, modern: str) -> int | None:
    """``memory``/``storage`` mapped onto ``memory_mb``/``storage_mb`` as Harbor maps them."""
    explicit = env.count(modern)
    value = env.get(legacy)
    if value is None:
        return None if explicit is None else int(explicit)
    if not isinstance(value, str):
        raise env.error(legacy, f"must be a size string like '2G' (or use {modern}), got {value!r}")
    try:
        mb = parse_size_mb(value)
    except ValueError as exc:
        raise env.error(legacy, str(exc)) from None
    if explicit is not None and int(explicit) != mb:
        raise env.error(
            legacy,
            f"= {value!r} ({mb} MB) conflicts with {env.key(modern)} = {int(explicit)}; keep one of them",
        )
    return mb


def _network(env: _Reader) -> tuple[str, tuple[str, ...]]:
    """``network_mode`` and ``allowed_hosts``, with the legacy ``allow_internet`` mapped as Harbor maps it."""
    mode = env.string("network_mode")
    hosts_raw = env.get("allowed_hosts")
    allow = env.get("allow_internet")
    if allow is not None and not isinstance(allow, bool):
        raise env.error("allow_internet", f"must be true or false, got {allow!r}")
    if mode is None and hosts_raw:
        mode = "allowlist"  # Harbor: hosts named without a mode ask for an allowlist
    if mode is None:
        mode = "public" if allow is None or hosts_raw is not None else ("public" if allow else "no-network")
    if mode not in NETWORK_MODES:
        raise env.error("network_mode", f"must be one of {', '.join(NETWORK_MODES)}, got {mode!r}")
    hosts = env.strings("allowed_hosts")
    normal = tuple(h.strip().lower().rstrip(".") for h in hosts)
    for host in normal:
        bare = host[2:] if host.startswith("*.") else host
        if not bare or not (_IPV4.match(bare) or all(_HOST_LABEL.match(label) for label in bare.split("."))):
            raise env.error(
                "allowed_hosts", f"entry {host!r} is not a host name, '*.' + host name, or IPv4 address"
            )
    if mode == "allowlist" and not normal:
        raise env.error("allowed_hosts", "must name at least one host when network_mode = 'allowlist'")
    if mode != "allowlist" and hosts_raw is not None:
        raise env.error("allowed_hosts", "is only valid with network_mode = 'allowlist'")
    return mode, normal


def _environment(env: _Reader) -> HarborEnvironment:
    os_name = env.string("os")
    if os_name is not None and os_name.lower() != "linux":
        raise env.error("os", f"= {os_name!r} is not supported: T1's sandboxes run Linux containers only")
    image = env.string("docker_image")
    cpus = env.count("cpus", whole=False)
    gpus = env.count("gpus", zero=True)
    memory_mb = _legacy_size(env, "memory", "memory_mb")
    storage_mb = _legacy_size(env, "storage", "storage_mb")
    mode, hosts = _network(env)
    workdir = env.string("workdir")
    if workdir is not None and not workdir.startswith("/"):
        raise env.error("workdir", f"must be an absolute path, got {workdir!r}")
    env.refuse_if_set("tpu", "T1 has no TPU sandbox")
    env.refuse_if_set("mcp_servers", "T1's agent harness offers no MCP servers")
    env.refuse_if_set("skills_dir", "T1's agent harness has no skills")
    env.refuse_if_set("healthcheck", "T1 runs no healthcheck before the agent")
    env.refuse_if_set(
        "env", "T1 does not resolve host variables into the sandbox; set them in the Dockerfile"
    )
    parsed = HarborEnvironment(
        docker_image=image or None,
        cpus=None if cpus is None else float(cpus),
        memory_mb=memory_mb,
        storage_mb=storage_mb,
        gpus=int(gpus or 0),
        gpu_types=env.strings("gpu_types"),
        network_mode=mode,
        allowed_hosts=hosts,
        build_timeout_s=env.seconds("build_timeout_sec", DEFAULT_BUILD_TIMEOUT_S),
        workdir=workdir,
    )
    env.finish()
    return parsed


def _phase(phase: _Reader, default_timeout_s: float) -> float:
    """``[agent]`` or ``[verifier]``: the timeout is read, per-phase users and network policies refused."""
    timeout = phase.seconds("timeout_sec", default_timeout_s)
    one_user = "T1 runs the agent and the verifier as the sandbox's one unprivileged user"
    phase.refuse_if_set("user", one_user)
    for key in ("network_mode", "allowed_hosts"):
        phase.refuse_if_set(key, "per-phase network policies are not built; set [environment].network_mode")
    return timeout


def _metadata(meta: _Reader) -> dict[str, Any]:
    for key in ("category", "difficulty"):
        value = meta.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise meta.error(key, f"must be a non-empty string, got {value!r}")
    meta.strings("tags")
    return dict(meta.table)  # free-form: Harbor does not interpret it, and neither does T1 beyond the above


def parse_task_config(config: dict[str, Any], where: str) -> HarborConfig:
    """Read a parsed ``task.toml`` as Harbor 0.7+ defines it, refusing by name what T1 does not honour.

    Args:
        config: the file parsed by ``tomllib``.
        where: the file's path, for messages.

    Returns:
        The `HarborConfig`.

    Raises:
        TaskError: a key of the wrong type or value, or a key T1 cannot honour (multi-step ``steps``,
            ``artifacts``, ``[verifier.environment]``, ``[agent].user``, ``[environment].os = "windows"``,
            ...); the message names the file and the dotted key. A key Harbor's model does not have is
            not an error: it is named in ``HarborConfig.warnings``.
    """
    top = _Reader(where, config)
    if top.get("version") is not None and top.get("schema_version") is not None:
        if top.table["version"] != top.table["schema_version"]:
            raise top.error("version", "conflicts with schema_version (version is its legacy name); keep one")
    schema = top.string("schema_version") or top.string("version")
    top.string("source")
    top.refuse_if_set("steps", "multi-step tasks are not built in T1")
    top.refuse_if_set("multi_step_reward_strategy", "multi-step tasks are not built in T1")
    top.refuse_if_set("artifacts", "T1 collects no artifacts; the verifier's /logs/verifier is what it reads")
    task = top.sub("task")
    name = task.string("name")
    task.string("description")
    task.strings("keywords")
    authors = task.get("authors")
    if authors is not None and (
        not isinstance(authors, list) or not all(isinstance(a, dict) and "name" in a for a in authors)
    ):
        raise task.error("authors", "must be a list of tables with a name (and an optional email)")
    task.finish()
    meta = _metadata(top.sub("metadata"))
    agent = top.sub("agent")
    agent_timeout = _phase(agent, DEFAULT_AGENT_TIMEOUT_S)
    agent.finish()
    verifier = top.sub("verifier")
    verifier_timeout = _phase(verifier, DEFAULT_VERIFIER_TIMEOUT_S)
    verifier.refuse_if_set("env", "T1 does not resolve host variables into the verifier; set them in test.sh")
    verifier.refuse_if_set("environment", "a separate verifier container is not built in T1")
    mode = verifier.string("environment_mode")
    if mode not in (None, "shared"):
        raise verifier.error(
            "environment_mode", f"= {mode!r} is not supported: T1 verifies in the agent's sandbox"
        )
    verifier.finish()
    solution = top.sub("solution")
    solution.refuse_if_set("env", "T1 does not resolve host variables into the oracle's sandbox")
    solution.finish()
    environment = _environment(top.sub("environment"))
    top.finish()
    return HarborConfig(
        schema_version=schema,
        name=name,
        metadata=meta,
        agent_timeout_s=agent_timeout,
        verifier_timeout_s=verifier_timeout,
        environment=environment,
        warnings=tuple(top.warnings),
    )
