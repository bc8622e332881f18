"""Resource attacks from inside a sandbox: each is held to the sandbox's aggregate limits (memory, disk, CPU).

Limits are per sandbox, not per process: many processes each under a per-process limit, files in tmpfs or
``/dev/shm``, many small files and many busy loops must all stay within the spec's ``memory_mb``,
``disk_mb`` and ``cpus``. Sizes are small (a 2-core machine shared with other jobs).
"""

from __future__ import annotations

import pytest

MIB = 1024 * 1024


async def test_many_processes_cannot_hold_more_than_the_sandbox_memory(make_sandbox, environment_dir):
    # 4 x 150 MiB, each under RLIMIT_AS: per-process limits let all four hold it (600 MiB for a 256 MiB box)
    hog = (
        "for i in 1 2 3 4; do python3 -c \"import time; b = b'x' * (150 << 20); time.sleep(3); "
        "open('/tmp/held-$i', 'w').close()\" & done; wait; ls /tmp | grep -c held || true"
    )
    async with make_sandbox(memory_mb=256) as sb:
        await sb.start(environment_dir, timeout_s=60)
        r = await sb.exec(hog, timeout_s=60)
    held = int(r.stdout.split()[-1])
    assert held <= 1, f"{held} processes held 150 MiB each in a 256 MiB sandbox"


async def test_shared_memory_is_capped_by_the_sandbox_memory(make_sandbox, environment_dir):
    # three 200 MiB files in /dev/shm: each under RLIMIT_FSIZE, together 600 MiB
    fill = "for i in 1 2 3; do head -c $((200 << 20)) /dev/zero > /dev/shm/hog$i; done; du -sb /dev/shm"
    async with make_sandbox(memory_mb=256) as sb:
        await sb.start(environment_dir, timeout_s=60)
        r = await sb.exec(fill, timeout_s=60)
    stored = int(r.stdout.split()[0])
    assert stored <= 256 * MIB, f"/dev/shm holds {stored / MIB:.0f} MiB in a 256 MiB sandbox"


async def test_files_in_tmpfs_count_against_the_sandbox_memory(make_sandbox, environment_dir, backend_kind):
    if backend_kind == "docker":
        pytest.skip(
            "does not apply to Docker: /tmp is on the container's disk (its writable layer, capped by "
            "disk_mb), not in memory; its only tmpfs, /dev/shm, is held to the memory limit by "
            "test_shared_memory_is_capped_by_the_sandbox_memory"
        )
    hold = "python3 -c \"b = b'x' * (150 << 20); print('held')\""
    async with make_sandbox(memory_mb=256, disk_mb=1024) as sb:
        await sb.start(environment_dir, timeout_s=60)
        r = await sb.exec("head -c $((200 << 20)) /dev/zero > /tmp/fill && echo filled", timeout_s=60)
        filled = "filled" in r.stdout
        r = await sb.exec(hold, timeout_s=60)
    # 200 MiB of files plus 150 MiB in a process do not fit in 256 MiB, whichever of the two is refused
    assert not (filled and "held" in r.stdout)


async def test_total_disk_is_capped_whatever_the_number_of_files(make_sandbox, environment_dir):
    # ten 20 MiB files, each under RLIMIT_FSIZE (64 MiB), 200 MiB together; 1 MiB of slack for directories
    write = (
        "for i in $(seq 10); do head -c $((20 << 20)) /dev/zero > /app/f$i 2>/dev/null; done; "
        "head -c $((20 << 20)) /dev/zero > /tmp/g 2>/dev/null; du -sb /app /tmp"
    )
    async with make_sandbox(disk_mb=64) as sb:
        await sb.start(environment_dir, timeout_s=60)
        r = await sb.exec(write, timeout_s=60)
    stored = sum(int(line.split()[0]) for line in r.stdout.splitlines())
    assert stored <= 65 * MIB, f"the sandbox stored {stored / MIB:.0f} MiB with disk_mb 64"


async def test_busy_loops_get_the_sandbox_cpu_share_not_the_machine(make_sandbox, environment_dir):
    probe = (
        "import os, signal, time\n"
        "t0 = time.monotonic(); pids = []\n"
        "for _ in range(8):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        os.setsid()\n"  # a session each: no shared autogroup to hold them back
        "        while True: pass\n"
        "    pids.append(pid)\n"
        "time.sleep(3)\n"
        "for p in pids: os.kill(p, signal.SIGKILL)\n"
        "for p in pids: os.waitpid(p, 0)\n"
        "t = os.times(); print((t.children_user + t.children_system) / (time.monotonic() - t0))\n"
    )
    async with make_sandbox(cpus=0.5) as sb:
        await sb.start(environment_dir, timeout_s=60)
        r = await sb.exec(f"python3 -c '{probe}'", timeout_s=60)
    cores = float(r.stdout.split()[-1])
    # the CFS quota allows 0.5 core; scheduler granularity and accounting lag add a few percent
    assert cores <= 0.5 * 1.25 + 0.05, f"8 busy loops used {cores:.2f} cores in a cpus=0.5 sandbox"


@pytest.mark.parametrize("memory_mb", [256])
async def test_a_sandbox_within_its_limits_still_works(make_sandbox, environment_dir, memory_mb):
    async with make_sandbox(memory_mb=memory_mb, disk_mb=64) as sb:
        await sb.start(environment_dir, timeout_s=60)
        r = await sb.exec(
            "python3 -c \"b = b'x' * (100 << 20); print('held')\" && head -c $((30 << 20)) /dev/zero > /app/f"
            " && head -c $((16 << 20)) /dev/zero > /dev/shm/s && echo wrote",
            timeout_s=60,
        )
    assert r.ok and "held" in r.stdout and "wrote" in r.stdout, r.stderr
