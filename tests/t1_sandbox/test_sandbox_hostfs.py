"""Local sandbox, host side: the build, the verifier's folders and the delete never follow a link out of the
sandbox, and reclamation cannot fail (deep trees, mode 000, 200,000 files, cancellations, exit retry)."""

import asyncio
import os
import shutil
import time
from pathlib import Path

import pytest

from t1_sandbox.base import SandboxError
from t1_sandbox.local import LocalSandbox, hostfs, reclaim
from t1_sandbox.local.uids import pids_of_uid

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)

DEEP = (
    "python3 -c \"import os\nfor _ in range(3000): os.mkdir('d'); os.chdir('d')\nopen('f', 'w').write('x')\""
)


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    """A root-owned host folder holding a root-owned file: what a link planted in the sandbox points at."""
    victim = tmp_path / "host"
    victim.mkdir(mode=0o755)
    (victim / "f").write_text("host original\n")
    os.chmod(victim / "f", 0o644)
    return victim


def _env(tmp_path: Path, dockerfile: str, **files: str) -> Path:
    env = tmp_path / "environment"
    env.mkdir(exist_ok=True)
    (env / "Dockerfile").write_text(dockerfile)
    for name, text in files.items():
        (env / name).write_text(text)
    return env


def _untouched(victim: Path) -> None:
    assert (victim / "f").read_text() == "host original\n"
    for path in (victim, victim / "f"):
        st = os.lstat(path)
        assert (st.st_uid, st.st_gid) == (0, 0), f"{path} was chowned to {st.st_uid}"
    assert sorted(p.name for p in victim.iterdir()) == ["f"]


# ---------------------------------------------------------------- the build never writes through a link


@pytest.mark.parametrize(
    "steps",
    [
        "RUN ln -s {host} /app/l\nCOPY f /app/l/f\n",  # file through a linked folder
        "RUN ln -s {host} /app/l\nCOPY f /app/l/\n",
        "RUN ln -s {host} /app/l\nCOPY tree /app/l\n",  # folder contents into a linked folder
        "RUN ln -s {host} /app/l\nWORKDIR /app/l\n",  # the WORKDIR's mkdir and chown
        "RUN ln -s {host} /app/l\nWORKDIR /app/l/sub\n",
        "RUN mkdir /app/a && ln -s {host} /app/a/b\nCOPY f /app/a/b/c/f\n",  # a link mid-path
    ],
)
async def test_a_link_planted_by_run_is_never_followed_by_the_host_side_build(tmp_path, host_dir, steps):
    env = _env(
        tmp_path, "FROM debian:bookworm-slim\nWORKDIR /app\n" + steps.format(host=host_dir), f="evil\n"
    )
    (env / "tree").mkdir()
    (env / "tree" / "f").write_text("evil\n")
    sb = LocalSandbox()
    with pytest.raises(SandboxError, match="symbolic link"):
        await sb.start(env, timeout_s=30)
    _untouched(host_dir)
    assert sb.host_root is None  # the failed build was reclaimed


async def test_copy_over_a_planted_link_replaces_the_link_not_the_host_file(tmp_path, host_dir):
    env = _env(
        tmp_path,
        f"FROM debian:bookworm-slim\nWORKDIR /app\nRUN ln -s {host_dir}/f /app/f\nCOPY f /app/f\n",
        f="copied\n",
    )
    async with LocalSandbox() as sb:
        await sb.start(env, timeout_s=30)
        r = await sb.exec("cat /app/f; stat -c '%u %F' /app/f", timeout_s=10)
    assert r.stdout == "copied\n1000 regular file\n"
    _untouched(host_dir)


async def test_copy_of_a_context_tree_keeps_links_as_links_and_gives_everything_to_the_sandbox(tmp_path):
    env = _env(
        tmp_path, "FROM debian:bookworm-slim\nWORKDIR /app\nCOPY src /app/deep/er/\nCOPY f g /app/two/\n"
    )
    (env / "src" / "sub").mkdir(parents=True)
    (env / "src" / "sub" / "x.txt").write_text("x\n")
    (env / "src" / "link").symlink_to("/etc/hostname")
    (env / "f").write_text("f\n")
    (env / "g").write_text("g\n")
    os.chmod(env / "g", 0o750)
    async with LocalSandbox() as sb:
        await sb.start(env, timeout_s=30)
        r = await sb.exec(
            "cat deep/er/sub/x.txt two/f two/g; readlink deep/er/link; stat -c '%a' two/g; "
            "find /app -not -user 1000 | wc -l",
            timeout_s=10,
        )
    assert r.stdout.split() == ["x", "f", "g", "/etc/hostname", "750", "0"]


# ---------------------------------------------------------------- the verifier's folders


async def test_a_deep_tree_or_a_link_left_at_logs_verifier_does_not_break_stop_agent(tmp_path, host_dir):
    async with LocalSandbox() as sb:
        await sb.start(_env(tmp_path, "FROM debian:bookworm-slim\nWORKDIR /app\n"), timeout_s=30)
        r = await sb.exec(f"cd /logs/verifier && {DEEP} && chmod 000 /logs/verifier/d", timeout_s=60)
        assert r.exit_code == 0, r.stderr
        await sb.stop_agent()  # shutil.rmtree raised RecursionError here
        r = await sb.exec("ls -A /logs/verifier | wc -l; stat -c %u /logs/verifier", timeout_s=10)
        assert r.stdout.split() == ["0", "1000"]
        await sb.exec(f"rmdir /logs/verifier && ln -s {host_dir} /logs/verifier", timeout_s=10)
        await sb.stop_agent()
        r = await sb.exec("test -d /logs/verifier -a ! -L /logs/verifier && echo dir", timeout_s=10)
        assert r.stdout == "dir\n"
    _untouched(host_dir)


# ---------------------------------------------------------------- reclamation cannot fail


def test_remove_tree_is_iterative_follows_no_link_and_fixes_modes(tmp_path, host_dir):
    top = tmp_path / "tree"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for _ in range(3000):  # deeper than the recursion limit and than PATH_MAX
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    os.close(fd)
    (top / "out").symlink_to(host_dir)
    (top / "closed" / "inner").mkdir(parents=True)
    (top / "closed" / "inner" / "f").write_text("x")
    os.chmod(top / "closed" / "inner", 0)
    os.chmod(top / "closed", 0)
    with pytest.raises(RecursionError):
        shutil.rmtree(top)  # what the sandbox used before
    hostfs.remove_tree(top)
    assert not top.exists()
    _untouched(host_dir)
    hostfs.remove_tree(top)  # missing: quiet


async def test_a_3000_deep_directory_is_reclaimed_and_its_slot_works_again(tmp_path):
    env = _env(tmp_path, "FROM debian:bookworm-slim\nWORKDIR /app\n")
    async with LocalSandbox() as sb:
        await sb.start(env, timeout_s=30)
        r = await sb.exec(f"{DEEP} && mkdir -p /tmp/x/y && chmod 000 /tmp/x/y /tmp/x", timeout_s=60)
        assert r.exit_code == 0, r.stderr
        uid, root = sb.uid, sb.host_root
    assert not root.exists() and pids_of_uid(uid) == []
    assert sb not in reclaim.LIVE
    async with LocalSandbox() as again:  # the lowest free slot: the same one, unless another test took it
        await again.start(env, timeout_s=30)
        assert (await again.exec("echo ok", timeout_s=10)).stdout == "ok\n"


async def test_reclaiming_200000_files_keeps_the_event_loop_ticking_and_survives_two_cancellations(tmp_path):
    env = _env(tmp_path, "FROM debian:bookworm-slim\nWORKDIR /app\n")
    sb = LocalSandbox()
    await sb.start(env, timeout_s=30)
    make = (
        "python3 -c \"import os\nfor d in range(200):\n os.mkdir(f'/tmp/m{d}')\n"
        " for i in range(1000): open(f'/tmp/m{d}/{i}', 'w').close()\""
    )
    r = await sb.exec(make, timeout_s=300)
    assert r.exit_code == 0, r.stderr
    root = sb.host_root
    assert sum(len(files) for _, _, files in os.walk(root)) >= 200_000
    gaps = []

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.ensure_future(tick())
    closing = asyncio.ensure_future(sb.close())
    await asyncio.sleep(0.05)
    closing.cancel()  # a first and a second Ctrl-C during the reclaim
    await asyncio.sleep(0.05)
    closing.cancel()
    await asyncio.wait({closing}, timeout=120)
    ticker.cancel()
    assert closing.cancelled(), "the cancellation must propagate once the reclaim is done"
    assert not root.exists(), "a cancelled close left the sandbox's files behind"
    assert sb not in reclaim.LIVE
    assert max(gaps) < 0.5, f"the event loop stalled {max(gaps):.2f} s while the files were deleted"


async def test_a_failed_reclaim_is_kept_and_retried_at_exit(tmp_path, monkeypatch):
    sb = LocalSandbox()
    await sb.start(_env(tmp_path, "FROM debian:bookworm-slim\nWORKDIR /app\n"), timeout_s=30)
    root = sb.host_root
    real = hostfs.remove_tree
    calls = []

    def flaky(path):
        calls.append(path)
        if len(calls) == 1:
            raise OSError(5, "I/O error (injected)")
        real(path)

    monkeypatch.setattr(hostfs, "remove_tree", flaky)
    with pytest.raises(SandboxError, match="cannot delete"):
        await sb.close()
    assert root.exists() and sb in reclaim.LIVE
    reclaim._reclaim_all()  # what atexit runs
    assert not root.exists() and sb not in reclaim.LIVE


def test_the_sandbox_directory_names_its_creating_process(tmp_path):
    async def main() -> Path:
        async with LocalSandbox() as sb:
            await sb.start(_env(tmp_path, "FROM debian:bookworm-slim\nWORKDIR /app\n"), timeout_s=30)
            return sb.host_root

    root = asyncio.run(main())
    prefix, uid, pid = root.name.split("-")[1:4]
    assert (prefix, int(pid)) == ("sbx", os.getpid()) and int(uid) >= 200_000
