"""Sandboxes: where the agent's shell commands and the verifier run (T1 §7)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from t1_spec._base import Spec

ResourceValue = str | int | float | bool


class LocalSandboxSpec(Spec):
    """A local process sandbox (bubblewrap) on this machine: the embedded default."""

    kind: Literal["local"] = "local"
    """Discriminator: local bubblewrap sandbox."""

    cpu_time_s: float = Field(default=60.0, ge=1)
    """CPU-time limit per command (seconds, ``RLIMIT_CPU``). At least 1 s: the kernel counts ``RLIMIT_CPU`` in
    whole seconds, and bubblewrap and the shell spend CPU before the command itself starts."""

    memory_mb: int = Field(default=1024, ge=64)
    """Memory of the whole sandbox (MiB): its cgroup's limit over all its processes together, including the
    pages of its files (they live on a tmpfs) and of ``/dev/shm``, without swap; past it the kernel's OOM
    killer kills inside the sandbox. Also the address-space limit of each process (``RLIMIT_AS``), a second
    line. At least 64 MiB: the limit also binds bubblewrap and the shell, and below a few tens of MiB they
    cannot map libc and every command fails before it runs."""

    max_processes: int = Field(default=128, ge=8)
    """Processes and threads of the whole sandbox (processes): its cgroup's ``pids.max`` and ``RLIMIT_NPROC``
    (counted per host uid, one per sandbox). At least 8: bubblewrap, the shell and a simple pipeline already
    need several."""

    disk_mb: int = Field(default=512, ge=1)
    """Total size of the sandbox's files (MiB): its writable trees (task root, ``/tmp``, ``/logs``, the home,
    ``/tests``) live on one tmpfs of this size, so writes past it fail with ``ENOSPC`` and nothing reaches the
    host disk. What the sandbox's processes write there also counts against ``memory_mb``. Also the largest
    single file (``RLIMIT_FSIZE``). At least 1 MiB."""

    cpus: float = Field(default=1.0, gt=0)
    """CPU cores the whole sandbox may use (cores): its cgroup's CFS quota (``cpus`` x 100 ms per 100 ms) and
    ``cpus`` times the default CPU weight, so busy loops in one sandbox cannot starve the others. 1.0: "a
    single core" per sandbox (T1 §7), as ``DockerSandboxSpec.cpus``."""

    network: bool = False
    """Allow network access from inside the sandbox; off so tasks cannot reach out."""


class DockerSandboxSpec(Spec):
    """A Docker container per trial, built from the task's environment.

    Not built yet: the section validates, but no Docker sandbox exists and ``t1 train`` refuses
    ``kind: docker``; use ``kind: local``.
    """

    kind: Literal["docker"] = "docker"
    """Discriminator: Docker container."""

    cpus: float = Field(default=1.0, gt=0)
    """CPU cores per container (cores), Docker ``--cpus``."""

    memory_mb: int = Field(default=2048, gt=0)
    """Memory limit per container (MiB, ``--memory``)."""

    pids_limit: int = Field(default=512, gt=0)
    """Process limit per container (processes), Docker ``--pids-limit``."""

    network: bool = False
    """Attach a network to the container; off by default."""

    host: str | None = None
    """Docker daemon address (``DOCKER_HOST`` form); ``None`` = the local default."""


class DaytonaSandboxSpec(Spec):
    """A Daytona cloud sandbox per trial, as in the paper (Daytona v0.168.0, T1 §6, §7).

    Not built yet: the section validates (the production recipe declares it), but no Daytona client exists
    and ``t1 train`` refuses ``kind: daytona``; use ``kind: local``.
    """

    kind: Literal["daytona"] = "daytona"
    """Discriminator: Daytona cloud sandbox."""

    cpus: int = Field(default=1, gt=0)
    """CPUs per sandbox (vCPUs). 1: "a single core" (T1 §7)."""

    memory_gib: int = Field(default=2, gt=0)
    """Memory per sandbox (GiB). "A small memory allotment" (T1 §7); 2 GiB chosen."""

    disk_gib: int = Field(default=10, gt=0)
    """Disk per sandbox (GiB). 10 GiB as in evaluation (T1 §6)."""

    auto_stop_min: int = Field(default=90, ge=0)
    """Daytona auto-stop interval (minutes of inactivity; 0 = never). 90 = the 5400 s remote deadline, chosen.
    """

    auto_delete_min: int = Field(default=0, ge=-1)
    """Daytona auto-delete interval after stop (minutes; 0 = delete at once on stop, -1 = never). 0: deferred
    deletion leaks instances until quota exhaustion, so reclamation is explicit and immediate (T1 §7)."""

    target: str | None = None
    """Daytona region/target; ``None`` = the account default. Credentials come from the environment."""


class HarborSandboxSpec(Spec):
    """Any Harbor environment (``harbor.environments``) behind the T1 ``Sandbox`` interface.

    Not built yet: the section validates, but no Harbor adapter exists and ``t1 train`` refuses
    ``kind: harbor``; use ``kind: local``.
    """

    kind: Literal["harbor"] = "harbor"
    """Discriminator: adapter over a Harbor environment."""

    environment: str
    """Harbor environment type, e.g. ``"docker"``, ``"daytona"``, ``"modal"`` (Harbor v0.7.0, T1 §6)."""

    options: dict[str, ResourceValue] = Field(default_factory=dict)
    """Extra keyword arguments passed to the Harbor environment unchanged."""


SandboxSpec = Annotated[
    LocalSandboxSpec | DockerSandboxSpec | DaytonaSandboxSpec | HarborSandboxSpec, Field(discriminator="kind")
]
"""The sandbox section, selected by ``kind: local | docker | daytona | harbor``; only ``local`` is built."""
