"""The README's install lines, run as written on fresh Debian 12, Debian 13 and Ubuntu 24.04.

The install lines are the Quick start block's lines before the first ``uv`` command. The fast tests check that
they parse and name packages the host's apt knows; the docker test runs them in a fresh minbase container of
each release (debootstrap from the distribution's mirror, imported once as ``t1-local/first-contact:<suite>``)
and checks that ``uv`` and ``bwrap`` work afterwards, and where uv finds Python 3.12.

Not checked here: the Python 3.12 download uv makes on Debian (python-build-standalone is served from GitHub,
which this machine does not reach) and the multi-GB ``uv sync`` after it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# suite -> (mirror, debootstrap script, components): Ubuntu's releases use the gutsy script Debian ships
RELEASES = {
    "bookworm": ("http://deb.debian.org/debian", "bookworm", "main"),
    "trixie": ("http://deb.debian.org/debian", "trixie", "main"),
    "noble": ("http://archive.ubuntu.com/ubuntu", "gutsy", "main,universe"),
}
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def quick_start_block() -> list[str]:
    """The lines of the README's first bash block under ``## Quick start``."""
    text = README.read_text()
    section = text[text.index("## Quick start") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README.md: no ```bash block under ## Quick start"
    return block.group(1).splitlines()


def install_lines() -> list[str]:
    """The Quick start's lines before its first ``uv`` command (blank lines dropped)."""
    lines = []
    for line in quick_start_block():
        if line.startswith("uv "):
            break
        if line.strip():
            lines.append(line)
    return lines


def test_the_install_lines_are_the_apt_and_pipx_lines_and_parse_as_bash():
    lines = install_lines()
    assert lines[0].startswith("apt-get update && apt-get install -y "), lines
    assert "pip install uv" not in " ".join(line.split("#")[0] for line in lines)  # PEP 668 refuses it
    assert any(line.startswith("pipx install uv") for line in lines), lines
    subprocess.run(["bash", "-n"], input="\n".join(lines), text=True, check=True)


def test_the_apt_packages_exist_in_the_hosts_apt_lists():
    if shutil.which("apt-cache") is None:
        pytest.skip("no apt-cache on this host")
    words = install_lines()[0].split("#")[0].split("install -y", 1)[1].split()
    assert words == ["pipx", "bubblewrap"], words
    for package in words:
        shown = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True, check=True)
        assert "Candidate: (none)" not in shown.stdout and shown.stdout.strip(), f"{package}: {shown.stdout}"


def _image(suite: str) -> str:
    """A fresh minbase image of ``suite``, built once with debootstrap; skips where that cannot run."""
    image = f"t1-local/first-contact:{suite}"
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0:
        return image
    mirror, script, components = RELEASES[suite]
    script_path = Path("/usr/share/debootstrap/scripts") / script
    if shutil.which("debootstrap") is None or not script_path.exists() or os.geteuid() != 0:
        pytest.skip(f"{suite}: needs root and debootstrap with its {script} script to build {image}")
    root = Path(tempfile.mkdtemp(prefix=f"t1-first-contact-{suite}-", dir="/var/tmp"))
    try:
        args = ["debootstrap", "--variant=minbase", f"--components={components}"]
        if suite == "noble" and not Path("/usr/share/keyrings/ubuntu-archive-keyring.gpg").exists():
            # Debian 12 has no Ubuntu keyring package; the image is a throwaway test root
            args.append("--no-check-gpg")
        done = subprocess.run(
            [*args, suite, str(root), mirror, str(script_path)], capture_output=True, text=True, timeout=900
        )
        if done.returncode != 0:
            pytest.skip(f"debootstrap {suite} from {mirror} failed: {done.stdout[-500:]}{done.stderr[-500:]}")
        root.chmod(0o755)
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        path = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        changes = ["--change", f"ENV {path}", "--change", 'CMD ["bash"]']
        subprocess.run(
            ["docker", "import", *changes, "-", image], stdin=tar.stdout, check=True, capture_output=True
        )
        assert tar.wait() == 0
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return image


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("suite", list(RELEASES))
def test_the_install_lines_work_in_a_fresh_container(suite):
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        pytest.skip("no Docker daemon answers")
    image = _image(suite)
    script = "set -e\nexport DEBIAN_FRONTEND=noninteractive\n" + "\n".join(install_lines()) + "\n"
    script += "uv --version\nbwrap --version\n"
    script += 'echo "python3.12: $(uv python find 3.12 2>/dev/null || echo none)"\n'
    mounts = []
    if HOST_CA.exists():
        # This machine reaches PyPI through a TLS-inspecting proxy whose CA only the host's store holds.
        mounts = ["-v", f"{HOST_CA}:/host-ca.crt:ro"]
        mounts += ["-e", "PIP_CERT=/host-ca.crt", "-e", "SSL_CERT_FILE=/host-ca.crt"]
    command = ["docker", "run", "--rm", *mounts, image, "bash", "-c", script]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    unreachable = r"Temporary failure resolving|Could not resolve|Name or service not known"
    if done.returncode and re.search(unreachable, out):
        pytest.skip(f"{suite}: the container reaches no package mirror: {out[-300:]}")
    assert done.returncode == 0, out[-3000:]
    assert re.search(r"^uv \d+\.\d+", done.stdout, re.M), out[-2000:]
    assert "bubblewrap" in done.stdout, out[-2000:]
    found = re.search(r"^python3\.12: (.*)$", done.stdout, re.M)
    assert found, out[-2000:]
    if suite == "noble":
        assert found.group(1).startswith("/usr/bin/python3.12"), found.group(1)  # Ubuntu 24.04 ships 3.12
    else:
        assert found.group(1) == "none", found.group(1)  # uv downloads one: the README says so
