"""A failed Docker build names its cause: the tool and host it could not reach, PEP 668, a missing command.

The logs are what the daemon streamed for real builds on this machine's dockerd (legacy builder, network none)
and what apt, pip, curl, git and uv print offline (captured in a ``--network none`` container of the local
Debian bases); nothing here needs a daemon.
"""

from __future__ import annotations

import pytest

from t1_sandbox.docker.images import build_failure_cause, map_base
from t1_sandbox.unreached import unreached_cause

APT_STEP = (
    "Step 1/2 : FROM t1-local/debian:trixie\n ---> e7d99421951b\n"
    "Step 2/2 : RUN apt-get update && apt-get install -y cowsay\n ---> Running in 5c1abff856dc\n"
    "Ign:1 http://deb.debian.org/debian trixie InRelease\n"
    "Err:1 http://deb.debian.org/debian trixie InRelease\n  Temporary failure resolving 'deb.debian.org'\n"
    "Reading package lists...\n"
    "W: Failed to fetch http://deb.debian.org/debian/dists/trixie/InRelease  Temporary failure resolving "
    "'deb.debian.org'\nW: Some index files failed to download. They have been ignored, or old ones used "
    "instead.\nReading package lists...\nBuilding dependency tree...\nE: Unable to locate package cowsay\n"
)
APT_ERROR = (
    "The command '/bin/sh -c apt-get update && apt-get install -y cowsay' returned a non-zero code: 100"
)
APT_UPDATE_OK = (
    "Step 2/3 : RUN apt-get update\n ---> Running in 1\n"
    "Err:1 http://deb.debian.org/debian trixie InRelease\n  Temporary failure resolving 'deb.debian.org'\n"
    "W: Some index files failed to download. They have been ignored, or old ones used instead.\n"
    " ---> 2b1\n"
)
PEP668 = (
    "Step 3/3 : RUN pip install numpy==2.1.2 scipy==1.15.3\n ---> Running in 3\n"
    "error: externally-managed-environment\n\n× This environment is externally managed\n"
)
PIP_OFFLINE = (
    "Step 2/2 : RUN pip install --break-system-packages numpy==2.1.2\n"
    "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after "
    "connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at "
    "0x7ff4732b7610>: Failed to establish a new connection: [Errno -3] Temporary failure in name "
    "resolution')': /simple/numpy/\n"
    "ERROR: Could not find a version that satisfies the requirement numpy==2.1.2 (from versions: none)\n"
)


def _error(command: str, code: int = 1) -> str:
    return f"The command '/bin/sh -c {command}' returned a non-zero code: {code}"


def test_apt_get_without_network_names_the_archive_host():
    assert build_failure_cause(APT_STEP, APT_ERROR) == "apt-get: no network to deb.debian.org"


def test_apt_rather_than_apt_get_is_named_as_the_step_ran_it():
    log = APT_STEP.replace(
        "apt-get update && apt-get install -y cowsay", "apt update -y && apt install -y rustc"
    )
    assert build_failure_cause(log, _error("apt update -y && apt install -y rustc", 100)) == (
        "apt: no network to deb.debian.org"
    )


def test_an_earlier_step_that_warned_and_succeeded_is_not_the_cause():
    log = "Step 1/3 : FROM t1-local/debian:trixie\n" + APT_UPDATE_OK + PEP668
    cause = build_failure_cause(log, _error("pip install numpy==2.1.2 scipy==1.15.3"))
    assert cause is not None and cause.startswith("pip: the image's Python is externally managed (PEP 668)")


def test_pip_offline_names_the_package_index():
    cause = build_failure_cause(PIP_OFFLINE, _error("pip install --break-system-packages numpy==2.1.2"))
    assert cause == "pip: no network to the package index (pypi.org unless configured)"


@pytest.mark.parametrize(
    ("command", "output", "expected"),
    [
        (
            "curl -LsSf https://astral.sh/uv/install.sh | sh",
            "curl: (6) Could not resolve host: astral.sh\n",
            "curl: no network to astral.sh",
        ),
        (
            "git clone https://github.com/x/y",
            "fatal: unable to access 'https://github.com/x/y/': Could not resolve host: github.com\n",
            "git: no network to github.com",
        ),
        (
            "uv pip install --system pytest",
            "error: Failed to fetch: `https://pypi.org/simple/pytest/`\n  Caused by: dns error\n",
            "uv: no network to pypi.org",
        ),
        (
            "wget -q http://example.com/x",
            "/bin/sh: 1: wget: not found\n",
            "wget: command not found in the image",
        ),
    ],
)
def test_each_tool_is_named_with_what_it_lacked(command, output, expected):
    log = f"Step 2/2 : RUN {command}\n ---> Running in 9\n{output}"
    assert build_failure_cause(log, _error(command, 127 if "not found" in output else 1)) == expected


def test_a_failure_with_no_known_cause_gives_none():
    log = "Step 2/2 : RUN false\n ---> Running in 9\n"
    assert build_failure_cause(log, _error("false")) is None


@pytest.mark.parametrize(
    "base",
    [
        "public.ecr.aws/docker/library/debian:bookworm-slim@sha256:"
        "4724b8cc51e33e398f0e2e15e18d5ec2851ff0c2280647e1310bc1642182655d",
        "debian:bookworm-slim@sha256:4724b8cc51e33e398f0e2e15e18d5ec2851ff0c2280647e1310bc1642182655d",
        "mirror.gcr.io/library/debian:bookworm-slim",
        "docker.io/library/debian:bookworm-slim",
    ],
)
def test_a_pinned_or_mirrored_official_base_maps_by_its_hub_name(base):
    images = {"debian:bookworm-slim": "t1-local/debian:bookworm", "debian:bookworm": "other"}
    assert map_base(base, images) == "t1-local/debian:bookworm"


def test_other_registries_and_other_tags_are_not_mapped():
    images = {"debian:bookworm-slim": "t1-local/debian:bookworm"}
    assert map_base("ghcr.io/acme/debian:bookworm-slim", images) is None
    assert map_base("public.ecr.aws/docker/library/debian:trixie-slim", images) is None


# What uv printed in a Terminal-Bench 2 verifier on this machine with the bridge network on (TLS intercepted)
UV_TLS = (
    "error: Failed to fetch: `https://pypi.org/simple/pytest/`\n  Caused by: error sending request for url "
    "(https://pypi.org/simple/pytest/)\n  Caused by: client error (Connect)\n  Caused by: invalid peer "
    "certificate: UnknownIssuer\nhint: Consider enabling use of system TLS certificates with the "
    "`--system-certs` command-line flag\n"
)
UV_DNS = (
    "error: Failed to fetch: `https://pypi.org/simple/pytest-json-ctrf/`\n  Caused by: dns error\n  Caused "
    "by: failed to lookup address information: Temporary failure in name resolution\n"
)


def test_uv_behind_a_tls_interceptor_names_the_host_and_the_certificate():
    cause = unreached_cause(UV_TLS)
    assert cause is not None
    assert cause.startswith("uv: TLS to pypi.org failed certificate verification (UnknownIssuer)")


def test_uv_without_dns_names_the_host():
    assert unreached_cause(UV_DNS) == "uv: no network to pypi.org"


def test_output_that_reached_everything_names_nothing():
    assert unreached_cause("===== 4 passed in 0.12s =====\n") is None


def _verdicts_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "t1_rollout" / "test_validate_verdicts.py"
    spec = importlib.util.spec_from_file_location("_validate_verdicts_helpers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_validate_names_what_the_verifier_could_not_reach_from_its_own_output(tmp_path):
    v = _verdicts_module()
    task = v.make_task(tmp_path / "tb2", v.PLAIN_TESTS)
    r = v.validate(
        task,
        tmp_path,
        verify={"oracle": v.ran(UV_TLS, code=0), "nop": v.ran(UV_DNS, code=0)},
        report={"oracle": None, "nop": None},
    )
    assert r.oracle.error is not None and r.oracle.error.startswith(
        "verifier: uv: TLS to pypi.org failed certificate verification (UnknownIssuer)"
    )
    assert r.nop.error is not None and r.nop.error.startswith("verifier: uv: no network to pypi.org: ")
    assert (r.oracle.passed, r.oracle.total) == (0, 0) and not r.ok  # an error, never the task's 0


def test_a_failed_build_names_its_step_and_exit_code():
    from t1_sandbox.docker.images import failed_step

    assert failed_step(APT_STEP, APT_ERROR) == (
        "step 2/2 `RUN apt-get update && apt-get install -y cowsay`, exit code 100"
    )
    # a step whose command printed nothing the cause readers know still says where and how it failed
    log = "Step 1/3 : FROM t1-local/debian:bookworm\nStep 3/3 : RUN make -C /src\nmake: *** [all] Error 2\n"
    assert failed_step(log, _error("make -C /src", 2)) == "step 3/3 `RUN make -C /src`, exit code 2"
    assert failed_step("", "failed to solve: process did not complete: exit code: 7") == "exit code 7"
    assert failed_step("", "something else") == "an unnamed step"


def test_the_check_tools_cause_keeps_the_step_and_the_last_lines():
    import importlib.util
    import sys
    from pathlib import Path

    from t1_sandbox.base import SandboxError

    path = Path(__file__).resolve().parents[2] / "tools" / "check_tasks.py"
    spec = importlib.util.spec_from_file_location("check_tasks_cause", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_tasks_cause"] = module
    spec.loader.exec_module(module)
    exc = SandboxError(
        "/t/environment/Dockerfile: build failed at step 3/3 `RUN make -C /src`, exit code 2; "
        "its last lines:\n"
        "cc -o x x.c\nx.c:1: error: expected ';'\nmake: *** [all] Error 2\n"
    )
    cause = module.build_cause(exc)
    assert cause.startswith("SandboxError: /t/environment/Dockerfile: build failed at step 3/3")
    assert "exit code 2" in cause and cause.endswith("make: *** [all] Error 2")
