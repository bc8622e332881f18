"""The task's image for the Docker sandbox: its ``task.toml`` resources, the base-image map, the build.

`task_environment` reads what the sandbox needs of the task's ``[environment]`` table (Harbor's keys:
``cpus``, ``memory`` / ``memory_mb``, ``storage`` / ``storage_mb``, ``network_mode`` / ``allow_internet``,
``docker_image``, ``workdir``).
`resolve_image` picks the image a trial runs: the task's ``docker_image`` when the daemon has it (directly
or through the recipe's ``sandbox.images`` map), else the task's Dockerfile built as written, every ``FROM``
whose base the map names replaced by its target (a stand-in: recorded in `ImageChoice.stand_ins` and in the
image's ``t1.stand_in`` label; what it differs in, read from T1's labels on it, is logged as a warning naming
the task: ``stand_ins.py``). Built images are tagged by a digest of the build context and the
substitutions (`context_digest`: links by their target text, never followed; files streamed), so a task is
built once per daemon. `network_policy` is the one rule of which network the build and the trial's
container get (``sandbox.network``, ``sandbox.build_network``, the task's ``allow_internet``); a built image
says which its build had in its ``t1.build_network`` label (`built_with_network`). Source: Harbor's task
model (``EnvironmentConfig``), the Docker Engine API.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import re
import stat
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from t1_sandbox.base import (
    SandboxError,
    SandboxTimeout,
    UnsupportedDockerfileInstruction,
    format_seconds,
)
from t1_sandbox.docker.stand_ins import check_stand_in
from t1_sandbox.dockerfile import daemon_downloads
from t1_sandbox.unreached import unreached_cause

__all__ = [
    "BUILD_NETWORK_LABEL",
    "ImageChoice",
    "NetworkPolicy",
    "TaskEnvironment",
    "build_failure_cause",
    "build_image",
    "built_with_network",
    "context_digest",
    "ensure_image",
    "map_base",
    "network_policy",
    "resolve_image",
    "task_environment",
]

#: The label of an image T1 built: ``"true"`` when its build reached the network (the bridge network, or an
#: ``ADD <url>``, which the daemon fetches itself whatever the build's network), ``"false"`` when not.
BUILD_NETWORK_LABEL = "t1.build_network"

_COPY_FROM = re.compile(r"^\s*(?:ONBUILD\s+)?(?:COPY|ADD)\s.*?--from=(\S+)", re.IGNORECASE)
_FROM = re.compile(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE)
_NETWORK_HINTS = (
    "Temporary failure resolving",
    "Could not resolve",
    "Network is unreachable",
    "Failed to establish a new connection",
    "Name or service not known",
    "Could not connect to",
    "No route to host",
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STEP = re.compile(r"^Step \d+/\d+ : ", re.MULTILINE)
_STEP_LINE = re.compile(r"^Step (\d+/\d+) : (.*)$", re.MULTILINE)
_EXIT_CODE = re.compile(r"exit code:? (\d+)")
_FAILED_STEP = re.compile(r"The command (?:'/bin/sh -c (.*)'|\[(.*)\]) returned a non-zero code: (\d+)", re.S)


@dataclass(frozen=True)
class TaskEnvironment:
    """What the task asks of its sandbox (``task.toml`` ``[environment]``); ``None``: not said.

    Attributes:
        cpus: CPU cores.
        memory_mb: memory, MiB.
        storage_mb: disk, MiB.
        allow_internet: whether the task may reach the network (Harbor's default: true).
        docker_image: a prebuilt image the task names.
        workdir: the working directory the task names, over the image's (None: the image's).
    """

    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    allow_internet: bool = True
    docker_image: str | None = None
    workdir: str | None = None


def task_environment(environment_dir: Path) -> TaskEnvironment:
    """The ``[environment]`` table of ``environment_dir/../task.toml`` (defaults when there is none).

    Read with ``t1_tasks.harbor.parse_task_config`` (legacy keys mapped as Harbor maps them). Network is
    allowed only under ``network_mode = "public"``: an ``allowlist`` cannot be enforced here, so it gets none.

    Raises:
        SandboxError: the file does not parse or a key is refused (the message names it).
    """
    from t1_tasks.harbor import parse_task_config

    path = Path(environment_dir).parent / "task.toml"
    if not path.is_file():
        return TaskEnvironment()
    try:
        env = parse_task_config(tomllib.loads(path.read_text(encoding="utf-8")), str(path)).environment
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError) as exc:
        raise SandboxError(f"{path}: {exc}") from exc
    return TaskEnvironment(
        cpus=env.cpus,
        memory_mb=env.memory_mb,
        storage_mb=env.storage_mb,
        allow_internet=env.network_mode == "public",
        docker_image=env.docker_image,
        workdir=env.workdir,
    )


@dataclass(frozen=True)
class NetworkPolicy:
    """Which network the image build and the trial's container get (`network_policy`).

    Attributes:
        build: the image build (``docker build``) gets the bridge network.
        trial: the trial's container, and so the agent, the reference solution and the verifier's sealed box
            (made with the container's own host settings), gets it; otherwise ``--network none``.
    """

    build: bool
    trial: bool


def network_policy(*, network: bool, build_network: bool, allow_internet: bool) -> NetworkPolicy:
    """The one rule of the Docker backend's network: which network the build and the trial's container get.

    The trial's container has the network only when the recipe (``sandbox.network``) and the task
    (``allow_internet``: ``network_mode = "public"``) both allow it. The build has it then too, and whenever
    ``sandbox.build_network`` is true, whatever the task says: Harbor builds with the network and applies
    the task's policy to the running container only. Nothing of the build's network reaches the container.

    Args:
        network: the recipe's ``sandbox.network``.
        build_network: the recipe's ``sandbox.build_network``.
        allow_internet: the task's ``TaskEnvironment.allow_internet``.
    """
    trial = network and allow_internet
    return NetworkPolicy(build=build_network or trial, trial=trial)


def built_with_network(labels: dict[str, str] | None) -> bool | None:
    """Whether the image with ``labels`` was built with the bridge network (its `BUILD_NETWORK_LABEL`).

    None when it says nothing: not built by T1 (a task's ``docker_image``), or built before the label.
    """
    return {"true": True, "false": False}.get((labels or {}).get(BUILD_NETWORK_LABEL, ""))


# Registries that serve Docker Hub's official images under the same names (mirrors), as written in FROM lines.
_HUB_MIRRORS = ("docker.io/", "registry-1.docker.io/", "public.ecr.aws/docker/", "mirror.gcr.io/")
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def _hub_name(ref: str) -> str:
    """``ref`` as a Docker Hub name: the mirror registry, ``library/`` and a pinned digest removed."""
    ref = _DIGEST.sub("", ref)
    for mirror in _HUB_MIRRORS:
        ref = ref.removeprefix(mirror)
    return ref.removeprefix("library/")


def map_base(base: str, images: dict[str, str]) -> str | None:
    """The recipe's stand-in for ``base`` (``sandbox.images``), or None.

    An exact key wins; else names are compared as Docker Hub names: ``docker.io/library/``, the official-image
    mirrors (``public.ecr.aws/docker/library/``, ``mirror.gcr.io/``) and a pinned ``@sha256:`` digest are
    ignored, so ``public.ecr.aws/docker/library/debian:bookworm-slim@sha256:...`` (Terminal-Bench 2.1's
    pinned bases) maps as ``debian:bookworm-slim``. The digest cannot hold for a stand-in anyway: the
    substitution records the base as written (`ImageChoice.stand_ins`, the ``t1.stand_in`` label).
    """
    if base in images:
        return images[base]
    short = _hub_name(base)
    for name, target in images.items():
        if _hub_name(name) == short:
            return target
    return None


@dataclass(frozen=True)
class ImageChoice:
    """The image a trial runs and how it was chosen.

    Attributes:
        image: the image reference (a tag or an id) the container is created from.
        source: ``"docker_image"`` (the task's prebuilt image) or ``"dockerfile"`` (built here).
        stand_ins: ``(base the task names, local image used instead)`` for every substituted base.
        built: whether this call built it (False: it was in the daemon already).
        build_network: whether the image's build had the bridge network, read from its label
            (`built_with_network`; None: unknown, not built by T1). A reused image says how it was built then.
    """

    image: str
    source: str
    stand_ins: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    built: bool = False
    build_network: bool | None = None


def _has_image(api: Any, ref: str) -> bool:
    import docker

    try:
        api.inspect_image(ref)
        return True
    except docker.errors.ImageNotFound:
        return False
    except docker.errors.APIError:
        return False


def _rewrite(dockerfile: Path, images: dict[str, str]) -> tuple[str, list[tuple[str, str]], list[str]]:
    """The Dockerfile's text with mapped bases replaced, the substitutions, and the bases left as written."""
    stages: set[str] = set()
    out, swaps, kept = [], [], []
    for number, line in enumerate(dockerfile.read_text(encoding="utf-8").splitlines(), start=1):
        match = _FROM.match(line)
        source = _COPY_FROM.match(line)  # the daemon pulls an image it lacks, whatever the build's network
        if source and source[1].lower() not in stages and not source[1].isdigit():
            kept.append(f"{source[1]} (line {number}, --from)")
        if match:
            head, flags, base, rest = match.groups()
            target = None if base.lower() in stages else map_base(base, images)
            alias = re.search(r"\bAS\s+(\S+)", rest, re.IGNORECASE)
            if alias:
                stages.add(alias[1].lower())
            if target:
                swaps.append((base, target))
                line = f"{head}{flags}{target}{rest}"
            elif base.lower() not in stages and base.lower() != "scratch":
                kept.append(f"{base} (line {number})")
        out.append(line)
    if not swaps and not kept:
        raise UnsupportedDockerfileInstruction(f"{dockerfile}: no FROM instruction")
    return "\n".join(out) + "\n", swaps, kept


def resolve_image(
    api: Any, environment_dir: Path, env: TaskEnvironment, images: dict[str, str]
) -> tuple[ImageChoice | None, str, list[tuple[str, str]], str]:
    """The task's prebuilt image when present, else what to build: ``(choice, dockerfile text, swaps, tag)``.

    Raises:
        SandboxError: no Dockerfile and no usable ``docker_image``, or a base the daemon does not have and
            the map does not name (no registry is assumed reachable).
    """
    if env.docker_image:
        target = map_base(env.docker_image, images)
        for ref in (target, env.docker_image):
            if ref and _has_image(api, ref):
                swaps = ((env.docker_image, ref),) if ref != env.docker_image else ()
                for base, stand_in in swaps:
                    check_stand_in(api, str(environment_dir), base, stand_in)
                return ImageChoice(ref, "docker_image", swaps), "", [], ""
    dockerfile = Path(environment_dir) / "Dockerfile"
    if not dockerfile.is_file():
        raise SandboxError(
            f"{dockerfile}: missing, and the task's docker_image {env.docker_image!r} is not in the daemon"
        )
    inside = os.path.realpath(dockerfile).startswith(os.path.realpath(environment_dir) + os.sep)
    if dockerfile.is_symlink() and not inside:
        raise SandboxError(
            f"{dockerfile}: a link to {os.readlink(dockerfile)}, outside the build context; links outside "
            "the bundle are not followed"
        )
    text, swaps, kept = _rewrite(dockerfile, images)
    absent = sorted({f"{t} (for {b})" for b, t in swaps if not _has_image(api, t)})
    if absent:
        raise SandboxError(
            f"{dockerfile}: stand-in image {', '.join(absent)} named by sandbox.images is not in the Docker "
            "daemon; build it (tools/docker/build_base_images.sh <suite> builds t1-local/debian:<suite>, "
            "tools/docker/build_python_images.sh X.Y-<suite> builds t1-local/python:X.Y-slim-<suite>) or "
            "map the base to an image the daemon has"
        )
    for base, stand_in in swaps:
        check_stand_in(api, str(environment_dir), base, stand_in)  # a warning naming what differs
    missing = [b for b in kept if not _has_image(api, b.split(" (line")[0])]
    if missing:
        raise SandboxError(
            f"{dockerfile}: image {', '.join(missing)} is not in the Docker daemon and no registry is "
            "assumed reachable; map a base in sandbox.images to a local image "
            "(tools/docker/build_base_images.sh builds t1-local/debian:bookworm and t1-local/debian:trixie)"
        )
    digest = context_digest(Path(environment_dir), text)
    # A repository path component is alphanumerics joined by '.', '_', '__' or dashes; dashes alone are safe.
    name = re.sub(r"[^a-z0-9]+", "-", Path(environment_dir).resolve().parent.name.lower()).strip("-")[:100]
    return None, text, swaps, f"t1-task/{name or 'task'}:{digest[:16]}"


_BUILD_LOCKS: dict[str, asyncio.Lock] = {}


async def ensure_image(
    api: Any,
    host: str | None,
    environment_dir: Path,
    env: TaskEnvironment,
    images: dict[str, str],
    *,
    build_network: bool,
    end: float,
) -> tuple[ImageChoice, dict[str, Any]]:
    """The image a trial runs (`resolve_image`), built when the daemon lacks it: ``(choice, its inspection)``.

    A build of one tag runs once per process at a time (a lock per tag); a trial that waited finds it built.
    ``choice.build_network`` is read from the image's label, so a reused image says how it was built.

    Args:
        api: the daemon's ``docker.APIClient``.
        host: the daemon address (None: ``DOCKER_HOST`` or the local socket).
        environment_dir: the task's ``environment/`` (the build context).
        env: the task's ``[environment]`` (`task_environment`).
        images: the recipe's base map (``sandbox.images``).
        build_network: the build gets the bridge network (`NetworkPolicy.build`).
        end: ``time.monotonic()`` deadline of the build, seconds.

    Raises:
        SandboxError, SandboxTimeout: as `resolve_image` and `build_image` do.
    """
    choice, text, swaps, tag = await asyncio.to_thread(resolve_image, api, environment_dir, env, images)
    if choice is None:
        async with _BUILD_LOCKS.setdefault(tag, asyncio.Lock()):
            built = False
            try:
                await asyncio.to_thread(api.inspect_image, tag)
            except Exception:  # not built yet on this daemon
                remaining = max(1.0, end - time.monotonic())
                await asyncio.to_thread(
                    build_image,
                    host,
                    environment_dir,
                    text,
                    tag,
                    swaps,
                    network=build_network,
                    timeout_s=remaining,
                )
                built = True
        choice = ImageChoice(tag, "dockerfile", tuple(swaps), built)
    inspected = await asyncio.to_thread(api.inspect_image, choice.image)
    # a task's own image was not built by T1: a label on it is its author's word, not a record
    labels = (inspected.get("Config") or {}).get("Labels") if choice.source == "dockerfile" else None
    return dataclasses.replace(choice, build_network=built_with_network(labels)), inspected


def context_digest(environment_dir: Path, dockerfile_text: str) -> str:
    """SHA-256 (hex) of the rewritten Dockerfile and the build context, as the daemon receives the context.

    The context is walked without following any link, as the Docker client sends it: a link counts by its
    target text (never by what it points to, which may be a 2 GiB host file, ``/dev/zero`` or a FIFO), a
    regular file by its bytes read in 1 MiB chunks (never whole), and folders, FIFOs, sockets and devices
    not at all. Regular files hash as they always did (path, NUL, bytes), so existing image tags stay valid.

    Args:
        environment_dir: the build context (the task's ``environment/``).
        dockerfile_text: the Dockerfile as built (bases substituted).

    Raises:
        SandboxError: a file of the context cannot be read (names it).
    """
    digest = hashlib.sha256(dockerfile_text.encode())
    entries: list[Path] = []
    for here, dirs, files in os.walk(environment_dir, followlinks=False):
        entries += [Path(here, name) for name in dirs + files]
    for path in sorted(entries):
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            continue  # removed while walking
        rel = str(path.relative_to(environment_dir)).encode()
        if stat.S_ISLNK(mode):
            digest.update(rel + b"\0link\0" + os.fsencode(os.readlink(path)))
        elif stat.S_ISREG(mode):
            digest.update(rel + b"\0")
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
                with open(fd, "rb") as fh:
                    while chunk := fh.read(1 << 20):
                        digest.update(chunk)
            except OSError as exc:
                raise SandboxError(f"{path}: cannot be read for the image's hash: {exc.strerror}") from exc
    return digest.hexdigest()


def build_failure_cause(log: str, error: str) -> str | None:
    """The named cause of a failed build step, read from the daemon's build output, or None when unknown.

    A step that could not reach a host gives ``"<tool>: no network to <host>"`` (``apt-get: no network to
    deb.debian.org``, ``pip: no network to pypi.org``, ``curl: no network to astral.sh``); a ``pip install``
    that the image's Python refuses gives ``"pip: ... externally managed (PEP 668)"`` (a Debian stand-in for
    a ``python:*`` base does that, the python images do not); a missing command gives ``"<cmd>: command not
    found"``. Sources: the messages of apt, pip (urllib3), curl, git, wget and npm; the Docker Engine's
    ``The command '/bin/sh -c ...' returned a non-zero code: N``.

    Only the failed step's output counts (the log after its ``Step N/M :`` line): an earlier step that
    printed a network warning and succeeded (``apt-get update`` does) is not the cause.

    Args:
        log: the build's output up to the failure (the daemon's ``stream`` chunks joined).
        error: the daemon's ``error`` message of the failed step.
    """
    steps = list(_STEP.finditer(log))
    text = log[steps[-1].start() :] if steps else log  # the failed step's output only, not earlier steps'
    text += "\n" + error
    step = _FAILED_STEP.search(error)
    command = (step.group(1) or step.group(2) or "") if step else ""
    if (unreached := unreached_cause(text, command)) is not None:
        return unreached
    if "externally-managed-environment" in text:
        return (
            "pip: the image's Python is externally managed (PEP 668) and refuses pip install (a Debian "
            "stand-in for a python:* base does; the python images do not)"
        )
    missing = re.search(r"(?:/bin/sh: \d+: |bash: )?([\w.+-]+): (?:command )?not found", text)
    if missing:
        return f"{missing.group(1)}: command not found in the image"
    return None


def failed_step(log: str, error: str) -> str:
    """``step N/M `INSTRUCTION`, exit code C`` for a failed build, from what the daemon streamed.

    The step is the last ``Step N/M : ...`` line of ``log`` (the classic builder's progress lines); the exit
    code is the one the daemon's ``error`` gives (``returned a non-zero code: C``, or ``exit code: C``).
    Either part is left out when the output does not say it; ``"an unnamed step"`` when neither does.
    """
    parts = []
    steps = list(_STEP_LINE.finditer(log))
    if steps:
        number, instruction = steps[-1].group(1), steps[-1].group(2).strip()
        shown = instruction if len(instruction) <= 200 else instruction[:200] + "..."
        parts.append(f"step {number} `{shown}`")
    code = _FAILED_STEP.search(error) or _EXIT_CODE.search(error)
    if code is not None:
        parts.append(f"exit code {code.group(code.lastindex or 0)}")
    return ", ".join(parts) if parts else "an unnamed step"


def build_image(
    host: str | None,
    environment_dir: Path,
    text: str,
    tag: str,
    swaps: list[tuple[str, str]],
    *,
    network: bool,
    timeout_s: float,
) -> None:
    """Build ``text`` (the rewritten Dockerfile) over the context ``environment_dir`` as ``tag``; blocking.

    Runs in a worker thread; the daemon's answer is read with ``timeout_s`` as the socket deadline. The
    build's ``RUN`` steps get the bridge network when ``network`` (`NetworkPolicy.build`), else none; the
    image is labelled with it (`BUILD_NETWORK_LABEL`; ``true`` also for an ``ADD <url>``, which the daemon
    downloads itself even under ``--network none``). Docker's layer cache does not key on the network, so
    a build without network takes cached layers only from T1's task images labelled as built without it
    (``cache_from``; never a sealed verifier's commit of an agent's container, which inherits the label): a
    layer that a build with network made, or an agent wrote, never turns up in an image labelled ``false``.

    Raises:
        SandboxTimeout: the build ran past ``timeout_s``.
        SandboxError: a step failed (its output is in the message; a network failure says the build has no
            network).
    """
    import docker

    kwargs = docker.utils.kwargs_from_env() if host is None else {"base_url": host}
    api = docker.APIClient(version="auto", timeout=max(1.0, timeout_s), **kwargs)
    reached = network or daemon_downloads(text)  # ADD <url>: the daemon's own download
    labels = {"t1.image": "task", BUILD_NETWORK_LABEL: "true" if reached else "false"}
    if swaps:
        labels["t1.stand_in"] = ", ".join(f"{a} -> {b}" for a, b in swaps)
    log: list[str] = []
    cache_from = None  # with network: any cached layer (the label then says only that the build had network)
    if not network:
        try:
            offline = api.images(filters={"label": f"{BUILD_NETWORK_LABEL}=false"})
        except docker.errors.APIError as exc:
            api.close()
            raise SandboxError(f"{environment_dir}/Dockerfile: listing offline-built images: {exc}") from exc
        # T1's own task builds only: a sealed verifier's commit inherits the label but holds the agent's
        # files (a RUN of the container's command matched its history); an image T1 did not build says false
        # on its author's word. A name no image has still restricts the cache to the list: no layer at all
        ours = [
            i["Id"]
            for i in offline
            if "t1.sealed" not in (i.get("Labels") or {})
            and any(tag.startswith("t1-task/") for tag in i.get("RepoTags") or ())
        ]
        cache_from = ours or ["t1-no-cache-source"]
    with tempfile.NamedTemporaryFile("w", suffix=".Dockerfile", delete=True) as df:
        df.write(text)
        df.flush()
        try:
            for chunk in api.build(
                path=str(environment_dir),
                dockerfile=df.name,
                tag=tag,
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                labels=labels,
                network_mode="bridge" if network else "none",
                cache_from=cache_from,
                use_config_proxy=False,
            ):
                if "stream" in chunk:
                    log.append(_ANSI.sub("", chunk["stream"]))  # apt colours its stderr
                if "error" in chunk:
                    tail = "".join(log)[-3000:] + chunk["error"]
                    cause = build_failure_cause("".join(log), chunk["error"])
                    hint = f": {cause}" if cause else ""
                    if not network and any(h in tail for h in _NETWORK_HINTS):
                        hint += (
                            " (the build has no network: sandbox.build_network is false, and sandbox.network "
                            "is false or the task disallows it; where a registry or mirror is reachable, "
                            "sandbox.build_network: true builds with it and the trials stay offline)"
                        )
                    where = failed_step("".join(log), chunk["error"])
                    raise SandboxError(
                        f"{environment_dir}/Dockerfile: build failed at {where}{hint}; its last lines:\n"
                        f"{tail.strip()}"
                    )
        except SandboxError:
            raise
        except docker.errors.APIError as exc:
            raise SandboxError(f"{environment_dir}/Dockerfile: build refused: {exc}") from exc
        except Exception as exc:  # the HTTP layer's read timeout or a lost connection
            if "timed out" in str(exc).lower() or "Timeout" in type(exc).__name__:
                raise SandboxTimeout(
                    f"{environment_dir}/Dockerfile: build ran past {format_seconds(timeout_s)}"
                ) from exc
            raise SandboxError(f"{environment_dir}/Dockerfile: build lost the daemon: {exc}") from exc
        finally:
            api.close()
