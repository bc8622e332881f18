"""The local sandbox's seccomp filter: a classic-BPF program that refuses the kernel's escape hatches.

No seccomp bindings are needed: the program is a packed ``struct sock_filter`` array (``<HBBI``: code, jt,
jf, k) that ``bwrap --seccomp FD`` reads from a pipe and installs as the last step before it runs the command,
so bubblewrap's own set-up (mounts, ``pivot_root``, the user namespace) is not filtered and everything the
command and its children do is. The program:

1. loads ``seccomp_data.arch``; a foreign ABI (i386 via ``int 0x80`` on x86_64, arm32 compat on aarch64)
   kills the process, since its syscall numbers differ and would slip past the list;
2. loads ``seccomp_data.nr``; on x86_64 a number with the x32 bit (``0x40000000``) is refused, the same
   syscalls under another numbering;
3. refuses every syscall in `DENIED` with ``EPERM`` (``SECCOMP_RET_ERRNO``), so programs see an ordinary
   permission error and usually carry on; allows everything else.

The list follows Docker's default profile where it matters for a sandbox without capabilities: mounting
and namespaces (``mount``, ``umount2``, ``pivot_root``, ``unshare``, ``setns``, the new mount API), the
kernel keyring (``keyctl``, ``add_key``, ``request_key``), ``bpf`` and ``perf_event_open``, kernel modules
and ``kexec``, process inspection (``ptrace``, ``process_vm_readv/writev``), ``userfaultfd`` and
``io_uring`` (large kernel attack surface), ``open_by_handle_at`` (the classic container escape), swap,
``reboot``, accounting and quotas. ``clone`` is allowed (fork needs it); nested user namespaces through
``clone(CLONE_NEWUSER)`` are refused by ``bwrap --disable-userns`` instead.
"""

from __future__ import annotations

import errno
import platform
import struct

from t1_sandbox.base import SandboxError

__all__ = ["DENIED", "SYSCALL_NUMBERS", "seccomp_program"]

#: Syscalls the filter refuses with EPERM (names; numbers per architecture in `SYSCALL_NUMBERS`).
DENIED = (
    "mount", "umount2", "pivot_root", "unshare", "setns", "fsopen", "fsconfig", "fsmount", "fspick",
    "move_mount", "open_tree", "mount_setattr", "keyctl", "add_key", "request_key", "bpf", "perf_event_open",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "ptrace",
    "process_vm_readv", "process_vm_writev", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "open_by_handle_at", "name_to_handle_at", "swapon", "swapoff", "reboot", "acct",
    "quotactl", "lookup_dcookie", "syslog", "vhangup", "nfsservctl", "settimeofday", "clock_settime",
    "adjtimex", "uselib", "iopl", "ioperm",
)  # fmt: skip

#: Syscall numbers of `DENIED` per ``platform.machine()`` (kernel ``unistd_64.h`` and ``asm-generic``);
#: a name missing for an architecture does not exist there.
SYSCALL_NUMBERS: dict[str, dict[str, int]] = {
    "x86_64": {
        "mount": 165, "umount2": 166, "pivot_root": 155, "unshare": 272, "setns": 308, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
        "mount_setattr": 442, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
        "perf_event_open": 298, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
        "finit_module": 313, "delete_module": 176, "ptrace": 101, "process_vm_readv": 310,
        "process_vm_writev": 311, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "open_by_handle_at": 304, "name_to_handle_at": 303, "swapon": 167,
        "swapoff": 168, "reboot": 169, "acct": 163, "quotactl": 179, "lookup_dcookie": 212, "syslog": 103,
        "vhangup": 153, "nfsservctl": 180, "settimeofday": 164, "clock_settime": 227, "adjtimex": 159,
        "uselib": 134, "iopl": 172, "ioperm": 173,
    },
    "aarch64": {
        "mount": 40, "umount2": 39, "pivot_root": 41, "unshare": 97, "setns": 268, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
        "mount_setattr": 442, "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280,
        "perf_event_open": 241, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
        "finit_module": 273, "delete_module": 106, "ptrace": 117, "process_vm_readv": 270,
        "process_vm_writev": 271, "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "open_by_handle_at": 265, "name_to_handle_at": 264, "swapon": 224,
        "swapoff": 225, "reboot": 142, "acct": 89, "quotactl": 60, "lookup_dcookie": 18, "syslog": 116,
        "vhangup": 58, "nfsservctl": 42, "settimeofday": 170, "clock_settime": 112, "adjtimex": 171,
    },
}  # fmt: skip

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}  # AUDIT_ARCH_X86_64, AUDIT_ARCH_AARCH64
_X32_SYSCALL_BIT = 0x40000000

# classic BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h)
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
_OFFSET_NR, _OFFSET_ARCH = 0, 4  # struct seccomp_data: int nr; __u32 arch; ...

_PROGRAM: dict[str, bytes] = {}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def seccomp_program(machine: str | None = None) -> bytes:
    """The filter for ``machine`` (default: ``platform.machine()``), as ``bwrap --seccomp`` reads it.

    Returns:
        The packed ``struct sock_filter`` array (8 bytes per instruction, native little-endian layout),
        built once per architecture.

    Raises:
        SandboxError: no syscall table for this architecture (the sandbox would run unfiltered; it refuses).
    """
    machine = machine or platform.machine()
    if machine in _PROGRAM:
        return _PROGRAM[machine]
    if machine not in SYSCALL_NUMBERS:
        raise SandboxError(
            f"seccomp filter: no syscall table for architecture {machine!r} "
            f"(known: {sorted(SYSCALL_NUMBERS)}); the local sandbox refuses to run unfiltered"
        )
    numbers = sorted({SYSCALL_NUMBERS[machine][name] for name in DENIED if name in SYSCALL_NUMBERS[machine]})
    deny = _insn(_RET_K, _RET_ERRNO | errno.EPERM)
    allow = _insn(_RET_K, _RET_ALLOW)
    # layout: [arch check (3)] [load nr (1)] [x32 check (1, x86_64)] [one JEQ per number] allow deny
    body = [_insn(_LD_W_ABS, _OFFSET_ARCH), _insn(_JEQ_K, _AUDIT_ARCH[machine], jt=1, jf=0)]
    body += [_insn(_RET_K, _RET_KILL_PROCESS), _insn(_LD_W_ABS, _OFFSET_NR)]
    checks = len(numbers) + (machine == "x86_64")
    if machine == "x86_64":  # jump offsets count the instructions skipped: to `deny` past the rest and allow
        body.append(_insn(_JGE_K, _X32_SYSCALL_BIT, jt=checks, jf=0))
    for i, nr in enumerate(numbers):
        remaining = len(numbers) - i - 1
        body.append(_insn(_JEQ_K, nr, jt=remaining + 1, jf=0))
    program = b"".join([*body, allow, deny])
    _PROGRAM[machine] = program
    return program
