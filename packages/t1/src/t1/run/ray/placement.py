"""Placement of a Ray run (one bundle per actor in one placement group) and the cluster it starts or joins.

The plan splits the G devices into n for inference and G - n for training (T1 §7,
``plan.inference_devices``). Each role gets its own bundles: one per engine replica
(``runtime.ray.engine_replicas``), one per trainer worker (``runtime.ray.trainer_workers``) and one per
sandbox host (``runtime.ray.sandbox_hosts``). On a CPU box every bundle is one logical CPU; where the
trainer runs on CUDA the G - n training devices are split evenly over its ranks' bundles (one device per
rank or more; the ranks form one process group, `t1.run.ray.trainer_group`). The embedded engine is
co-located by the spec (n = 0), so its replicas stay on CPU bundles. An SGLang replica is the client of one
server joined by URL (``engine.urls[i]``), so its bundle is one CPU too: the server holds the devices;
launching the servers inside the bundles is not built.

`RayCluster.start` starts a local cluster with the dashboard off. On a loaded box the raylet waits a fixed
time (about 18 s, not configurable in ray 2.60) for the dashboard agent to write its port files and aborts
when they are late (raylet "Timed out waiting for file .../metrics_agent_port", or ``metrics_export_port``
or ``dashboard_agent_listen_port``); a Python process importing Ray took 20 s on a 2-core box at load 6.
So the agent ports that Ray lets a caller fix are fixed up front (the raylet then reads them from its
command line), the cluster starts at a raised CPU priority where the driver may raise it
(`STARTUP_PRIORITY_BOOST`, restored once it is up), and the agent and worker registration deadlines are
raised (`AGENT_REGISTER_TIMEOUT_MS`, `WORKER_REGISTER_TIMEOUT_S`). With ``runtime.ray.address`` it joins
that cluster instead and leaves it running.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from t1_spec import Recipe

ROLES = ("engine", "trainer", "sandbox")
"""The roles of a Ray run, in bundle order."""

AGENT_REGISTER_TIMEOUT_MS = 300_000
"""How long the local raylet waits for its agents to register (ms, Ray's ``agent_register_timeout_ms``,
default 30 000): five minutes, so a box whose Python start-up is slow does not abort the cluster."""

WORKER_REGISTER_TIMEOUT_S = 600
"""How long the local raylet waits for a new worker process to register (seconds, Ray's
``worker_register_timeout_seconds``, default 60): an actor's process imports Ray first, which took about 20 s
on a loaded 2-core box; ten minutes keeps such a box from having its actors' workers killed."""

STARTUP_PRIORITY_BOOST = 15
"""Niceness the local cluster's processes start with below the driver's (nice levels), and that the driver's
scheduler autogroup is raised by for the start: the dashboard agent must write its port files before the
raylet's fixed wait (about 18 s) runs out, which on a loaded box it does only with more CPU priority.
Applied only where the driver may raise its priority (root); every process of the cluster is set back to
the driver's niceness, and the autogroup to its own, once the cluster is up, so actors run at normal
priority."""

PLACEMENT_TIMEOUT_S = 300.0
"""Deadline for the placement group to be reserved (seconds); past it the run fails naming the bundles."""


@dataclass(frozen=True)
class Placement:
    """The bundles of one run's placement group, grouped by role.

    Attributes:
        bundles: Ray resource bundles (``{"CPU": 1.0}``, ``{"CPU": 1.0, "GPU": 4.0}``), in role order.
        roles: role name -> indices into ``bundles`` (``engine``, ``trainer``, ``sandbox``).
    """

    bundles: tuple[dict[str, float], ...]
    roles: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def num_cpus(self) -> float:
        """Logical CPUs the group reserves."""
        return sum(b.get("CPU", 0.0) for b in self.bundles)

    @property
    def num_gpus(self) -> float:
        """GPUs the group reserves."""
        return sum(b.get("GPU", 0.0) for b in self.bundles)


def placement_for(recipe: Recipe) -> Placement:
    """The bundles ``recipe`` needs: one per engine replica, trainer worker and sandbox host (T1 §7).

    Args:
        recipe: the recipe (``runtime.ray``, ``plan``, ``engine.device``, ``trainer.device``).

    Returns:
        The `Placement`. Engine bundles hold ``plan.inference_devices / engine_replicas`` GPUs each when the
        embedded engine runs on CUDA and n > 0, else one CPU (an SGLang replica, a client, included); each
        trainer rank's bundle holds ``plan.training_devices / trainer_workers`` GPUs when ``trainer.device``
        is CUDA; sandbox hosts take one CPU each.
    """
    ray_spec, plan = recipe.runtime.ray, recipe.plan
    bundles: list[dict[str, float]] = []
    roles: dict[str, tuple[int, ...]] = {}

    def add(role: str, count: int, bundle: dict[str, float]) -> None:
        start = len(bundles)
        bundles.extend(dict(bundle) for _ in range(count))
        roles[role] = tuple(range(start, len(bundles)))

    engine: dict[str, float] = {"CPU": 1.0}
    # an SGLang replica joined by URL is a client: its server holds the devices, the actor one CPU
    embedded = recipe.engine.kind == "embedded"
    if embedded and recipe.engine.device.startswith("cuda") and plan.inference_devices > 0:
        engine["GPU"] = plan.inference_devices / ray_spec.engine_replicas
    trainer: dict[str, float] = {"CPU": 1.0}
    if recipe.trainer.device.startswith("cuda"):
        trainer["GPU"] = plan.training_devices / ray_spec.trainer_workers
    add("engine", ray_spec.engine_replicas, engine)
    add("trainer", ray_spec.trainer_workers, trainer)
    add("sandbox", ray_spec.sandbox_hosts, {"CPU": 1.0})
    return Placement(bundles=tuple(bundles), roles=roles)


def ray_problems(recipe: Recipe) -> list[str]:
    """What stops ``recipe`` from running on Ray here, one line each (cheap: imports no Ray)."""
    problems = []
    rt = recipe.runtime
    if importlib.util.find_spec("ray") is None:
        problems.append("runtime.kind 'ray': the ray package is not installed (install the t1[ray] extra)")
    if rt.ray.trainer_workers > 1:
        problems += _rank_group_problems(recipe)
    if recipe.engine.kind == "sglang":
        problems += _sglang_problems(recipe)
    elif recipe.engine.device != "cpu":
        problems.append(
            f"engine.device '{recipe.engine.device}': embedded replicas on a GPU are not placed by the "
            "Ray runtime (the embedded engine is co-located, plan.inference_devices 0); set it to cpu"
        )
    # one logical CPU per actor, whatever the engine (placement_for reads embedded engine fields only)
    needed = rt.ray.engine_replicas + rt.ray.trainer_workers + rt.ray.sandbox_hosts
    if rt.ray.address is None and rt.ray.num_cpus is not None and rt.ray.num_cpus < needed:
        # the placement group could never be reserved: the run would wait out PLACEMENT_TIMEOUT_S
        problems.append(
            f"runtime.ray.num_cpus {rt.ray.num_cpus}: the local cluster needs {needed} logical CPUs, "
            "one per actor (engine replicas, trainer workers, sandbox hosts); raise it or set it to null"
        )
    return problems


def _rank_group_problems(recipe: Recipe) -> list[str]:
    """What data-parallel trainer ranks (``runtime.ray.trainer_workers`` > 1) need of ``recipe``."""
    n, problems = recipe.runtime.ray.trainer_workers, []
    head = f"runtime.ray.trainer_workers {n}"
    if recipe.trainer.backend != "torch":
        problems.append(
            f"{head}: data-parallel ranks are built for trainer.backend 'torch' only, not "
            f"'{recipe.trainer.backend}'; set trainer_workers to 1"
        )
    estimator = recipe.ppo.advantage.estimator
    if estimator != "gae":
        problems.append(
            f"{head}: advantage.estimator '{estimator}' over ranks is not built (its groups would be split "
            "across the ranks' shards); use gae or one trainer worker"
        )
    if recipe.rollout.admitted < n:
        problems.append(
            f"{head}: rollout.admitted {recipe.rollout.admitted} samples a step for {n} ranks; every rank "
            "needs at least one sample (raise ppo.batch_size or lower trainer_workers)"
        )
    devices = recipe.plan.training_devices
    if recipe.trainer.device.startswith("cuda") and (devices < n or devices % n):
        problems.append(
            f"{head}: plan.training_devices {devices} do not split evenly into one or more per rank; "
            "make them a multiple of trainer_workers"
        )
    return problems


def _sglang_problems(recipe: Recipe) -> list[str]:
    """What the Ray runtime does not build for ``engine.kind: sglang`` (each replica actor joins one URL)."""
    engine, problems = recipe.engine, []
    if not engine.urls:
        problems.append(
            "engine.kind 'sglang' on Ray with no engine.urls: launching a server inside each replica's "
            "bundle is not built (the bundle would need engine.tp GPUs and the server its base GPU id "
            "within them); start the servers yourself and list them in engine.urls, one per "
            "runtime.ray.engine_replicas, or run runtime.kind embedded, which launches them"
        )
    if engine.weight_sync != "disk":
        problems.append(
            f"engine.weight_sync '{engine.weight_sync}' on Ray: each replica actor publishes to its own "
            "server, and its bundle holds one CPU, so it has no CUDA device for the NCCL broadcast "
            "('distributed') and is not co-located with the server ('tensor'); use engine.weight_sync: "
            "disk with an engine.weights_dir every server reads"
        )
    return problems


def _free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on every interface now (the OS picks them).

    All ``n`` sockets stay bound until every port is chosen, so two agents never get the same port, and they
    bind every interface, since Ray's agents listen on the node's address and not only on the loopback (a
    port taken there made the runtime-env agent exit and the raylet with it).
    """
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(n):
            s = held.enter_context(socket.socket())
            s.bind(("", 0))
            ports.append(int(s.getsockname()[1]))
        return ports


@dataclass
class RayCluster:
    """The Ray cluster of one run: a local one it started (and stops) or a joined one (left running).

    Attributes:
        address: the GCS address the driver is connected to.
        local: whether the run started the cluster (then `stop` kills every process of it).
        node: the local head node (Ray's ``Node``), None when joined.
        pids: process ids of the local cluster's own processes (raylet, GCS, agents), for leak checks.
        start_s: wall time of the start-up, seconds.
    """

    address: str
    local: bool
    node: Any = None
    pids: tuple[int, ...] = ()
    start_s: float = 0.0

    @classmethod
    def start(cls, recipe: Recipe, placement: Placement) -> RayCluster:
        """Start a local cluster sized for ``placement`` or join ``runtime.ray.address``.

        The local head runs with the dashboard off, the registration deadlines raised
        (`AGENT_REGISTER_TIMEOUT_MS`, `WORKER_REGISTER_TIMEOUT_S`), no prestarted workers, the metrics
        agent, metrics export and runtime-env agent ports picked before the start (the raylet reads them
        from its command line instead of waiting for port files) and a raised CPU priority for the start
        (`STARTUP_PRIORITY_BOOST`). Ray's ``Node`` is the class ``ray.init`` itself starts a local head with
        (ray 2.60); ``ray.init`` takes no agent ports, hence the direct use.

        Raises:
            RuntimeError: the local cluster did not start, or ``runtime.ray.address`` is not reachable (the
                address is named).
        """
        import ray

        spec = recipe.runtime.ray
        t0 = time.monotonic()
        if spec.address is not None:
            try:
                ray.init(address=spec.address, log_to_driver=False)
            except Exception as exc:  # ray raises ConnectionError, RuntimeError or its own types
                raise RuntimeError(
                    f"runtime.ray.address {spec.address!r}: cannot join that Ray cluster "
                    f"({type(exc).__name__}: {exc})"
                ) from exc
            return cls(address=spec.address, local=False, start_s=time.monotonic() - t0)

        from ray._private import ray_constants
        from ray._private.node import Node
        from ray._private.parameter import RayParams

        # Under `uv run`, Ray would start every worker through `uv run` in an uploaded copy of the working
        # directory; the local cluster's workers already run this interpreter in this environment.
        os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"
        ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False

        num_cpus = spec.num_cpus if spec.num_cpus is not None else max(1, int(-(-placement.num_cpus // 1)))
        ports = _free_ports(4)
        params = RayParams(
            num_cpus=num_cpus,
            num_gpus=int(placement.num_gpus) if placement.num_gpus else None,
            include_dashboard=False,
            metrics_agent_port=ports[0],
            metrics_export_port=ports[1],
            runtime_env_agent_port=ports[2],
            dashboard_agent_listen_port=ports[3],
            _system_config={
                "agent_register_timeout_ms": AGENT_REGISTER_TIMEOUT_MS,
                "worker_register_timeout_seconds": WORKER_REGISTER_TIMEOUT_S,
                # no idle workers started ahead of the actors: each one imports Ray for nothing
                "prestart_worker_first_driver": False,
                "enable_worker_prestart": False,
            },
        )
        with _startup_priority() as normal:
            try:
                node = Node(
                    params, head=True, shutdown_at_exit=False, spawn_reaper=True, ray_init_cluster=True
                )
            except Exception as exc:
                _kill_session()
                raise RuntimeError(f"runtime.ray: the local Ray cluster did not start ({exc})") from exc
            cluster = cls(address=node.address, local=True, node=node)
            try:
                # the driver joins the head it just started: Ray's "Connecting to existing Ray cluster" (INFO)
                # would read as if another cluster were used, so its INFO lines are off for this join
                ray.init(address=node.address, log_to_driver=False, logging_level=logging.WARNING)
            except BaseException:
                cluster.stop()
                raise
            cluster.pids = _descendants(_node_pids(node))
            if normal is not None:
                for pid in cluster.pids:
                    with contextlib.suppress(OSError):
                        os.setpriority(os.PRIO_PROCESS, pid, normal)
        cluster.start_s = time.monotonic() - t0
        return cluster

    def stop(self) -> None:
        """Disconnect the driver; for a local cluster also kill every process it started (idempotent)."""
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if self.local and self.node is not None:
            node, self.node = self.node, None
            node.kill_all_processes(check_alive=False, allow_graceful=True, wait=True)
            _kill_session()  # agents whose raylet died before them


def _node_pids(node: Any) -> tuple[int, ...]:
    """Process ids of a local Ray node's processes (``Node.all_processes``: raylet, GCS, agents, reaper)."""
    pids = []
    for infos in node.all_processes.values():
        for info in infos:
            proc = getattr(info, "process", None)
            if proc is not None and getattr(proc, "pid", None) is not None:
                pids.append(int(proc.pid))
    return tuple(pids)


@contextlib.contextmanager
def _startup_priority() -> Iterator[int | None]:
    """Raise this process's CPU priority by `STARTUP_PRIORITY_BOOST` for the block, where allowed.

    Both the process's niceness and, where the kernel groups processes by session (``autogroup``, whose
    weight is what counts against other sessions), its session group's niceness are raised, and both are
    put back when the block ends.

    Yields:
        The niceness to restore the cluster's processes to, or None when the priority could not be raised.
    """
    normal = os.getpriority(os.PRIO_PROCESS, 0)
    group = _autogroup_nice()
    try:
        os.setpriority(os.PRIO_PROCESS, 0, normal - STARTUP_PRIORITY_BOOST)
    except OSError:  # not root: start at the normal priority
        yield None
        return
    if group is not None:
        _set_autogroup_nice(group - STARTUP_PRIORITY_BOOST)
    try:
        yield normal
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, normal)
        if group is not None:
            _set_autogroup_nice(group)


def _autogroup_nice() -> int | None:
    """The niceness of this process's scheduler autogroup (``/proc/self/autogroup``), None without one."""
    try:
        with open("/proc/self/autogroup") as f:
            return int(f.read().split("nice")[1])
    except (OSError, IndexError, ValueError):
        return None


def _set_autogroup_nice(value: int) -> None:
    with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as f:
        f.write(str(max(-20, min(19, value))))


def _descendants(roots: tuple[int, ...]) -> tuple[int, ...]:
    """``roots`` and every live process below them (from ``/proc``): the agents the raylet started."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.append(pid)
        todo.extend(children.get(pid, []))
    return tuple(found)


def session_processes(owner: int | None = None) -> tuple[int, ...]:
    """Live processes of the local Ray sessions that process ``owner`` (default: this one) started.

    Ray names a local session ``session_<date>_<time>_<micros>_<driver pid>``; its processes carry that path
    on their command line (GCS, raylet, monitors) or hold files under it open (the agents, which outlive a
    raylet that crashed). Read from ``/proc``.
    """
    import re

    owner = os.getpid() if owner is None else owner
    mark = re.compile(rf"session_\d{{4}}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+_{owner}(?!\d)")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                text = f.read().decode(errors="replace")
            if not mark.search(text):
                fds = f"/proc/{entry}/fd"
                text = " ".join(_readlink(os.path.join(fds, fd)) for fd in os.listdir(fds))
        except OSError:
            continue
        if mark.search(text):
            found.append(int(entry))
    return tuple(found)


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (read from ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def reap(pids: tuple[int, ...] | list[int], *, timeout_s: float = 30.0) -> None:
    """Wait up to ``timeout_s`` for the local processes ``pids`` to exit, then SIGKILL what is left.

    For the actors of a local cluster after the cluster is stopped: a worker notices its raylet is gone
    on its own time, and one that holds a large model can take seconds to exit.
    """
    import signal

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)


def _kill_session() -> None:
    """Kill every process left of this process's local Ray sessions (after a failed start or a stop)."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = session_processes()
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        if not pids:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and session_processes():
            time.sleep(0.2)


def reserve(placement: Placement, *, timeout_s: float = PLACEMENT_TIMEOUT_S) -> Any:
    """Create and wait for the placement group of ``placement`` (strategy ``PACK``).

    Raises:
        RuntimeError: the group was not reserved within ``timeout_s`` (naming the bundles and the cluster's
            resources); the group is removed first.
    """
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group(list(placement.bundles), strategy="PACK", name="")
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        raise RuntimeError(
            f"runtime.ray: the placement group of {len(placement.bundles)} bundles {list(placement.bundles)} "
            f"was not reserved within {timeout_s:.0f} s; the cluster has {ray.cluster_resources()}"
        )
    return group


__all__ = [
    "AGENT_REGISTER_TIMEOUT_MS",
    "ROLES",
    "Placement",
    "ray_problems",
    "RayCluster",
    "alive",
    "placement_for",
    "reap",
    "reserve",
    "session_processes",
]
