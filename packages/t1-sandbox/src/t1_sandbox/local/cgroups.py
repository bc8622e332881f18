"""Per-sandbox control groups: the aggregate memory, process and CPU limits of one local sandbox.

Every local sandbox gets one group (`SandboxCgroup`), created at its first launch and removed at reclaim;
every ``bwrap`` launch joins it in the forked child before ``exec`` (`SandboxCgroup.procs_files`, written by
the launch server's child, ``spawnd.py``, while it is still root), so bubblewrap, the command and everything
they start are charged to it. The limits hold for the whole sandbox, not per process:

- memory: ``memory_mb`` MiB for all its processes together, including the tmpfs and ``/dev/shm`` pages
  they write (the kernel charges shared-memory pages to the writer's group) and without swap; past it the
  kernel's OOM killer kills inside the group only;
- processes: ``max_processes`` tasks (``pids.max``);
- CPU: ``cpus`` cores of CFS quota (``cpu.max`` / ``cpu.cfs_quota_us``) and a weight of ``cpus`` times the
  default, so eight busy loops in one sandbox get ``cpus`` cores, not the machine.

The unified hierarchy (cgroup v2) is used where it has the ``memory``, ``pids`` and ``cpu`` controllers;
else the v1 hierarchies of those controllers (one mount each, or ``cpu,cpuacct`` together). Groups live under
``<hierarchy>/t1/`` and are named ``sbx-<owner pid>-<owner start time>-<random>``, so a group whose owner
process died (``kill -9``) is recognised and swept (`sweep_dead_cgroups`, once per process at the first
group it creates) and listed by `leftover_cgroups`. These run as root on the host, outside any sandbox.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from t1_sandbox.base import SandboxError

__all__ = [
    "CgroupHierarchy",
    "SandboxCgroup",
    "cgroup_hierarchy",
    "cgroup_problems",
    "leftover_cgroups",
    "sweep_dead_cgroups",
]

CONTROLLERS = ("memory", "pids", "cpu")
T1_DIR = "t1"  # the parent group of every sandbox group, in each hierarchy
CFS_PERIOD_US = 100_000
_LIVE_GROUPS: set[str] = set()  # names of this process's groups not yet removed
_SWEPT = False


@dataclass(frozen=True)
class CgroupHierarchy:
    """Where sandbox groups are made.

    Attributes:
        version: 2 (unified) or 1.
        parents: ``controller -> <hierarchy mount>/t1``; in v2 every controller maps to the same directory.
    """

    version: int
    parents: dict[str, Path]

    @property
    def roots(self) -> list[Path]:
        """The distinct ``t1`` parent directories (one in v2, one per v1 mount)."""
        return sorted(set(self.parents.values()))


def _mounts() -> list[tuple[str, str, list[str]]]:
    """``(mount point, fs type, options)`` of every cgroup mount in ``/proc/self/mounts``."""
    found = []
    with open("/proc/self/mounts") as fh:
        for line in fh:
            _, point, fstype, options, *_ = line.split()
            if fstype in ("cgroup", "cgroup2"):
                found.append((point.replace("\\040", " "), fstype, options.split(",")))
    return found


def _discover() -> CgroupHierarchy | str:
    """The hierarchy to use, or why there is none (a sentence)."""
    try:
        mounts = _mounts()
    except OSError as exc:
        return f"cannot read /proc/self/mounts ({exc})"
    for point, fstype, _ in mounts:
        if fstype == "cgroup2":
            try:
                available = Path(point, "cgroup.controllers").read_text().split()
            except OSError:
                continue
            if all(c in available for c in CONTROLLERS):
                parent = Path(point) / T1_DIR
                return CgroupHierarchy(version=2, parents=dict.fromkeys(CONTROLLERS, parent))
    parents = {}
    for point, fstype, options in mounts:
        if fstype == "cgroup":
            for controller in CONTROLLERS:
                if controller in options:
                    parents.setdefault(controller, Path(point) / T1_DIR)
    missing = [c for c in CONTROLLERS if c not in parents]
    if missing:
        return (
            f"no cgroup hierarchy with the {', '.join(missing)} controller(s) is mounted (neither the "
            "unified cgroup v2 hierarchy with memory, pids and cpu nor v1 mounts of them)"
        )
    return CgroupHierarchy(version=1, parents=parents)


_HIERARCHY: CgroupHierarchy | str | None = None
_READY_PARENTS: set[Path] = set()  # ``t1`` parents this process has set up (`_ensure_parent`)


def cgroup_hierarchy() -> CgroupHierarchy:
    """The cgroup hierarchy this machine offers (found once per process).

    Raises:
        SandboxError: none is usable (the message says why and how to fix it).
    """
    global _HIERARCHY
    if _HIERARCHY is None:
        _HIERARCHY = _discover()
    if isinstance(_HIERARCHY, str):
        raise SandboxError(
            f"the local sandbox needs cgroups for its per-sandbox memory, process and CPU limits, but "
            f"{_HIERARCHY}; mount them (cgroup v2 at /sys/fs/cgroup with memory, pids and cpu enabled, or v1)"
        )
    return _HIERARCHY


def cgroup_problems() -> list[str]:
    """Why this machine cannot give local sandboxes their aggregate limits, one line each (empty: it can).

    Checks that a hierarchy is mounted and that this process may create groups in it (root, and the
    hierarchy not mounted read-only); creates nothing but the ``t1`` parent directories.
    """
    try:
        hierarchy = cgroup_hierarchy()
    except SandboxError as exc:
        return [str(exc)]
    problems = []
    for root in hierarchy.roots:
        try:
            _ensure_parent(hierarchy, root)
        except OSError as exc:
            problems.append(
                f"cannot create cgroups under {root} ({exc.strerror}); the local sandbox needs root and a "
                "writable cgroup hierarchy for its per-sandbox memory, process and CPU limits"
            )
    return problems


def _ensure_parent(hierarchy: CgroupHierarchy, root: Path) -> None:
    if not root.is_dir():
        root.mkdir(mode=0o755, exist_ok=True)
    if hierarchy.version == 2:  # controllers must be enabled in every ancestor's subtree_control
        for parent in (root.parent, root):
            wanted = " ".join(f"+{c}" for c in CONTROLLERS)
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            if not all(c in enabled for c in CONTROLLERS):
                (parent / "cgroup.subtree_control").write_text(wanted)
    elif root == hierarchy.parents.get("cpu"):  # all sandboxes together keep the weight of every core
        with contextlib.suppress(OSError):
            (root / "cpu.shares").write_text(str(1024 * (os.cpu_count() or 1)))


def _start_time(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (field 22 of ``/proc/<pid>/stat``), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _owner_alive(name: str) -> bool:
    """Whether the process that created group ``name`` (``sbx-<pid>-<start>-<random>``) still runs."""
    parts = name.split("-")
    if len(parts) != 4 or parts[0] != "sbx" or not parts[1].isdigit():
        return False
    return _start_time(int(parts[1])) == parts[2]


def _kill_members(group: Path) -> list[int]:
    """SIGKILL every process listed in ``group``'s ``cgroup.procs``; the pids found."""
    try:
        pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return pids


def _remove_group(group: Path, deadline_s: float) -> bool:
    """Kill the members of ``group`` and remove it, retrying until ``deadline_s``; whether it is gone."""
    end = time.monotonic() + deadline_s
    while True:
        _kill_members(group)
        try:
            group.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:  # EBUSY: a member is still exiting
            if time.monotonic() > end:
                return False
            time.sleep(0.01)


def _groups() -> list[Path]:
    """Every sandbox group directory under the ``t1`` parents of this machine's hierarchy."""
    try:
        hierarchy = cgroup_hierarchy()
    except SandboxError:
        return []
    found = []
    for root in hierarchy.roots:
        with contextlib.suppress(FileNotFoundError):
            found += [p for p in root.iterdir() if p.is_dir() and p.name.startswith("sbx-")]
    return sorted(found)


def leftover_cgroups() -> list[Path]:
    """T1 sandbox groups that should not exist (their owner is dead, or their sandbox was reclaimed).

    A group is a leftover when the process that created it is dead (``kill -9``), or when it is this process
    and the sandbox that made it was reclaimed (its removal failed). Groups of other live T1 processes are
    not listed: they belong to sandboxes still running.
    """
    me = os.getpid()
    left = []
    for group in _groups():
        ours = group.name.startswith(f"sbx-{me}-")
        if (ours and group.name not in _LIVE_GROUPS) or (not ours and not _owner_alive(group.name)):
            left.append(group)
    return left


def sweep_dead_cgroups(deadline_s: float = 2.0) -> list[Path]:
    """Kill the processes of, and remove, every sandbox group whose owner process is dead.

    Returns:
        The groups that could not be removed (a member stuck in uninterruptible sleep).
    """
    stuck = []
    for group in _groups():
        if not group.name.startswith(f"sbx-{os.getpid()}-") and not _owner_alive(group.name):
            if not _remove_group(group, deadline_s):
                stuck.append(group)
    return stuck


class SandboxCgroup:
    """One sandbox's group in every hierarchy that carries one of its controllers.

    Args:
        memory_mb: memory of the whole sandbox, MiB (tmpfs and shared memory included, no swap).
        max_processes: tasks of the whole sandbox (processes and threads).
        cpus: CPU cores of quota (``cpus * 100 ms`` per 100 ms period) and ``cpus`` times the default weight.

    Raises:
        SandboxError: no usable hierarchy, or a group could not be created or limited (names the file).
    """

    def __init__(self, *, memory_mb: int, max_processes: int, cpus: float) -> None:
        global _SWEPT
        self.hierarchy = cgroup_hierarchy()
        if not _SWEPT:
            _SWEPT = True
            sweep_dead_cgroups()
        self.name = f"sbx-{os.getpid()}-{_start_time(os.getpid())}-{secrets.token_hex(4)}"
        self.dirs = [root / self.name for root in self.hierarchy.roots]
        _LIVE_GROUPS.add(self.name)
        try:
            for root, group in zip(self.hierarchy.roots, self.dirs, strict=True):
                if root not in _READY_PARENTS:  # once per process; again if the parent was removed since
                    _ensure_parent(self.hierarchy, root)
                    _READY_PARENTS.add(root)
                try:
                    group.mkdir(mode=0o755)
                except FileNotFoundError:
                    _ensure_parent(self.hierarchy, root)
                    group.mkdir(mode=0o755)
            self._limit(memory_mb * 1024 * 1024, max_processes, cpus)
        except OSError as exc:
            self.remove()
            _READY_PARENTS.clear()  # the next sandbox sets the parents up again
            raise SandboxError(f"cannot set up the sandbox's cgroup {self.name}: {exc}") from exc
        #: the files a launch writes its pid to (the launch server's child, as root, before ``exec``)
        self.procs_files = tuple(str(d / "cgroup.procs") for d in self.dirs)

    def _dir(self, controller: str) -> Path:
        return self.hierarchy.parents[controller] / self.name

    def _limit(self, memory: int, max_processes: int, cpus: float) -> None:
        quota = max(1000, int(cpus * CFS_PERIOD_US))
        mem, pids, cpu = self._dir("memory"), self._dir("pids"), self._dir("cpu")
        if self.hierarchy.version == 2:
            (mem / "memory.max").write_text(str(memory))
            if (mem / "memory.swap.max").exists():
                (mem / "memory.swap.max").write_text("0")
            (pids / "pids.max").write_text(str(max_processes))
            (cpu / "cpu.max").write_text(f"{quota} {CFS_PERIOD_US}")
            (cpu / "cpu.weight").write_text(str(min(10_000, max(1, round(100 * cpus)))))
            return
        (mem / "memory.limit_in_bytes").write_text(str(memory))
        with contextlib.suppress(OSError):  # absent or refused without swap accounting: no swap to limit
            (mem / "memory.memsw.limit_in_bytes").write_text(str(memory))
        (pids / "pids.max").write_text(str(max_processes))
        (cpu / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        (cpu / "cpu.cfs_quota_us").write_text(str(quota))
        (cpu / "cpu.shares").write_text(str(max(2, round(1024 * cpus))))

    def peak_memory_bytes(self) -> int | None:
        """The most memory the group has held so far, bytes (None where the kernel does not say)."""
        name = "memory.peak" if self.hierarchy.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self._dir("memory") / name).read_text())
        except (OSError, ValueError):
            return None

    def pids(self) -> list[int]:
        """The processes in the group now."""
        try:
            return [int(p) for p in (self._dir("pids") / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def remove(self, deadline_s: float = 5.0) -> list[Path]:
        """Kill every process of the group and remove it from every hierarchy (idempotent).

        Returns:
            The group directories that could not be removed before ``deadline_s`` (still listed by
            `leftover_cgroups`).
        """
        _LIVE_GROUPS.discard(self.name)  # a group that outlives this call is a leftover
        return [d for d in self.dirs if not _remove_group(d, deadline_s)]
