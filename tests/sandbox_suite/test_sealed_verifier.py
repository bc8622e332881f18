"""The sealed verifier: what the agent leaves behind cannot reach the verifier's box, on every backend.

The task is ``test_grader_attacks.py``'s (four pytest assertions running the agent's wrong ``/app/prog.py``,
honestly 0 of 4). On Docker the verifier runs as root in a fresh container of the agent's committed
filesystem (``t1_sandbox.docker.sealed``); the local and Daytona backends verify in the agent's own stopped
sandbox (``Sandbox.sealed_verifier``'s default). Each attack leaves processes or files that would make every
case pass or rewrite the report; each must score what the unsolved task scores: 0, finished, or be tagged.
Tests of what only the sealed box gives (root, a fresh container, the report's folder closed to the agent's
uid, reclaiming) run where the backend has one and are skipped elsewhere with that reason.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import textwrap

import pytest

from t1_rollout.attribution import judge_run
from t1_rollout.verify import run_verifier
from t1_spec import DenseRewardSpec

from .test_grader_attacks import FAKE_RUN, N_TESTS, TEST_SH, TESTS_PY, WRONG_PROGRAM, GraderTask

_PYTEST_ARGS = (
    "-p no:cacheprovider --rootdir=/tests --ctrf /logs/verifier/ctrf.json -rA /tests/test_outputs.py"
)
#: Terminal-Bench 2's form: no ``--rootdir``, run in the WORKDIR (pytest looks for its configuration above
#: ``/tests``, which the agent cannot write).
_BARE_ARGS = "-p no:cacheprovider --ctrf /logs/verifier/ctrf.json -rA /tests/test_outputs.py"
_NOT_SEALED = (
    "this backend verifies in the agent's own stopped sandbox as Sandbox.sealed_verifier's default does "
    "(docs/sandboxes.md): no fresh box, no root"
)
#: A forged report: the four real test names, all passing.
FORGED_CTRF = (
    '{"results": {"tool": {"name": "pytest"}, "summary": {"tests": 4, "passed": 4, "failed": 0}, "tests": ['
    + ", ".join(f'{{"name": "test_outputs.py::test_case_{i}", "status": "passed"}}' for i in range(N_TESTS))
    + "]}}"
)


def _test_sh(pre: str = "", args: str = _PYTEST_ARGS) -> str:
    text = TEST_SH.format(pytest="python3 -m pytest", args=args)
    return text.replace("mkdir -p /logs/verifier\n", "mkdir -p /logs/verifier\n" + pre)


async def _verify(make_sandbox, environment_dir, tmp_path, files=None, *, agent="true", test_sh=None):
    """Build; the agent writes ``files`` (path -> text) and runs ``agent``; verify; judge. Also the box id."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text(test_sh or _test_sh())
    (tests / "test_outputs.py").write_text(TESTS_PY)
    task = GraderTask("sealed-attack", tests)
    files = {"/app/prog.py": WRONG_PROGRAM} | (files or {})
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=120)
        for i, (remote, text) in enumerate(files.items()):
            local = tmp_path / f"file-{i}"
            local.write_text(textwrap.dedent(text))
            await sb.upload(local, remote)
        done = await sb.exec(agent, timeout_s=60)
        assert done.exit_code == 0, done.stderr
        host = (await sb.exec("cat /proc/sys/kernel/hostname", timeout_s=30)).stdout.strip()
        run = await run_verifier(sb, task, timeout_s=120, out_dir=tmp_path / "out")
    report, verdict = await judge_run(run, task, DenseRewardSpec())
    return run, report, verdict, host


def _unsolved(run, report, verdict) -> None:
    """What the wrong program scores honestly: every case ran and failed, a real 0, no tag."""
    assert run.error is None, run.error
    assert (report.passed, report.total) == (0, N_TESTS), run.stdout_tail
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0), verdict
    assert not verdict.tampered, verdict.evidence


def _sealed(backend_kind: str) -> None:
    if backend_kind != "docker":
        pytest.skip(_NOT_SEALED)


# ---- processes the agent leaves ---------------------------------------------------------------------------

#: One shell loop that keeps forging the report (and the tests, and a conftest.py the tests would read).
_FORGER = (
    "while :; do mkdir -p /logs/verifier 2>/dev/null; "
    "cp /tmp/forged.json /logs/verifier/ctrf.json 2>/dev/null; "
    "echo 1 > /logs/verifier/reward.txt 2>/dev/null; cp /tmp/forged.json /tests/conftest.py 2>/dev/null; "
    "sleep 0.01; done"
)


async def test_leftover_loops_of_the_agent_do_not_rewrite_the_report(
    make_sandbox, environment_dir, tmp_path, backend_kind
):
    # three ways out of the agent's command: nohup in the background, setsid, a double fork by subshells
    loop = _FORGER.replace("'", "'\\''")
    agent = (
        f"nohup bash -c '{loop}' >/dev/null 2>&1 & "
        f"setsid bash -c '{loop}' >/dev/null 2>&1 < /dev/null & "
        f"( ( bash -c '{loop}' >/dev/null 2>&1 < /dev/null & ) & ); sleep 1; true"
    )
    files = {"/tmp/forged.json": FORGED_CTRF}
    run, report, verdict, _ = await _verify(make_sandbox, environment_dir, tmp_path, files, agent=agent)
    if backend_kind == "daytona" and verdict.tampered:
        # the fake has no pid namespace: a loop that left the session outlives stop_agent there and adds a
        # conftest.py to /tests, which is caught (tests_changed) and scored 0 as tampered, never a pass
        assert {e.check for e in verdict.evidence} <= {"tests_changed", "report_changed"}, verdict.evidence
        assert (verdict.status, verdict.reward.value) == ("finished", 0.0), verdict
        return
    _unsolved(run, report, verdict)


async def test_no_process_of_the_agent_is_alive_when_test_sh_runs(
    make_sandbox, environment_dir, tmp_path, backend_kind
):
    # a process named by a fresh marker; test.sh lists every process it can see and fails when one has it
    marker = f"t1-agent-left-{secrets.token_hex(4)}"
    agent = f"(setsid bash -c 'exec -a {marker} sleep 600' >/dev/null 2>&1 < /dev/null &); sleep 0.5; true"
    probe = (
        f'for f in /proc/[0-9]*/cmdline; do tr "\\0" " " < "$f" 2>/dev/null; echo; done '
        f'| grep -c "^{marker}" '
        '| sed "s/^/agent processes: /"; echo "box: $(cat /proc/sys/kernel/hostname)"\n'
    )
    test_sh = _test_sh(pre=probe)
    run, report, verdict, host = await _verify(
        make_sandbox, environment_dir, tmp_path, agent=agent, test_sh=test_sh
    )
    _unsolved(run, report, verdict)
    assert "agent processes: 0" in run.stdout_tail, run.stdout_tail
    if backend_kind == "docker":  # a fresh container: another host name than the agent's
        assert f"box: {host}" not in run.stdout_tail and "box: " in run.stdout_tail, (host, run.stdout_tail)


# ---- files planted where the verifier's pytest or Python looks --------------------------------------------

_PY = f"python{sys.version_info.major}.{sys.version_info.minor}"
_ADDOPTS = "addopts = -p t1evil\n"
#: Everything the agent can write that a pytest or a Python could read at start: configuration files in the
#: working directory and above it, startup modules, ``.pth`` files in its user site and in a site folder
#: it was given, and ``PYTHONPATH`` / ``PYTEST_ADDOPTS`` in its profile files.
PLANTED = {
    "/app/t1evil.py": FAKE_RUN,
    "/app/conftest.py": FAKE_RUN,
    "/app/pytest.ini": "[pytest]\n" + _ADDOPTS,
    "/app/tox.ini": "[pytest]\n" + _ADDOPTS,
    "/app/setup.cfg": "[tool:pytest]\n" + _ADDOPTS,
    "/app/pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p t1evil"\n',
    "/app/sitecustomize.py": FAKE_RUN,
    "/app/usercustomize.py": FAKE_RUN,
    "/app/t1evil.pth": "import t1evil\n",
    "/home/agent/conftest.py": FAKE_RUN,
    "/home/agent/pytest.ini": "[pytest]\n" + _ADDOPTS,
    f"/home/agent/.local/lib/{_PY}/site-packages/t1evil.py": FAKE_RUN,
    f"/home/agent/.local/lib/{_PY}/site-packages/t1evil.pth": "import t1evil\n",
    f"/home/agent/.local/lib/{_PY}/site-packages/usercustomize.py": FAKE_RUN,
    "/home/agent/.profile": "export PYTHONPATH=/app\nexport PYTEST_ADDOPTS='-p t1evil'\n",
    "/home/agent/.bashrc": "export PYTHONPATH=/app\nexport PYTEST_ADDOPTS='-p t1evil'\n",
    "/home/agent/.bash_profile": "export PYTHONPATH=/app\nexport PYTEST_ADDOPTS='-p t1evil'\n",
    "/tmp/conftest.py": FAKE_RUN,
    "/tmp/sitecustomize.py": FAKE_RUN,
}
#: The agent also tries the folders it should not be able to write (/, /tests' parent, the system's site
#: folders): each write may fail, which is the point.
PLANT_EVERYWHERE = (
    "for d in / /usr/lib/python3/dist-packages /usr/local/lib/python3*/site-packages "
    "/usr/lib/python3*/site-packages /opt/t1/verifier/site-packages; do "
    'cp /app/conftest.py "$d/conftest.py"; cp /app/t1evil.py "$d/t1evil.py"; '
    'cp /app/t1evil.pth "$d/t1evil.pth"; cp /app/sitecustomize.py "$d/sitecustomize.py"; '
    'cp /app/pytest.ini "$d/pytest.ini"; done 2>/dev/null; true'
)


@pytest.mark.parametrize("form", ["rootdir", "bare", "login-shell"])
async def test_files_planted_where_pytest_or_python_loads_them_have_no_effect(
    make_sandbox, environment_dir, tmp_path, form
):
    # rootdir: --rootdir=/tests; bare: Terminal-Bench 2's form; login-shell: test.sh runs pytest through
    # ``bash -l`` (a login shell reads /etc/profile and $HOME/.profile)
    if form == "login-shell":
        # the login shell's /etc/profile sets its own PATH: the verifier's python3 is named by its path
        command = f'py=$(command -v python3); bash -lc "cd /app && $py -m pytest {_BARE_ARGS}"'
        test_sh = TEST_SH.format(pytest=command, args="")
    else:
        test_sh = _test_sh(args=_PYTEST_ARGS if form == "rootdir" else _BARE_ARGS)
    run, report, verdict, _ = await _verify(
        make_sandbox, environment_dir, tmp_path, PLANTED, agent=PLANT_EVERYWHERE, test_sh=test_sh
    )
    _unsolved(run, report, verdict)


async def test_a_site_folder_given_to_the_agent_does_not_load_its_pth_into_pytest(
    make_sandbox, tmp_path, backend_kind
):
    # an image that hands its Python's site folders to the agent's uid (a common shortcut for pip installs
    # without root): the .pth, sitecustomize.py and the plugin the agent puts there stay out of pytest
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nWORKDIR /app\n"
        "RUN mkdir -p /usr/local/lib/python3/dist-packages && for d in /usr/lib/python3/dist-packages "
        '/usr/local/lib/python3*/dist-packages; do [ -d "$d" ] && chown -R 1000:1000 "$d"; done; true\n'
    )
    agent = (
        "for d in /usr/lib/python3/dist-packages /usr/local/lib/python3*/dist-packages; do "
        '[ -w "$d" ] || exit 3; cp /app/t1evil.py /app/t1evil.pth "$d"/ && '
        'cp /app/sitecustomize.py "$d/sitecustomize.py" || exit 4; done'
    )
    files = {k: v for k, v in PLANTED.items() if k.startswith("/app/")}
    if backend_kind == "daytona":
        pytest.skip(
            "the fake builds no Dockerfile RUN step as the image would (no chown of the site folders)"
        )
    async with make_sandbox() as sb:
        await sb.start(env, timeout_s=120)
        given = await sb.exec("[ -w /usr/lib/python3/dist-packages ]", timeout_s=30)
    if not given.ok:
        pytest.skip("this backend keeps the image's system folders read-only for the agent: nothing to plant")
    run, report, verdict, _ = await _verify(make_sandbox, env, tmp_path, files, agent=agent)
    _unsolved(run, report, verdict)


# ---- what only the sealed box gives -----------------------------------------------------------------------


async def test_test_sh_runs_as_root_and_an_apt_get_step_works(
    make_sandbox, environment_dir, tmp_path, backend_kind
):
    # ``apt-get check`` takes dpkg's lock (root only: "are you root?" otherwise) and needs no network; it
    # stands in for Terminal-Bench 2's ``apt-get install``
    _sealed(backend_kind)
    pre = 'echo "verifier uid: $(id -u)"; apt-get check >/dev/null 2>&1 || { echo apt-get failed; exit 1; }\n'
    run, report, verdict, _ = await _verify(
        make_sandbox, environment_dir, tmp_path, test_sh=_test_sh(pre=pre)
    )
    _unsolved(run, report, verdict)
    assert "verifier uid: 0" in run.stdout_tail and "apt-get failed" not in run.stdout_tail, run.stdout_tail


async def test_the_agents_uid_cannot_read_or_write_the_report_folder(
    make_sandbox, environment_dir, tmp_path, backend_kind
):
    # test.sh, as root, asks as the agent's uid (1000) for the report's folder; the agent never ran in the box
    _sealed(backend_kind)
    post = (
        "setpriv --reuid=1000 --regid=1000 --clear-groups bash -c "
        "'ls /logs/verifier >/dev/null 2>&1 && echo AGENT-READ; "
        "echo 1 > /logs/verifier/reward.txt 2>/dev/null "
        "&& echo AGENT-WROTE; echo agent-probe-done'\n"
    )
    test_sh = _test_sh().replace("if [ $? -eq 0 ]", post + "if false")
    run, report, verdict, _ = await _verify(make_sandbox, environment_dir, tmp_path, test_sh=test_sh)
    _unsolved(run, report, verdict)
    assert "agent-probe-done" in run.stdout_tail, run.stdout_tail
    assert "AGENT-READ" not in run.stdout_tail and "AGENT-WROTE" not in run.stdout_tail, run.stdout_tail


async def test_root_in_the_box_cannot_change_the_tests(make_sandbox, environment_dir, tmp_path, backend_kind):
    _sealed(backend_kind)
    pre = (
        "chmod u+w /tests/test_outputs.py 2>/dev/null; echo 'def test_ok(): pass' > /tests/test_outputs.py "
        "2>/dev/null && echo TESTS-WRITTEN; touch /tests/conftest.py 2>/dev/null && echo TESTS-ADDED; "
        "echo tests-probe-done\n"
    )
    run, report, verdict, _ = await _verify(
        make_sandbox, environment_dir, tmp_path, test_sh=_test_sh(pre=pre)
    )
    _unsolved(run, report, verdict)
    assert "tests-probe-done" in run.stdout_tail and "TESTS-" not in run.stdout_tail, run.stdout_tail


async def test_the_reference_solution_runs_as_root(make_sandbox, environment_dir, backend_kind):
    _sealed(backend_kind)
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=120)
        solved = await sb.exec_solution("id -u; apt-get check >/dev/null && echo apt-ok; pwd", timeout_s=60)
        agent = await sb.exec("id -u", timeout_s=30)
    assert solved.ok and solved.stdout.split() == ["0", "apt-ok", "/app"], (solved.stdout, solved.stderr)
    assert agent.stdout.strip() == "1000"


def _containers(host: str | None, run_id: str) -> list[str]:
    from t1_sandbox.docker import client as dc

    return [
        c["Id"][:12] for c in dc.api_client(host).containers(all=True, filters={"label": f"t1.run={run_id}"})
    ]


def _leftovers(host: str | None, run_id: str) -> list[str]:
    """Containers, volumes and images labelled with this test's own run id (what a box leaves behind)."""
    from t1_sandbox.docker import client as dc

    api = dc.api_client(host)
    label = {"label": f"t1.run={run_id}"}
    found = [c["Id"][:12] for c in api.containers(all=True, filters=label)]
    found += [v["Name"] for v in (api.volumes(filters=label).get("Volumes") or [])]
    found += [i["Id"][:19] for i in api.images(filters=label)]
    return found


@pytest.mark.parametrize("ending", ["normal", "failed", "cancelled"])
async def test_the_box_its_image_and_its_tests_volume_are_reclaimed(
    make_sandbox, environment_dir, tmp_path, backend_kind, ending
):
    _sealed(backend_kind)
    run_id = f"t1-sealed-test-{secrets.token_hex(6)}"
    sb = make_sandbox()
    sb.run_id = run_id  # this test's own label: nothing another test made is counted
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("sleep 600\n" if ending == "cancelled" else _test_sh())
    (tests / "test_outputs.py").write_text(TESTS_PY)
    task = GraderTask("sealed-reclaim", tests)
    async with sb:
        await sb.start(environment_dir, timeout_s=120)
        await sb.upload(tmp_path / "tests" / "test_outputs.py", "/app/prog.py")
        if ending == "failed":  # the agent's container is gone under the verifier: an infrastructure error
            from t1_sandbox.docker import client as dc

            await asyncio.to_thread(dc.api_client(sb.host).kill, sb.container_id)
        verifying = asyncio.ensure_future(run_verifier(sb, task, timeout_s=120, out_dir=tmp_path / "out"))
        if ending == "cancelled":
            for _ in range(600):  # until the box runs (two containers of this run), then cancel in test.sh
                await asyncio.sleep(0.05)
                if len(await asyncio.to_thread(_containers, sb.host, run_id)) >= 2:
                    break
            await asyncio.sleep(1.0)
            verifying.cancel()
            with pytest.raises(asyncio.CancelledError):
                await verifying
        else:
            run = await verifying
            assert (run.error is None) == (ending == "normal"), run.error
        during = await asyncio.to_thread(_leftovers, sb.host, run_id)
        assert len(during) == 1, during  # the agent's own container only
    assert await asyncio.to_thread(_leftovers, sb.host, run_id) == []


async def test_a_commit_without_answer_in_time_is_an_infrastructure_failure_and_leaves_nothing(
    make_sandbox, environment_dir, tmp_path, backend_kind, monkeypatch
):
    # 64 MiB written by the agent make the commit take far longer than the 0.05 s allowed here
    _sealed(backend_kind)
    from t1_sandbox.docker import client as dc
    from t1_sandbox.docker import sealed

    monkeypatch.setattr(sealed, "COMMIT_TIMEOUT_S", 0.05)
    run_id = f"t1-sealed-test-{secrets.token_hex(6)}"
    sb = make_sandbox()
    sb.run_id = run_id
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text(_test_sh())
    (tests / "test_outputs.py").write_text(TESTS_PY)
    async with sb:
        await sb.start(environment_dir, timeout_s=120)
        wrote = await sb.exec("head -c 67108864 /dev/urandom > /app/big && echo ok", timeout_s=120)
        assert wrote.stdout.strip() == "ok", wrote.stderr
        task = GraderTask("sealed-commit", tests)
        run = await run_verifier(sb, task, timeout_s=120, out_dir=tmp_path / "o")
        assert run.error is not None and "gave no answer within 0.05 s" in run.error, run.error
        api = dc.api_client(sb.host)
        for _ in range(1200):  # the daemon still finishes the commit it was asked for: wait for its image
            if api.images(filters={"label": f"t1.run={run_id}"}):
                break
            await asyncio.sleep(0.05)
        await asyncio.to_thread(dc.reclaim_run, run_id, sb.host)
    assert await asyncio.to_thread(_leftovers, sb.host, run_id) == []


ROOT_TESTS = """
import os
from pathlib import Path

def test_made_by_root():
    assert Path("/usr/local/share/t1-solved").read_text() == "solved\\n"
    assert os.stat("/usr/local/share/t1-solved").st_uid == 0

def test_verifier_is_root():
    assert os.getuid() == 0
"""


async def test_a_task_whose_oracle_and_test_sh_need_root_validates(
    make_sandbox, environment_dir, tmp_path, backend_kind
):
    # solve.sh writes a system folder and takes dpkg's lock; test.sh too: Harbor's tasks as they are
    _sealed(backend_kind)
    from t1_rollout.validate import validate_task
    from t1_tasks import load_task

    task_dir = tmp_path / "needs-root"
    for d in ("environment", "tests", "solution"):
        (task_dir / d).mkdir(parents=True)
    (task_dir / "task.toml").write_text("[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 120.0\n")
    (task_dir / "instruction.md").write_text("Mark the system solved.\n")
    (task_dir / "environment" / "Dockerfile").write_text((environment_dir / "Dockerfile").read_text())
    pre = "apt-get check >/dev/null || { echo 'apt-get check failed'; exit 1; }\n"
    (task_dir / "tests" / "test.sh").write_text(_test_sh(pre=pre))
    (task_dir / "tests" / "test_outputs.py").write_text(ROOT_TESTS)
    (task_dir / "solution" / "solve.sh").write_text(
        "#!/bin/bash\nset -e\napt-get check\necho solved > /usr/local/share/t1-solved\n"
    )
    result = await validate_task(
        load_task(task_dir), sandbox_factory=make_sandbox, work_dir=tmp_path / "work"
    )
    assert result.problems == [], result
    assert (result.oracle.passed, result.oracle.total) == (2, 2) and result.nop.passed < 2


async def test_a_dead_runs_sweep_takes_the_boxs_image_and_volume_too(
    make_sandbox, environment_dir, tmp_path, backend_kind
):
    # the sweep of a dead run (reclaim_run; the watchdog's reclaim_owner and the start sweep filter the
    # same labels) while a verifier's box is up: its container, tests volume and committed image all go
    _sealed(backend_kind)
    from t1_sandbox.docker import client as dc

    run_id = f"t1-sealed-test-{secrets.token_hex(6)}"
    sb = make_sandbox()
    sb.run_id = run_id
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("sleep 600\n")
    async with sb:
        await sb.start(environment_dir, timeout_s=120)
        async with sb.sealed_verifier(tests, "/tests", timeout_s=60):
            assert (
                len(await asyncio.to_thread(_leftovers, sb.host, run_id)) == 4
            )  # 2 containers, volume, image
            await asyncio.to_thread(dc.reclaim_run, run_id, sb.host)
            assert await asyncio.to_thread(_leftovers, sb.host, run_id) == []
    assert await asyncio.to_thread(_leftovers, sb.host, run_id) == []


async def test_the_box_has_the_agent_containers_limits_network_and_security(
    make_sandbox, environment_dir, tmp_path, backend_kind
):
    _sealed(backend_kind)
    from t1_sandbox.docker import client as dc

    keys = (
        "NetworkMode", "Memory", "MemorySwap", "NanoCpus", "PidsLimit", "StorageOpt", "CapDrop", "CapAdd",
        "SecurityOpt", "Tmpfs",
    )  # fmt: skip
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("true\n")
    async with make_sandbox() as sb:
        await sb.start(environment_dir, timeout_s=120)
        api = dc.api_client(sb.host)
        agent = (await asyncio.to_thread(api.inspect_container, sb.container_id))["HostConfig"]
        async with sb.sealed_verifier(tests, "/tests", timeout_s=60) as box:
            assert box.container_id != sb.container_id
            seen = (await asyncio.to_thread(api.inspect_container, box.container_id))["HostConfig"]
            ifaces = await box.exec("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", timeout_s=30)
    assert {k: seen.get(k) for k in keys} == {k: agent.get(k) for k in keys}
    assert agent["NetworkMode"] == "none" and ifaces.stdout.split() == ["lo"], ifaces
    assert "no-new-privileges" in seen["SecurityOpt"] and seen["CapDrop"] == ["ALL"]
