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
    single file (``RLIMIT_FSIZE``). When the agent phase ends (no agent process left) the tmpfs grows to twice
    this, so an agent that filled it cannot make the verifier's upload or report fail. At least 1 MiB."""

    cpus: float = Field(default=1.0, gt=0)
    """CPU cores the whole sandbox may use (cores): its cgroup's CFS quota (``cpus`` x 100 ms per 100 ms) and
    ``cpus`` times the default CPU weight, so busy loops in one sandbox cannot starve the others. 1.0: "a
    single core" per sandbox (T1 §7), as ``DockerSandboxSpec.cpus``."""

    network: bool = False
    """Allow network access from inside the sandbox; off so tasks cannot reach out."""


class DockerSandboxSpec(Spec):
    """A Docker container per trial, built from the task's own Dockerfile (``t1_sandbox.docker``).

    Each limit is the most a container gets: a task whose ``task.toml`` ``[environment]`` asks for less
    (``cpus``, ``memory``, ``storage``) gets its own request. Network needs both ``network: true`` here and
    the task's ``allow_internet``; ``build_network: true`` gives it to the image build alone.
    """

    kind: Literal["docker"] = "docker"
    """Discriminator: Docker container."""

    cpus: float = Field(default=1.0, gt=0)
    """CPU cores per container (cores), Docker ``--cpus``. 1.0: "a single core" per sandbox (T1 §7)."""

    memory_mb: int = Field(default=2048, ge=64)
    """Memory limit per container (MiB, ``--memory`` with ``--memory-swap`` equal: no swap); ``/dev/shm``
    pages count. 2048 = Terminal-Bench 2's usual ``memory_mb`` ("a small memory allotment", T1 §7). At least
    64 MiB: the launcher and bash need some before any command runs."""

    pids_limit: int = Field(default=512, ge=8)
    """Processes and threads per container (processes), Docker ``--pids-limit``. At least 8: the launcher,
    bash and a pipeline already need several."""

    disk_mb: int | None = Field(default=10240, ge=1)
    """The container's writable layer (MiB), Docker ``--storage-opt size``: everything the task writes
    (``/app``, ``/tmp``, ``/logs``) together. 10240 = 10 GiB as in evaluation (T1 §6) and TB2's
    ``storage_mb``. Enforced only by storage drivers with quotas (btrfs with quota on, overlay2 over xfs with
    ``pquota``, zfs); preflight refuses a number on any other driver; ``null`` runs without a disk cap (the
task's ``storage`` is then not applied either)."""

    cpu_time_s: float | None = Field(default=None, ge=1)
    """CPU-time limit of each agent process (seconds, ``RLIMIT_CPU``); ``null`` = none (the container's
    ``cpus`` still bounds its share). The verifier's processes get the verifier deadline instead."""

    network: bool = False
    """Attach the bridge network to the trial's container (when the task allows it too): the agent, the
    reference solution and the verifier. Off by default: ``--network none``; the image build too, unless
    ``build_network``."""

    build_network: bool = False
    """Give the image build (``docker build`` of the task's Dockerfile, a stand-in base included) the bridge
    network, whatever ``network`` and the task's ``allow_internet`` say, as Harbor builds: a pool whose
    Dockerfiles ``apt-get``, ``pip install`` or ``git clone`` then builds where the registries (or mirrors)
    are reachable, and its trials still run offline. The trial's container gets the network by ``network``
    alone, never by this field. Off by default: the build has the network exactly when the trial does. The
    image is labelled ``t1.build_network`` and the validation and trial records say it."""

    host: str | None = None
    """Docker daemon address (``DOCKER_HOST`` form); ``None`` = ``DOCKER_HOST`` or the local socket."""

    images: dict[str, str] = Field(default_factory=dict)
    """Base image named by a task (a ``FROM`` line or ``docker_image``) -> local image used in its place,
    e.g. ``python:3.13-slim-bookworm: t1-local/debian:trixie`` where no registry is reachable (air-gapped
    clusters). Each substitution is a stand-in: logged and labelled ``t1.stand_in`` on the image and the
    container. Empty = every base as written (the daemon must have it)."""


class DaytonaSandboxSpec(Spec):
    """A Daytona cloud sandbox per trial, as in the paper (Daytona v0.168.0, T1 §6, §7).

    Built by ``t1_sandbox.daytona`` on the ``daytona`` SDK (the ``daytona`` extra): execs, uploads,
    downloads, the verifier, and the agent's persistent bash on a toolbox PTY session, so ``t1 train`` and
    ``t1 tasks validate`` run on it; creation is paced by ``rollout.creation_rate_per_s`` and
    ``creation_quota_per_min`` (T1 §7.4), and a create refused with HTTP 429 or 5xx is tried again with
    backoff inside the start deadline.
    """

    kind: Literal["daytona"] = "daytona"
    """Discriminator: Daytona cloud sandbox."""

    cpus: int = Field(default=1, gt=0)
    """CPUs per sandbox (vCPUs), the most a sandbox gets (a task's ``[environment] cpus`` below it is used).
    1: "a single core" (T1 §7)."""

    memory_gib: int = Field(default=2, gt=0)
    """Memory per sandbox (GiB), the most a sandbox gets (a task's smaller request is used, its MiB rounded
    up to whole GiB, Daytona's unit). "A small memory allotment" (T1 §7); 2 GiB chosen."""

    disk_gib: int = Field(default=10, gt=0)
    """Disk per sandbox (GiB), the most a sandbox gets (a task's smaller request is used, rounded up
    likewise). 10 GiB as in evaluation (T1 §6)."""

    auto_stop_min: int = Field(default=90, ge=1)
    """Daytona auto-stop interval (minutes without a control or toolbox call). Sent explicitly on every
    create, since the SDK's 15-minute default stops live agents; preflight refuses a value below
    ``rollout.remote_deadline_s`` (a trial is never idle longer than its whole deadline, so such an interval
    never stops a live trial and still stops an orphan). 90 = the 5400 s remote deadline (T1 §7.4), chosen.
    At least 1: 0 would disable auto-stop, so an orphan would run until deleted by hand."""

    auto_delete_min: int = Field(default=0, ge=-1)
    """Daytona auto-delete interval after stop (minutes; 0 = delete at once on stop, -1 = never). 0: deferred
    deletion leaks instances until quota exhaustion, so reclamation is explicit and immediate (T1 §7)."""

    snapshot: str | None = None
    """A Daytona snapshot to create every sandbox from (name or id) instead of the task's image; its own
    resources then apply. ``None``: the task's ``[environment] docker_image`` when it names one, else its
    ``environment/Dockerfile`` (Daytona builds it; harbor_tb.md §4)."""

    network: bool = False
    """Allow network egress from the sandbox; off sends ``network_block_all`` (Harbor's ``no-network``)."""

    target: str | None = None
    """Daytona region/target; ``None`` = the account default (or ``DAYTONA_TARGET``)."""

    api_url: str | None = None
    """Daytona API URL; ``None`` = ``DAYTONA_API_URL`` from the environment, else the SDK's default
    (``https://app.daytona.io/api``)."""

    api_key_env: str = "DAYTONA_API_KEY"
    """Name of the environment variable holding the API key (the key itself never goes into a recipe);
    preflight reports it by name when it is unset."""

    control_timeout_s: float = Field(default=60.0, gt=0)
    """Deadline of every control call that has none of its own (seconds): get, list, delete, the upload and
    download transfers' HTTP part, the grace an exec's HTTP call gets beyond the command's own deadline.
    60 s: the SDK's default request timeout."""


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
"""The sandbox section, selected by ``kind: local | docker | daytona | harbor``; ``local``, ``docker`` and
``daytona`` are built."""
