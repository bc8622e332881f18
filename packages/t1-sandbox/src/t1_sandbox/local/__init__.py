"""``LocalSandbox``: a bubblewrap sandbox on this machine (the embedded default, DESIGN.md).

Isolation (T1 §6):

- the host file system is read-only (``/usr`` and ``/etc`` bound read-only, ``/bin /lib /lib64 /sbin`` as
  symlinks); writable are only this sandbox's own host directories bound at the task root (the Dockerfile's
  ``WORKDIR``, Harbor's ``/app``), ``/tmp``, ``/logs``, ``/home/agent`` and, once uploaded, ``/tests`` and
  ``/solution``;
- every namespace is unshared (``--unshare-all``): no network (only a down loopback), own pids, ipc, uts,
  cgroup; nested user namespaces are refused (``--disable-userns``); ``/`` and ``/dev`` are read-only;
- no host privileges: bubblewrap runs under an unprivileged host uid (``200000 + slot``, one per sandbox) in
  a user namespace as uid 1000 with every capability dropped, so uid 0 is not reachable; a seccomp filter
  (``seccomp.py``) refuses mount, namespace, keyring, bpf, ptrace, io_uring, module and similar syscalls;
- aggregate limits per sandbox (``cgroups.py``, ``rootfs.py``): memory_mb for all its processes together,
  tmpfs and ``/dev/shm`` pages included; max_processes tasks; cpus cores of CPU; disk_mb of files in total
  (its directories live on a tmpfs of that size, ``/dev/shm`` on one of 64 MiB). Per-process limits are kept
  as a second line: ``RLIMIT_CPU`` (cpu_time_s), ``RLIMIT_AS`` (memory_mb), ``RLIMIT_FSIZE`` (disk_mb, one
  file) and ``RLIMIT_NPROC`` (max_processes, counted per host uid);
- the verifier toolchain is mounted into the verifier's launch only (``exec_verifier``), and T1's installed
  task bundles (the ``t1-tasks`` wheel's pools) are covered in every launch (``toolchain.py``);
- every exec has a wall-clock deadline; at the deadline its launcher's process group and its pid 1 (found by
  the launch's unique ``argv[0]``) are killed with SIGKILL and, since each exec is its own pid namespace,
  everything it started dies with it;
- ``close`` kills every process of the sandbox's uid and deletes its directories; it runs on ``async with``
  exit (normal, exception, cancellation / Ctrl-C) and, as a last resort, at interpreter exit;
- a cancelled ``exec``/``upload``/``download``/``open_shell`` kills the processes it started before the
  cancellation propagates, at any point (even mid-launch), and never waits for the command.

Each ``exec`` is a fresh ``bwrap`` over the same directories, so files persist across execs but processes do
not (a background job started by an exec dies when the exec returns). The persistent shell is one long-lived
``bwrap`` running an interactive bash on a private pseudo-terminal. Mounts are fixed when a process starts:
``/tests`` uploaded after the agent finished is visible to later execs (the verifier) and never to the agent's
shell.

Limits come from the caller, never from the task: training builds every sandbox from the recipe's ``sandbox``
section (``LocalSandbox.from_spec``: cpu_time_s, memory_mb, max_processes, disk_mb, cpus, network); a sandbox
built without a spec takes ``LocalSandboxSpec``'s defaults, the only home of those defaults. A task's
``task.toml`` ``[environment]`` table (``cpus``, ``memory_mb``, ``storage_mb``, ``network_mode``) is not read
here; of the task only ``environment/`` (its Dockerfile, in the subset ``sandbox/dockerfile.py`` accepts, and
the files it copies) is used. Deadlines are the caller's too (the recipe's ``rollout.agent_deadline_s`` and
``rollout.verifier_deadline_s`` in training), not ``task.toml``'s ``timeout_sec`` values.

Modules, one trade each: ``bwrap.py`` (the ``bwrap`` command line and mounts, host prerequisites),
``toolchain.py`` (the verifier's read-only Python, the bundle masks), ``cgroups.py`` (per-sandbox control
groups), ``rootfs.py`` (the size-limited tmpfs of its files), ``seccomp.py`` (the syscall filter), ``uids.py``
(per-sandbox host uids, ``/proc`` sweeps), ``process.py`` (launch and kill), ``spawner.py`` and ``spawnd.py``
(the small launch server that forks every launch, so the trainer never forks), ``build.py`` (the Dockerfile
build), ``shell.py`` (the persistent shell) and ``sandbox.py`` (``LocalSandbox``, tying them together). What
another backend can reuse lives beside ``base.py`` instead: the Dockerfile parser (``sandbox/dockerfile.py``)
and the tar transfer (``sandbox/transfer.py``).
"""

from t1_sandbox.local.bwrap import bwrap_path, local_sandbox_problems
from t1_sandbox.local.sandbox import LocalSandbox, LocalSandboxOptions
from t1_sandbox.local.shell import LocalShell

__all__ = [
    "LocalSandbox",
    "LocalSandboxOptions",
    "LocalShell",
    "bwrap_path",
    "local_sandbox_problems",
]
