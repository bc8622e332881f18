"""The image build's network apart from the trial's: ``sandbox.build_network`` (as Harbor builds).

The rule (`t1_sandbox.docker.images.network_policy`): the trial's container, and with it the agent, the
reference solution and the sealed verifier, gets the network only by ``sandbox.network`` and the task's
``allow_internet``; the build gets it then too, and whenever ``sandbox.build_network`` is true. The daemon
tests assert on what T1 passes to the real daemon (``build``'s ``network_mode``, every container's
``NetworkMode``) and on what the build and the containers see (``/sys/class/net``), and read the image's
``t1.build_network`` label back into the sandbox, the validation record and the trial record.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
from pathlib import Path

import pytest

from t1_sandbox.docker import client as dc
from t1_sandbox.docker.images import (
    BUILD_NETWORK_LABEL,
    NetworkPolicy,
    built_with_network,
    network_policy,
)
from t1_sandbox.dockerfile import daemon_downloads
from t1_spec import DockerSandboxSpec, RecipeError, load_recipe

REPO = Path(__file__).resolve().parents[2]
TINY_DOCKER = REPO / "recipes" / "tiny-docker.yaml"
# a numeric address of deb.debian.org's CDN: no name lookup needed to try the route
OUTSIDE = "151.101.2.132"


# ---------------------------------------------------------------------------------------------- the rule
@pytest.mark.parametrize(
    ("network", "build_network", "allow_internet", "expected"),
    [
        # the trial: sandbox.network and the task's allow_internet, both; never build_network
        (False, False, True, NetworkPolicy(build=False, trial=False)),
        (False, True, True, NetworkPolicy(build=True, trial=False)),
        (False, True, False, NetworkPolicy(build=True, trial=False)),
        (True, False, False, NetworkPolicy(build=False, trial=False)),
        (True, True, False, NetworkPolicy(build=True, trial=False)),
        (True, False, True, NetworkPolicy(build=True, trial=True)),
        (True, True, True, NetworkPolicy(build=True, trial=True)),
        (False, False, False, NetworkPolicy(build=False, trial=False)),
    ],
)
def test_build_network_opens_the_build_and_never_the_trial(network, build_network, allow_internet, expected):
    got = network_policy(network=network, build_network=build_network, allow_internet=allow_internet)
    assert got == expected


def test_build_network_is_off_by_default_so_the_build_follows_the_trial():
    assert DockerSandboxSpec().build_network is False
    recipe = load_recipe(TINY_DOCKER)
    assert recipe.sandbox.build_network is False and recipe.sandbox.network is False
    on = load_recipe(TINY_DOCKER, ["sandbox.build_network=true"])
    assert on.sandbox.build_network is True and on.sandbox.network is False


def test_a_sandbox_that_builds_nothing_refuses_build_network_by_name():
    # another kind's field, said so (it was "unknown field; check its spelling", which it is not)
    with pytest.raises(RecipeError, match="build_network: a field of sandbox.kind docker only, not of local"):
        load_recipe(REPO / "recipes" / "tiny-cpu.yaml", ["sandbox.build_network=true"])
    with pytest.raises(RecipeError, match="bild_network: unknown field; check its spelling"):
        load_recipe(REPO / "recipes" / "tiny-cpu.yaml", ["sandbox.bild_network=true"])


def test_the_label_says_true_false_or_nothing():
    assert built_with_network({BUILD_NETWORK_LABEL: "true"}) is True
    assert built_with_network({BUILD_NETWORK_LABEL: "false"}) is False
    assert built_with_network({"t1.image": "task"}) is None  # built before the label
    assert built_with_network(None) is None  # an image without labels (a task's docker_image)


@pytest.mark.parametrize(
    ("dockerfile", "expected"),
    [
        ("FROM x\nADD https://h/a /a\n", True),
        ("FROM x\nADD local https://h/a /d/\n", True),  # every source, not only the first
        ("FROM x\nADD \\\n  https://h/a /a\n", True),  # a continuation line
        ("# escape=`\nFROM x\nADD `\n  https://h/a /a\n", True),  # the escape directive's continuation
        ("# syntax=x\n# escape=`\nFROM x\nADD `\n  https://h/a /a\n", True),
        ("# a comment\n# escape=`\nFROM x\nADD \\\n  https://h/a /a\n", True),  # no directive after it
        ("FROM x\nARG S=https://h/a\nADD $S /a\n", True),  # a variable the daemon expands
        ('FROM x\nADD ["local", "https://h/a", "/d/"]\n', True),
        ("FROM x\nONBUILD ADD https://h/a /a\n", True),
        ("FROM x\nadd --chown=1:1 --link git@github.com:o/r.git /r\n", True),
        ("FROM x\nADD local.tar /a\nCOPY https /b\nRUN curl https://h/a || true\n", False),
    ],
)
def test_the_daemons_own_download_is_seen_in_every_form_of_add(dockerfile, expected):
    assert daemon_downloads(dockerfile) is expected


class _Daemon:
    """A daemon that has the images named and no other (``inspect_image``)."""

    def __init__(self, *have: str) -> None:
        self.have = set(have)

    def inspect_image(self, ref):
        import docker

        if ref not in self.have:
            raise docker.errors.ImageNotFound(ref)
        return {"Id": ref, "Config": {"Labels": {}}}


@pytest.mark.parametrize("copy", ["COPY --from=registry.example/x:1 /x /x", "ADD --chown=1 --from=x:1 /x /x"])
def test_an_image_the_daemon_would_pull_for_copy_from_is_refused_like_a_missing_base(tmp_path, copy):
    """``COPY --from=<image>`` makes the daemon pull an image it lacks, whatever the build's network
    (measured: ``invalid from flag value ...: Get "https://.../v2/"``): refused by name, as a base is."""
    from t1_sandbox.base import SandboxError
    from t1_sandbox.docker.images import TaskEnvironment, resolve_image

    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text(f"FROM base:1 AS first\nFROM base:1\nCOPY --from=first /a /a\n{copy}\n")
    with pytest.raises(SandboxError, match=r"image \S+ \(line 4, --from\) is not in the Docker daemon"):
        resolve_image(_Daemon("base:1"), env, TaskEnvironment(), {})
    (env / "Dockerfile").write_text(
        "FROM base:1 AS first\nFROM base:1\nCOPY --from=first /a /a\nCOPY --from=0 /a /b\n"
    )
    assert resolve_image(_Daemon("base:1"), env, TaskEnvironment(), {})[0] is None  # stages: built


# --------------------------------------------------------------------------------------- the real daemon
def _daemon_or_skip():
    from t1_sandbox.docker import DockerSandbox

    problems = DockerSandbox.preflight(load_recipe(TINY_DOCKER))
    if problems:
        pytest.skip("; ".join(problems))


class _Passed:
    """What T1 passed to the daemon: each build's ``network_mode``, each started container's network.

    T1 also creates never-started helper containers (to fill the toolchain and tests volumes); only the
    containers it starts run anything, so those are the ones held to ``--network none``.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import docker

        self.builds: list[str | None] = []
        self._created: dict[str, tuple[str | None, bool]] = {}  # id -> NetworkMode, network_disabled
        self._started: list[str] = []
        api = docker.api.client.APIClient
        build, create, start = api.build, api.create_container, api.start

        def spy_build(client, *args, **kwargs):
            self.builds.append(kwargs.get("network_mode"))
            return build(client, *args, **kwargs)

        def spy_create(client, image, *args, **kwargs):
            made = create(client, image, *args, **kwargs)
            host = kwargs.get("host_config") or {}
            self._created[made["Id"]] = (host.get("NetworkMode"), bool(kwargs.get("network_disabled")))
            return made

        def spy_start(client, container, *args, **kwargs):
            self._started.append(container if isinstance(container, str) else container["Id"])
            return start(client, container, *args, **kwargs)

        monkeypatch.setattr(api, "build", spy_build)
        monkeypatch.setattr(api, "create_container", spy_create)
        monkeypatch.setattr(api, "start", spy_start)

    @property
    def started(self) -> list[tuple[str | None, bool]]:
        """``(NetworkMode, network_disabled)`` of every container T1 created and started."""
        return [self._created[c] for c in self._started if c in self._created]

    def all_offline(self) -> bool:
        """At least one container started, and every one on ``--network none`` with networking disabled."""
        return bool(self.started) and all(mode == "none" and off for mode, off in self.started)


def _sandbox(**fields):
    from t1_sandbox.docker import DockerSandbox

    return DockerSandbox.from_spec(load_recipe(TINY_DOCKER).sandbox.model_copy(update=fields))


def _environment(tmp_path: Path) -> Path:
    """A task whose build writes the network interfaces its RUN step saw (a fresh tag: a new token)."""
    env = tmp_path / "task" / "environment"
    env.mkdir(parents=True)
    (env / "token").write_text(secrets.token_hex(16))  # no image of an earlier test is reused
    (env / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nWORKDIR /app\nCOPY token /token\nRUN ls /sys/class/net > /build-ifaces\n"
    )
    return env


def _remove_image(tag: str) -> None:
    import docker

    try:
        dc.api_client(None).remove_image(tag, force=True)
    except docker.errors.APIError:
        pass


_INTERFACES = "ls /sys/class/net | tr '\\n' ' '"
_REACH = f"timeout 5 bash -c 'echo > /dev/tcp/{OUTSIDE}/80' 2>/dev/null && echo reached || echo unreachable"


@pytest.mark.docker
async def test_the_build_gets_the_bridge_and_every_container_of_the_trial_none(tmp_path, monkeypatch):
    _daemon_or_skip()
    passed = _Passed(monkeypatch)
    env = _environment(tmp_path)
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("true\n")
    sb = _sandbox(build_network=True, network=False)
    try:
        async with sb:
            await sb.start(env, timeout_s=600)
            built = await sb.exec("cat /build-ifaces | tr '\\n' ' '", timeout_s=60)
            agent = await sb.exec(f"{_INTERFACES}; {_REACH}", timeout_s=60)
            solution = await sb.exec_solution(f"{_INTERFACES}; {_REACH}", timeout_s=60)
            host = dc.api_client(None).inspect_container(sb.container_id)
            async with sb.sealed_verifier(tests, "/tests", timeout_s=60) as box:
                verifier = await box.exec_verifier(f"{_INTERFACES}; {_REACH}", timeout_s=60)
                boxed = dc.api_client(None).inspect_container(box.container_id)
        labels = dc.api_client(None).inspect_image(sb.choice.image)["Config"]["Labels"]
    finally:
        if sb.choice is not None:
            _remove_image(sb.choice.image)
    # what T1 passed: the build on the bridge, the trial's container and the verifier's box on none
    assert passed.builds == ["bridge"]
    assert len(passed.started) == 2 and passed.all_offline(), passed.started  # the trial's, the box
    assert host["HostConfig"]["NetworkMode"] == "none" and host["Config"].get("NetworkDisabled") is True
    assert boxed["HostConfig"]["NetworkMode"] == "none"
    # what each saw: the build a bridge interface; the agent, the solution (root) and the verifier only lo
    assert "eth0" in built.stdout.split(), built.stdout
    for who, r in (("agent", agent), ("solution", solution), ("verifier", verifier)):
        assert r.stdout.split() == ["lo", "unreachable"], (who, r.stdout, r.stderr)
    # and the sandbox, its choice and the image say the image was built with network
    assert sb.built_with_network is True and sb.choice.build_network is True and sb.choice.built
    assert labels[BUILD_NETWORK_LABEL] == "true" and sb.limits["network"] is False


@pytest.mark.docker
async def test_without_build_network_the_build_has_none_and_says_so(tmp_path, monkeypatch):
    _daemon_or_skip()
    passed = _Passed(monkeypatch)
    env = _environment(tmp_path)
    sb = _sandbox()
    try:
        async with sb:
            await sb.start(env, timeout_s=600)
            built = await sb.exec("cat /build-ifaces | tr '\\n' ' '", timeout_s=60)
    finally:
        if sb.choice is not None:
            _remove_image(sb.choice.image)
    assert passed.builds == ["none"]
    assert built.stdout.split() == ["lo"]
    assert sb.built_with_network is False and sb.choice.build_network is False


@pytest.mark.docker
async def test_an_image_reused_by_an_offline_run_still_says_it_was_built_with_network(tmp_path, monkeypatch):
    _daemon_or_skip()
    env = _environment(tmp_path)
    first = _sandbox(build_network=True)
    try:
        async with first:
            await first.start(env, timeout_s=600)
        passed = _Passed(monkeypatch)
        again = _sandbox()  # build_network off: the image is in the daemon, nothing is built
        async with again:
            await again.start(env, timeout_s=600)
    finally:
        if first.choice is not None:
            _remove_image(first.choice.image)
    assert passed.builds == [] and again.choice.image == first.choice.image and not again.choice.built
    assert again.built_with_network is True


@pytest.mark.docker
async def test_an_offline_build_takes_no_cached_layer_that_a_build_with_network_made(tmp_path):
    """Docker's layer cache does not key on the network: same steps, new tag, built offline after online."""
    _daemon_or_skip()
    env = _environment(tmp_path)
    online, offline, again = _sandbox(build_network=True), _sandbox(), _sandbox()
    try:
        async with online:
            await online.start(env, timeout_s=600)
        (env / "unused.txt").write_text("a new tag over the same layers\n")
        async with offline:
            await offline.start(env, timeout_s=600)
            seen = await offline.exec("cat /build-ifaces | tr '\\n' ' '", timeout_s=60)
        (env / "unused.txt").write_text("another tag over the offline layers\n")
        async with again:
            await again.start(env, timeout_s=600)
            cached = await again.exec("cat /build-ifaces | tr '\\n' ' '", timeout_s=60)
    finally:
        for sb in (online, offline, again):
            if sb.choice is not None:
                _remove_image(sb.choice.image)
    assert offline.choice.image != online.choice.image and offline.choice.built
    assert offline.built_with_network is False and seen.stdout.split() == ["lo"], seen.stdout
    assert again.built_with_network is False and cached.stdout.split() == ["lo"]


@pytest.mark.docker
async def test_an_add_url_in_an_offline_build_is_fetched_by_the_daemon_and_labelled_so(tmp_path):
    """``ADD <url>`` is downloaded by the daemon itself, whatever the build's ``--network none``."""
    _daemon_or_skip()
    import functools
    import http.server
    import threading

    served = tmp_path / "served"
    served.mkdir()
    (served / "payload.txt").write_text("fetched by the daemon\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = _environment(tmp_path)
    dockerfile = env / "Dockerfile"
    url = f"http://127.0.0.1:{server.server_address[1]}/payload.txt"
    dockerfile.write_text(dockerfile.read_text() + f"ADD {url} /payload.txt\n")
    sb = _sandbox()  # no network for the build
    try:
        async with sb:
            await sb.start(env, timeout_s=600)
            got = await sb.exec_solution("cat /payload.txt", timeout_s=60)  # ADD makes it 0600, root's
    finally:
        server.shutdown()
        if sb.choice is not None:
            _remove_image(sb.choice.image)
    assert got.stdout == "fetched by the daemon\n"
    assert sb.built_with_network is True and sb.limits["network"] is False


def _mini_copy(tmp_path: Path) -> Path:
    """A folder holding the mini pool's csv-region-totals, its build context made unique (a fresh tag)."""
    from t1_tasks import load_pool

    src = load_pool("builtin:mini").get("csv-region-totals").path
    root = tmp_path / "pool"
    shutil.copytree(src, root / "csv-region-totals")
    (root / "csv-region-totals" / "environment" / "token").write_text(secrets.token_hex(16))
    return root


@pytest.mark.docker
async def test_the_validation_record_says_the_image_was_built_with_network(tmp_path, monkeypatch):
    _daemon_or_skip()
    from t1_rollout.validate import validate_pool, validation_record
    from t1_tasks import load_pool

    passed = _Passed(monkeypatch)
    pool = load_pool(_mini_copy(tmp_path))
    made = []

    def factory():
        made.append(_sandbox(build_network=True, network=False))
        return made[-1]

    try:
        result = await validate_pool(pool, sandbox_factory=factory, work_dir=tmp_path / "work")
    finally:
        for tag in {sb.choice.image for sb in made if sb.choice is not None}:
            _remove_image(tag)
    row = validation_record(result, pool, t1_version="test").get("csv-region-totals")
    assert row is not None and row.verdict == "ok", row
    for check in (row.oracle, row.nop):
        assert check is not None and check.build_network is True and check.network is False
    assert passed.builds == ["bridge"]  # built once, reused by the second check
    assert passed.all_offline(), passed.started


@pytest.mark.docker
async def test_the_trial_record_says_the_image_was_built_with_network_and_the_agent_has_none(
    tmp_path, monkeypatch
):
    _daemon_or_skip()
    from t1_rollout import trial
    from t1_rollout.engine.base import SamplingParams
    from t1_rollout.harness import HarnessConfig
    from t1_spec.reward import DenseRewardSpec
    from t1_tasks import load_pool
    from t1_tito import ChatTemplate, TitoSession, load_tokenizer

    passed = _Passed(monkeypatch)
    task = load_pool(_mini_copy(tmp_path)).get("csv-region-totals")
    made = []
    seen: list[str] = []

    def factory():
        made.append(_sandbox(build_network=True, network=False))
        return made[-1]

    class Engine:
        """Tries the network as the agent from inside the live sandbox, then waits for the agent deadline."""

        weight_version = 0

        async def generate(self, input_ids, sampling, **kwargs):
            r = await made[-1].exec(f"{_INTERFACES}; {_REACH}", timeout_s=30)
            seen.append(r.stdout)
            await asyncio.sleep(3600)

    try:
        rec = await trial.run_trial(
            task,
            sandbox_factory=factory,
            engine=Engine(),
            tito=TitoSession(load_tokenizer(), ChatTemplate()),
            sampling=SamplingParams(max_new_tokens=8),
            harness=HarnessConfig(max_turns=1, agent_deadline_s=8, max_new_tokens=8, context_tokens=8192),
            limits=trial.TrialLimits(remote_deadline_s=600, agent_deadline_s=8, verifier_deadline_s=120),
            reward_spec=DenseRewardSpec(),
            out_dir=tmp_path / "out",
        )
    finally:
        for tag in {sb.choice.image for sb in made if sb.choice is not None}:
            _remove_image(tag)
    data = rec.to_json()
    assert seen and seen[0].split() == ["lo", "unreachable"], seen
    assert data["image_built_with_network"] is True, data["cause"]
    assert data["verifier"] is not None and data["verifier"]["network"] is False
    assert passed.builds == ["bridge"]
    assert passed.all_offline(), passed.started


@pytest.mark.docker
def test_t1_tasks_validate_with_build_network_says_so_and_records_it(tmp_path):
    _daemon_or_skip()
    import json

    from typer.testing import CliRunner

    from t1.cli import app

    recipe = tmp_path / "online-builds.yaml"
    recipe.write_text(f"schema: t1/v1\nextends: {TINY_DOCKER}\nsandbox:\n  build_network: true\n")
    record = tmp_path / "record.json"
    pool = _mini_copy(tmp_path)
    try:
        result = CliRunner().invoke(
            app, ["tasks", "validate", "--recipe", str(recipe), str(pool), "--record", str(record)]
        )
    finally:
        for tag in dc.api_client(None).images(name="t1-task/csv-region-totals", quiet=False):
            for ref in tag.get("RepoTags") or []:
                labels = tag.get("Labels") or {}
                if labels.get(BUILD_NETWORK_LABEL) == "true":
                    _remove_image(ref)
    assert result.exit_code == 0, result.output
    assert "no network, images built with network" in " ".join(result.output.split())
    row = json.loads(record.read_text())["tasks"][0]
    assert row["oracle"]["build_network"] is True and row["oracle"]["network"] is False


@pytest.mark.docker
@pytest.mark.parametrize(
    "add",
    [
        "ADD token {url} /fetched/\n",  # the URL as the second of two sources
        "ADD \\\n    {url} /fetched/\n",  # the URL on a continuation line
        "ARG SOURCE={url}\nADD ${{SOURCE}} /fetched/\n",  # the URL through a build argument
        "add --chown=0:0 {url} /fetched/\n",  # lower case, a flag
    ],
    ids=["second-source", "continuation", "build-arg", "lower-case-flag"],
)
async def test_every_form_of_add_url_in_an_offline_build_is_labelled_as_built_with_network(tmp_path, add):
    """The daemon downloads an ``ADD`` source URL in any form; the label may never say ``false`` then."""
    _daemon_or_skip()
    import functools
    import http.server
    import threading

    served = tmp_path / "served"
    served.mkdir()
    (served / "payload.txt").write_text("fetched by the daemon\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = _environment(tmp_path)
    dockerfile = env / "Dockerfile"
    url = f"http://127.0.0.1:{server.server_address[1]}/payload.txt"
    dockerfile.write_text(dockerfile.read_text() + add.format(url=url))
    sb = _sandbox()  # no network for the build
    try:
        async with sb:
            await sb.start(env, timeout_s=600)
            got = await sb.exec_solution("cat /fetched/payload.txt", timeout_s=60)
    finally:
        server.shutdown()
        if sb.choice is not None:
            _remove_image(sb.choice.image)
    assert got.stdout == "fetched by the daemon\n"  # the daemon did reach the network
    assert sb.built_with_network is True and sb.limits["network"] is False


async def test_a_tasks_own_image_labelled_offline_by_its_author_is_not_recorded_as_built_offline(tmp_path):
    """A task's ``docker_image`` was not built by T1: its ``t1.build_network`` label is its author's word."""
    from t1_sandbox.docker.images import TaskEnvironment, ensure_image

    class _Api:
        def inspect_image(self, ref):
            assert ref == "author/image:1"
            return {"Id": "sha256:" + "0" * 64, "Config": {"Labels": {BUILD_NETWORK_LABEL: "false"}}}

    env = tmp_path / "task" / "environment"
    env.mkdir(parents=True)
    choice, _ = await ensure_image(
        _Api(),
        None,
        env,
        TaskEnvironment(docker_image="author/image:1"),
        {},
        build_network=False,
        end=float("inf"),
    )
    assert choice.source == "docker_image" and choice.build_network is None


@pytest.mark.docker
async def test_an_offline_build_takes_no_layer_from_a_sealed_verifiers_commit_of_an_agent(tmp_path):
    """A sealed verifier's commit (the agent's filesystem) inherits the task image's ``false`` label; as a
    ``cache_from`` source, an offline build whose steps match its history (the task's Dockerfile, then a
    ``RUN`` of the container's own command) took the agent's files as a cached layer."""
    _daemon_or_skip()
    from t1_sandbox.base import SandboxError
    from t1_sandbox.docker.sealed import SEALED_REPOSITORY

    env = _environment(tmp_path)
    first, second = _sandbox(), _sandbox()
    token = secrets.token_hex(6)
    api = dc.api_client(None)
    leaked = ""
    try:
        async with first:
            await first.start(env, timeout_s=600)
            wrote = await first.exec("echo written-by-the-agent > /app/leak", timeout_s=60)
            assert wrote.ok, wrote.stderr
            # as the sealed verifier commits the agent's container (sealed.py)
            await asyncio.to_thread(
                api.commit,
                first._id,
                repository=SEALED_REPOSITORY,
                tag=token,
                conf={"Labels": {"t1.sealed": token}},
            )
            # the task image's own last steps (T1's labels), then the container's command as a RUN step
            steps = await asyncio.to_thread(api.history, first.choice.image)
            labels = []
            for step in steps:  # most recent first
                said = step["CreatedBy"].removeprefix("/bin/sh -c #(nop)  LABEL ")
                if said == step["CreatedBy"]:
                    break
                key, value = said.split("=", 1)
                labels.insert(0, f'LABEL {key}="{value}"\n')
            dockerfile = env / "Dockerfile"
            # a commit's history says the container's command alone (the entrypoint left out)
            dockerfile.write_text(dockerfile.read_text() + "".join(labels) + 'RUN ["init"]\n')
            (env / "unused.txt").write_text("a new tag over the same first steps\n")
            try:
                async with second:
                    await second.start(env, timeout_s=600)
                    leaked = (await second.exec("cat /app/leak 2>/dev/null", timeout_s=60)).stdout
            except SandboxError:
                leaked = ""  # the step ran for real and failed (no toolchain in a build): nothing taken
    finally:
        _remove_image(f"{SEALED_REPOSITORY}:{token}")
        for sb in (first, second):
            if sb.choice is not None:
                _remove_image(sb.choice.image)
    assert leaked == ""
