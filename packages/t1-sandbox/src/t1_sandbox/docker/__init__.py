"""``DockerSandbox``: one Docker container per trial, built from the task's own Dockerfile (DESIGN.md).

Isolation (T1 §6):

- the image is the task's: its Dockerfile built as written by the daemon (a base the recipe maps in
  ``sandbox.images`` is replaced by its local stand-in, recorded in the image's and container's
  ``t1.stand_in`` label and logged), or the task's ``docker_image`` when the daemon has it;
- the agent's and the verifier's processes run as uid 1000 with no capabilities and no-new-privileges; the
  container's root keeps only what T1's own control execs need (chown, file ownership, kill, setuid); a
  seccomp profile refuses the local sandbox's list of syscalls (mount, namespaces, keyring, bpf, ptrace,
  io_uring, modules, ...) and nested user namespaces (``seccomp_profile``);
- limits per container: ``cpus`` (CFS quota), ``memory_mb`` (no swap; ``/dev/shm`` pages count),
  ``pids_limit`` and ``disk_mb`` (the writable layer's quota, where the storage driver enforces one: btrfs
  with quota, overlay2 over xfs with pquota, zfs; `preflight` refuses a ``disk_mb`` the driver cannot
  enforce), each the task's ``task.toml`` request capped by the recipe's value; ``cpu_time_s`` per process
  when set;
- network only when both the recipe (``network: true``) and the task (``allow_internet``) allow it; otherwise
  ``--network none``, for the agent, the reference solution and the verifier alike; the image build gets it
  then too, and also under ``build_network: true`` (``images.network_policy``, the one rule);
- the verifier toolchain (this host's Python with pytest, pytest-json-ctrf, ``uv``) is a read-only volume
  that only the verifier's launch can enter (its group); held-out tests are uploaded by root, read-only,
  after every agent process was killed (``stop_agent``);
- every launch runs under ``t1run.py``, a child subreaper: what a command starts dies with it, at its exit or
  at its deadline, double forks included; every control call has a deadline;
- ``close`` removes the container (processes, files, anonymous volumes), also on an exception or a
  cancellation (waited for through repeated Ctrl-C), and at interpreter exit as a last resort; containers
  carry ``t1.run`` / ``t1.pid`` labels, and the first sandbox of a process removes those of dead owners on
  this host (a ``kill -9``); ``DockerSandbox.reclaim(run_id)`` removes one run's.

Modules, one trade each: ``client.py`` (daemon client, labels, sweeps, the disk-cap check), ``images.py``
(``task.toml`` resources, the base map, the build), ``toolchain.py`` (the verifier volume), ``stream.py``
(one exec's socket), ``shell.py`` (the persistent shell), ``t1run.py`` (the launcher, run inside the
container), ``sandbox.py`` (``DockerSandbox``).
"""

from t1_sandbox.docker.sandbox import DockerSandbox
from t1_sandbox.docker.shell import DockerShell

__all__ = ["DockerSandbox", "DockerShell"]
