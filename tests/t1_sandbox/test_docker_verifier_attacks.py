"""Attacks on the Docker verifier's ``pytest`` handover, as the agent (uid 1000) would make them.

The toolchain's ``pytest`` command hands over to the image's ``pytest`` only when only root can change what
that ``pytest`` runs at start (``t1_sandbox.docker.handover``). Each test builds an image with a plausible
mistake of its author, lets the agent plant files during its phase, and checks that the verifier still runs
the real test (1 failing test: 0 of 1), not the agent's forged report (1 of 1, written as root).
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from t1_spec import load_recipe

REPO = Path(__file__).resolve().parents[2]
TINY_DOCKER = REPO / "recipes" / "tiny-docker.yaml"
pytestmark = pytest.mark.docker

_FORGED = (
    '{"results": {"tool": {"name": "pytest"}, "summary": {"tests": 1, "passed": 1, "failed": 0}, '
    '"tests": [{"name": "test_outputs.py::test_fails", "status": "passed", "duration": 1}]}}'
)
#: Python that writes the forged report and ends the process, as root in the verifier.
_FORGE = f"import os\nopen('/logs/verifier/ctrf.json', 'w').write({_FORGED!r})\nos._exit(0)\n"
#: The image's own ``pytest`` script, as pip writes it for the Debian Python.
_PYTEST_SCRIPT = (
    "printf '#!/usr/bin/python3\\nimport sys\\nfrom pytest import console_main\\n"
    "sys.exit(console_main())\\n' > /usr/local/bin/pytest && chmod 0755 /usr/local/bin/pytest"
)


async def _verify(tmp_path: Path, dockerfile: str, files: dict[str, str], attack: str, before: str = ""):
    """Build a task of ``dockerfile``, run ``attack`` as the agent with ``files`` in ``/app``, then verify.

    ``before``: lines of ``test.sh`` ahead of its ``pytest``.

    Returns:
        ``(report, run)``: the parsed report of the verifier's run and the run itself.
    """
    from t1_reward import read_report
    from t1_rollout.verify import run_verifier
    from t1_sandbox.docker import DockerSandbox
    from t1_sandbox.docker import client as dc
    from t1_tasks import load_pool

    recipe = load_recipe(TINY_DOCKER)
    if problems := DockerSandbox.preflight(recipe):
        pytest.skip("; ".join(problems))
    root = tmp_path / "pool" / "attack"
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text('version = "1.0"\n\n[verifier]\ntimeout_sec = 300.0\n')
    (root / "instruction.md").write_text("Nothing to do.\n")
    (root / "environment" / "Dockerfile").write_text(dockerfile)
    (root / "environment" / "token").write_text(secrets.token_hex(8))  # a fresh image
    (root / "tests" / "test.sh").write_text(
        f"#!/bin/bash\n{before}pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA\n"
    )
    (root / "tests" / "test_outputs.py").write_text("def test_fails():\n    assert False\n")
    task = load_pool(root.parent, strict=False).get("attack")
    sb = DockerSandbox.from_spec(recipe.sandbox)
    try:
        async with sb:
            await sb.start(task.environment_dir, timeout_s=600)
            for name, text in files.items():
                plant = tmp_path / name.replace("/", "_")
                plant.write_text(text)
                await sb.upload(plant, f"/app/{name}")
            done = await sb.exec(attack, timeout_s=120)  # the agent, uid 1000
            assert done.ok, done.stderr
            run = await run_verifier(sb, task, timeout_s=300, out_dir=tmp_path / "out")
    finally:
        if sb.choice is not None:
            dc.api_client(None).remove_image(sb.choice.image, force=True)
    report = read_report(run.out_dir, timed_out=run.timed_out, crashed=run.crashed)
    return report, run


def _real_test_failed(report, run) -> None:
    """The verifier ran the task's own failing test: its ctrf report says 0 of 1, pytest's session printed."""
    assert (report.source, report.passed, report.total) == ("ctrf", 0, 1), run.stdout_tail
    assert "test session starts" in run.stdout_tail


async def test_an_editable_install_of_the_agents_folder_does_not_hand_over(tmp_path):
    """The image installed its project in ``/app`` editable (``pip install -e .``: a root-owned ``.pth`` in
    the site folder naming ``/app/src``), and ``/app`` is the agent's. The site folder is all root's, but
    its ``.pth`` puts the agent's folder on the image's Python's path: a ``pytest11`` entry point left there
    is loaded by the image's pytest as root before any test, and forged 1 of 1."""
    dockerfile = (
        "FROM debian:bookworm-slim\nWORKDIR /app\n"
        f"RUN {_PYTEST_SCRIPT} "
        "&& echo /app/src > /usr/lib/python3/dist-packages/__editable__.app-0.1.pth\n"
    )
    files = {"t1evil.py": _FORGE, "entry_points.txt": "[pytest11]\nt1evil = t1evil\n"}
    attack = (
        "mkdir -p /app/src/t1evil-0.1.dist-info && mv /app/t1evil.py /app/src/ "
        "&& mv /app/entry_points.txt /app/src/t1evil-0.1.dist-info/ "
        "&& printf 'Metadata-Version: 2.1\\nName: t1evil\\nVersion: 0.1\\n' "
        "> /app/src/t1evil-0.1.dist-info/METADATA"
    )
    report, run = await _verify(tmp_path, dockerfile, files, attack)
    _real_test_failed(report, run)


async def test_a_root_owned_pytest_whose_python_reads_a_site_folder_of_the_agents_is_not_run(tmp_path):
    """The image's ``pytest`` is root's, but its Python's site folder is the agent's (a shortcut for pip
    installs without root): a ``.pth`` the agent leaves there ran as root in the sealed box before any test
    and forged 1 of 1. The toolchain's ``pytest`` must not hand over to it."""
    site = "/usr/lib/python3/dist-packages"
    dockerfile = (
        f"FROM debian:bookworm-slim\nWORKDIR /app\nRUN {_PYTEST_SCRIPT} "
        f"&& mkdir -p {site} && chown -R 1000:1000 {site}\n"
    )
    files = {"t1evil.pth": "import os, sys; 'pytest' in sys.argv[0] and exec(" + repr(_FORGE) + ")\n"}
    report, run = await _verify(tmp_path, dockerfile, files, f"cp /app/t1evil.pth {site}/")
    _real_test_failed(report, run)


async def test_a_root_owned_pytest_in_a_venv_whose_pyvenv_cfg_is_the_agents_does_not_hand_over(tmp_path):
    """The image's ``pytest`` and its venv's Python and folders are root's, but the venv's ``pyvenv.cfg``
    is the agent's: the agent points ``home`` at a copy of the standard library whose site folder holds a
    ``.pth`` of its own, which the venv's Python runs as root before any test (ahead of the verifier's
    guard, which a ``sitecustomize`` could not pass) and forged 1 of 1."""
    dockerfile = (
        "FROM debian:bookworm-slim\nWORKDIR /app\n"
        "RUN mkdir -p /opt/venv/bin && ln -s /usr/bin/python3 /opt/venv/bin/python3 "
        "&& printf 'home = /usr/bin\\ninclude-system-site-packages = true\\n' > /opt/venv/pyvenv.cfg "
        "&& chown 1000:1000 /opt/venv/pyvenv.cfg "
        "&& printf '#!/opt/venv/bin/python3\\nimport sys\\nfrom pytest import console_main\\n"
        "sys.exit(console_main())\\n' > /usr/local/bin/pytest && chmod 0755 /usr/local/bin/pytest\n"
    )
    files = {"t1evil.pth": "import os, sys; 'pytest' in sys.argv[0] and exec(" + repr(_FORGE) + ")\n"}
    attack = (  # its own standard library and site folder, and home pointed there
        "mkdir -p /app/evil/bin /app/evil/lib/python3/dist-packages "
        "&& cp -r /usr/lib/python3.11 /app/evil/lib/ && ln -s /usr/bin/python3 /app/evil/bin/ "
        "&& mv /app/t1evil.pth /app/evil/lib/python3/dist-packages/ "
        "&& printf 'home = /app/evil/bin\\ninclude-system-site-packages = true\\n' > /opt/venv/pyvenv.cfg"
    )
    report, run = await _verify(tmp_path, dockerfile, files, attack)
    _real_test_failed(report, run)


async def test_a_bash_env_of_the_image_in_the_agents_folder_is_not_sourced_by_the_verifier(tmp_path):
    """The image activates its venv in every non-interactive ``bash`` (a common idiom:
    ``ENV BASH_ENV=/app/.venv/bin/activate``) and ``/app`` is the agent's: the ``bash`` that runs
    ``test.sh`` as root sourced the agent's file before the first line of ``test.sh`` and forged 1 of 1."""
    dockerfile = (
        "FROM debian:bookworm-slim\nWORKDIR /app\n"
        "RUN mkdir -p /app/.venv/bin && touch /app/.venv/bin/activate\n"
        "ENV BASH_ENV=/app/.venv/bin/activate\n"
    )
    files = {
        "forge.sh": f"case $0 in */test.sh) echo '{_FORGED}' > /logs/verifier/ctrf.json; exit 0 ;; esac\n"
    }
    attack = "cat /app/forge.sh >> /app/.venv/bin/activate"
    report, run = await _verify(tmp_path, dockerfile, files, attack)
    _real_test_failed(report, run)


#: A library whose constructor runs first in any program that loads it: as root in the verifier's box it
#: writes the forged report (over pytest's, in T1's steps after the tests) and ends a pytest process; it
#: runs any other program again without the library.
_EVIL_LIBRARY_C = r"""
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void forge(int argc, char **argv, char **envp) {
    int fd = getuid() == 0 ? open("/logs/verifier/ctrf.json", O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
    if (fd >= 0) {
        write(fd, FORGED, sizeof(FORGED) - 1);
        close(fd);
        for (int i = 0; i < argc; i++)
            if (strstr(argv[i], "pytest") != NULL) _exit(0);
    }
    unsetenv("LD_LIBRARY_PATH");
    execv("/proc/self/exe", argv);
}
"""


@pytest.mark.parametrize(
    ("library_path", "folder"),
    [("/usr/local/lib:$LD_LIBRARY_PATH", "/app"), ("/app/build/lib", "/app/build/lib")],
    ids=["empty-entry", "agents-folder"],
)
async def test_the_images_ld_library_path_loads_no_library_of_the_agents_as_root(
    tmp_path, library_path, folder
):
    """The image's ``LD_LIBRARY_PATH`` names a folder the agent can write: the task root through an empty
    entry (``ENV LD_LIBRARY_PATH=/usr/local/lib:$LD_LIBRARY_PATH`` with none set: the working directory,
    where ``test.sh`` runs), or a build folder of the task root. A ``libpython`` the agent left there was
    loaded as root by the toolchain's own Python, ahead of the toolchain's, and forged 1 of 1."""
    import shutil
    import subprocess
    import sys

    if shutil.which("cc") is None:
        pytest.skip("no C compiler on this host to build the agent's library")
    source = tmp_path / "evil.c"
    source.write_text(f'#define FORGED "{_FORGED.replace(chr(34), chr(92) + chr(34))}"\n{_EVIL_LIBRARY_C}')
    library = tmp_path / "evil.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    dockerfile = f"FROM debian:bookworm-slim\nWORKDIR /app\nENV LD_LIBRARY_PATH={library_path}\n"
    name = f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0"  # the toolchain's Python's
    files = {"evil.so": library.read_bytes().hex()}
    attack = (
        f'mkdir -p {folder} && python3 -c "import sys; '
        f"sys.stdout.buffer.write(bytes.fromhex(open('/app/evil.so').read()))\" > {folder}/{name}"
    )
    report, run = await _verify(tmp_path, dockerfile, files, attack)
    _real_test_failed(report, run)


async def test_the_images_ld_library_path_gives_the_agent_no_root_in_its_own_phase(tmp_path):
    """Every command of the agent starts under T1's launcher, which runs as root until it drops to the
    agent's uid. With the image's ``LD_LIBRARY_PATH`` naming a folder of the task root, a ``libpython`` the
    agent left there was loaded by the launcher as root on its next command: root in its own container
    (then any file, the image's ``pytest`` too, is the agent's to rewrite). The agent's commands still see
    the image's ``LD_LIBRARY_PATH``."""
    import shutil
    import subprocess
    import sys

    from t1_sandbox.docker import DockerSandbox
    from t1_sandbox.docker import client as dc

    recipe = load_recipe(TINY_DOCKER)
    if problems := DockerSandbox.preflight(recipe):
        pytest.skip("; ".join(problems))
    if shutil.which("cc") is None:
        pytest.skip("no C compiler on this host to build the agent's library")
    source = tmp_path / "evil.c"
    source.write_text(
        "#include <fcntl.h>\n#include <stdlib.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void own(int argc, char **argv, char **envp) {\n"
        '    if (getuid() == 0) close(open("/etc/t1-owned", O_WRONLY | O_CREAT, 0644));\n'
        '    unsetenv("LD_LIBRARY_PATH");\n    execv("/proc/self/exe", argv);\n}\n'
    )
    library = tmp_path / "evil.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    dockerfile = "FROM debian:bookworm-slim\nWORKDIR /app\nENV LD_LIBRARY_PATH=/app/lib\n"
    (env_dir / "Dockerfile").write_text(dockerfile)
    (env_dir / "token").write_text(secrets.token_hex(8))
    name = f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0"  # the launcher's
    sb = DockerSandbox.from_spec(recipe.sandbox)
    try:
        async with sb:
            await sb.start(env_dir, timeout_s=600)
            await sb.upload(library, "/app/evil.so")
            planted = await sb.exec(f"mkdir -p /app/lib && cp /app/evil.so /app/lib/{name}", timeout_s=60)
            assert planted.ok, planted.stderr
            seen = await sb.exec("echo $LD_LIBRARY_PATH; test -e /etc/t1-owned && echo OWNED", timeout_s=60)
    finally:
        if sb.choice is not None:
            dc.api_client(None).remove_image(sb.choice.image, force=True)
    assert seen.stdout.split() == ["/app/lib"], seen


async def test_a_pytest_whose_python_is_a_wrapper_script_does_not_hand_over(tmp_path):
    """The image's ``pytest`` names ``/usr/local/bin/python3``, a root-owned wrapper script that runs the
    Python of a prefix the image gave the agent (a shared ``/opt/py``). Every file the check reads is root's,
    but the program that runs is the agent's: it replaced that Python and forged 1 of 1."""
    dockerfile = (
        "FROM debian:bookworm-slim\nWORKDIR /app\n"
        "RUN mkdir -p /opt/py/bin && ln -s /usr/bin/python3.11 /opt/py/bin/python3 "
        "&& chown -R 1000:1000 /opt/py "
        "&& printf '#!/bin/sh\\nexec /opt/py/bin/python3 \"$@\"\\n' > /usr/local/bin/python3 "
        "&& chmod 0755 /usr/local/bin/python3 "
        "&& printf '#!/usr/local/bin/python3\\nimport sys\\nfrom pytest import console_main\\n"
        "sys.exit(console_main())\\n' > /usr/local/bin/pytest && chmod 0755 /usr/local/bin/pytest\n"
    )
    files = {"python3": f"#!/bin/sh\necho '{_FORGED}' > /logs/verifier/ctrf.json\n"}
    attack = "rm /opt/py/bin/python3 && cp /app/python3 /opt/py/bin/python3 && chmod 0755 /opt/py/bin/python3"
    report, run = await _verify(tmp_path, dockerfile, files, attack)
    _real_test_failed(report, run)


async def test_a_link_in_a_site_folder_to_a_file_of_the_agents_does_not_hand_over(tmp_path):
    """The image links a ``.pth`` of its project into the site folder (``ln -s /app/project.pth ...``): the
    link is root's, the file it names is in the agent's task root. The agent rewrote it with an ``import``
    line that ran as root at the image's Python's start and forged 1 of 1."""
    dockerfile = (
        "FROM debian:bookworm-slim\nWORKDIR /app\n"
        f"RUN {_PYTEST_SCRIPT} && echo /app > /app/project.pth "
        "&& ln -s /app/project.pth /usr/lib/python3/dist-packages/project.pth\n"
    )
    pth = (
        "import os, sys; os.path.isdir('/logs/verifier') and 'pytest' in sys.argv[0] and "
        f"(open('/logs/verifier/ctrf.json', 'w').write({_FORGED!r}), os._exit(0))\n"
    )
    files = {"forged.pth": pth}
    attack = "cp /app/forged.pth /app/project.pth"
    report, run = await _verify(tmp_path, dockerfile, files, attack)
    _real_test_failed(report, run)


#: Run as root by the image's ``pip`` (a ``.pth`` in the site folder the image gave the agent): gives that
#: folder back to root, removes itself and leaves a root-owned ``pytest`` that writes the forged report.
_FORGED_PYTEST = f"#!/usr/bin/python3\nopen('/logs/verifier/ctrf.json', 'w').write({_FORGED!r})\n"
_TAKEOVER = (
    "import os, sys\n"
    "if os.getuid() == 0 and os.path.basename(sys.argv[0]).startswith('pip'):\n"
    "    site = '/usr/lib/python3/dist-packages'\n"
    "    os.remove(os.path.join(site, 't1evil.pth'))\n"
    "    for here, dirs, files in os.walk(site):\n"
    "        for name in [here] + [os.path.join(here, n) for n in dirs + files]:\n"
    "            os.lchown(name, 0, 0)\n"
    "    with open('/usr/local/bin/pytest', 'w') as fh:\n"
    f"        fh.write({_FORGED_PYTEST!r})\n"
)


@pytest.mark.xfail(
    strict=True,
    reason="not fixed: test.sh runs the image's pip (any Python of the image) as root, and a site folder the "
    "image gave the agent runs the agent's .pth in it before the handover's check",
)
async def test_the_images_pip_in_test_sh_runs_no_pth_of_the_agents_as_root(tmp_path):
    """The image gave its site folder to the agent (as in ``test_docker_verifier_pip.py``) and ``test.sh``
    runs ``pip`` before ``pytest`` (Terminal-Bench 2's bare ``pip install``): the image's ``pip``, root's,
    starts the image's Python as root, which runs the agent's ``.pth``; that code gives the site folder back
    to root and leaves a root-owned ``pytest``, which the handover then trusts: a forged 1 of 1."""
    site = "/usr/lib/python3/dist-packages"
    dockerfile = (
        f"FROM debian:bookworm-slim\nWORKDIR /app\nRUN {_PYTEST_SCRIPT} && chown -R 1000:1000 {site}\n"
    )
    files = {
        "takeover.py": _TAKEOVER,
        "t1evil.pth": "import sys; sys.path.append('/app/lib'); import t1takeover\n",
    }
    attack = f"mkdir -p /app/lib && cp /app/takeover.py /app/lib/t1takeover.py && cp /app/t1evil.pth {site}/"
    report, run = await _verify(tmp_path, dockerfile, files, attack, before="pip --version\n")
    _real_test_failed(report, run)
