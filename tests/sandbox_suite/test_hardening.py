"""Hardening seen from inside a sandbox: the kernel's escape hatches are closed and nothing of the host leaks.

The attacks: syscalls a sandbox has no business making (mount, keyring, bpf, ptrace, io_uring, ...), nested
user namespaces, host directory names in ``/proc/self/mountinfo``, the verifier toolchain reachable from
the agent's launches, and T1's installed task pools (held-out tests, reference solutions) readable.
"""

from __future__ import annotations

import glob
import platform
import shlex
import shutil
from pathlib import Path

import pytest

# Kernel syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/unistd.h).
SYSCALLS = {
    "x86_64": {
        "mount": 165, "umount2": 166, "pivot_root": 155, "unshare": 272, "setns": 308, "keyctl": 250,
        "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298, "kexec_load": 246,
        "init_module": 175, "finit_module": 313, "delete_module": 176, "ptrace": 101,
        "process_vm_writev": 311, "userfaultfd": 323, "io_uring_setup": 425, "open_by_handle_at": 304,
        "swapon": 167, "reboot": 169,
    },
    "aarch64": {
        "mount": 40, "umount2": 39, "pivot_root": 41, "unshare": 97, "setns": 268, "keyctl": 219,
        "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241, "kexec_load": 104,
        "init_module": 105, "finit_module": 273, "delete_module": 106, "ptrace": 117,
        "process_vm_writev": 271, "userfaultfd": 282, "io_uring_setup": 425, "open_by_handle_at": 265,
        "swapon": 224, "reboot": 142,
    },
}  # fmt: skip
CLONE = {"x86_64": 56, "aarch64": 220}
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17


async def test_dangerous_syscalls_are_refused_with_eperm(make_sandbox, environment_dir):
    table = SYSCALLS.get(platform.machine())
    if table is None:
        pytest.skip(f"no syscall table for {platform.machine()}")
    probe = (
        "import ctypes, errno\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"for name, nr in {sorted(table.items())!r}:\n"
        "    ctypes.set_errno(0)\n"
        "    ret = libc.syscall(nr, 0, 0, 0, 0, 0, 0)\n"
        "    print(name, ret, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))\n"
    )
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=60)
        r = await sb.exec(f"python3 -c {shlex.quote(probe)}", timeout_s=30)
    assert r.ok, r.stderr
    seen = {name: (int(ret), err) for name, ret, err in (line.split() for line in r.stdout.splitlines())}
    assert set(seen) == set(table)
    allowed = {name: v for name, v in seen.items() if v != (-1, "EPERM")}
    assert not allowed, f"not refused with EPERM: {allowed}"


async def test_nested_user_namespaces_are_refused(make_sandbox, environment_dir):
    nr = CLONE.get(platform.machine())
    if nr is None:
        pytest.skip(f"no clone number for {platform.machine()}")
    probe = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"pid = libc.syscall({nr}, {CLONE_NEWUSER | SIGCHLD}, 0, 0, 0, 0)\n"
        "if pid == 0:\n"
        "    os._exit(0)\n"
        "if pid > 0:\n"
        "    os.waitpid(pid, 0)\n"
        "print('clone', pid)\n"
    )
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=60)
        r = await sb.exec(f"python3 -c {shlex.quote(probe)}; unshare -U true && echo unshared", timeout_s=30)
    assert "clone -1" in r.stdout, r.stdout + r.stderr
    assert "unshared" not in r.stdout


async def test_mountinfo_names_no_host_directory(make_sandbox, environment_dir, tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("true\n")
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=60)
        await sb.upload(tests, "/tests", timeout_s=60)
        r = await sb.exec("cat /proc/self/mountinfo", timeout_s=30)
    assert r.ok, r.stderr
    writable = {"/app", "/tmp", "/logs", "/home/agent", "/tests"}
    leaks = []
    for line in r.stdout.splitlines():
        _, _, _, root, point, *_ = line.split()
        # a writable tree is the root of a file system of its own, or sits at its own path in one: the
        # sandbox never learns where on the host its files are
        if point in writable and root not in ("/", point):
            leaks.append(line)
    assert not leaks, "\n".join(leaks)


async def test_only_the_verifier_launch_sees_the_toolchain(make_sandbox, environment_dir):
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=60)
        exports = " ".join(f"{k}={v}" for k, v in sb.verifier_env().items())
        probe = "python3 -c 'import pytest; print(\"pytest\", pytest.__version__)'"
        agent = await sb.exec(probe, timeout_s=30, env=sb.verifier_env())
        shell = await sb.open_shell()
        shell_out = await shell.send(f"{exports} {probe}; echo rc=$?\n", duration_s=10, max_wait_s=20)
        await shell.close()
        verifier = await sb.exec_verifier(probe, timeout_s=60)
    assert not agent.ok and "pytest" not in agent.stdout
    assert "rc=0" not in shell_out and "rc=" in shell_out
    assert verifier.ok and verifier.stdout.startswith("pytest "), verifier.stderr


@pytest.fixture
def installed_pool() -> Path:
    """A ``t1_tasks`` pools directory where a wheel would put it for the system Python (removed after)."""
    sites = sorted(glob.glob("/usr/local/lib/python3*/dist-packages")) or sorted(
        glob.glob("/usr/lib/python3/dist-packages")
    )
    if not sites:
        pytest.skip("no system site directory under /usr to install a fake t1_tasks into")
    package = Path(sites[-1]) / "t1_tasks"
    if package.exists():
        pytest.skip(f"{package} exists (a real install); not touching it")
    solution = package / "pools" / "mini" / "task-x" / "solution" / "solve.sh"
    solution.parent.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    solution.write_text("echo T1-REFERENCE-SOLUTION\n")
    solution.chmod(0o644)
    for d in [package, *package.rglob("*")]:
        if d.is_dir():
            d.chmod(0o755)
    try:
        yield solution
    finally:
        shutil.rmtree(package)


async def test_installed_task_pools_are_unreadable_in_every_launch(
    make_sandbox, environment_dir, installed_pool
):
    read = f"cat {installed_pool}; grep -rl T1-REFERENCE {installed_pool.parents[3]} 2>/dev/null; true"
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=60)
        agent = await sb.exec(read, timeout_s=30)
        verifier = await sb.exec_verifier(read, timeout_s=30)
    for r in (agent, verifier):
        assert "T1-REFERENCE" not in r.stdout, r.stdout
