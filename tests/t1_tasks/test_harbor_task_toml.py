"""Harbor's task.toml as Harbor 0.7+ defines it: every key honoured or refused by name, legacy keys mapped.

Expected values come from Harbor's ``TaskConfig`` / ``EnvironmentConfig`` (``_parse_size_to_mb``: ``G`` is
1024 MB; ``version`` renamed to ``schema_version``; ``allow_internet`` mapped to ``network_mode``) and from
the layout of the Terminal-Bench 2 task.toml files (harbor_tb.md §1.2, §5).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from t1_tasks import PoolError, TaskError, load_pool, load_task
from t1_tasks.harbor import parse_size_mb

# The shape of an official Terminal-Bench 2.1 task.toml (keys and values as TB2 writes them).
TB2_TOML = """\
schema_version = "1.1"
artifacts = []

[task]
name = "terminal-bench/fix-git"
description = "Recover lost commits."
keywords = ["coding", "version-control"]
[[task.authors]]
name = "Someone"
email = "someone@example.com"

[metadata]
author_name = "Someone"
difficulty = "easy"
category = "software-engineering"
tags = ["coding", "version-control"]
expert_time_estimate_min = 5.0

[verifier]
timeout_sec = 900.0

[agent]
timeout_sec = 900.0

[environment]
build_timeout_sec = 600.0
docker_image = "alexgshaw/fix-git:20260403"
cpus = 1
memory_mb = 2048
storage_mb = 10240
gpus = 0
allow_internet = true
mcp_servers = []

[verifier.env]

[environment.env]

[solution.env]
"""

# TB2.0's older spelling of the same resources (Harbor maps them, with a deprecation warning).
LEGACY_TOML = """\
version = "1.0"

[metadata]
difficulty = "medium"
category = "security"

[environment]
docker_image = "alexgshaw/crack-7z-hash:20251031"
memory = "2G"
storage = "10G"
allow_internet = false
"""


def _bundle(root: Path, toml: str, *, dockerfile: bool = True, solution: bool = True) -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text(toml)
    (root / "instruction.md").write_text("do it\n")
    if dockerfile:
        (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (root / "tests" / "test.sh").write_text("pytest /tests/test_outputs.py\n")
    (root / "tests" / "test_outputs.py").write_text("def test_a():\n    assert True\n")
    if solution:
        (root / "solution").mkdir()
        (root / "solution" / "solve.sh").write_text("true\n")
    return root


def test_a_terminal_bench_2_task_toml_loads_with_every_key_read(tmp_path):
    task = load_task(_bundle(tmp_path / "fix-git", TB2_TOML))
    env = task.environment
    assert (task.schema_version, task.name) == ("1.1", "terminal-bench/fix-git")
    assert (task.category, task.difficulty) == ("software-engineering", "easy")
    assert (task.agent_timeout_s, task.verifier_timeout_s) == (900.0, 900.0)
    assert env.docker_image == "alexgshaw/fix-git:20260403"
    assert (env.cpus, env.memory_mb, env.storage_mb, env.gpus) == (1.0, 2048, 10240, 0)
    assert (env.network_mode, env.build_timeout_s) == ("public", 600.0)


def test_legacy_memory_storage_and_version_are_mapped_as_harbor_maps_them(tmp_path):
    task = load_task(_bundle(tmp_path / "crack", LEGACY_TOML))
    assert task.schema_version == "1.0"
    assert (task.environment.memory_mb, task.environment.storage_mb) == (2 * 1024, 10 * 1024)
    assert task.environment.network_mode == "no-network"  # allow_internet = false
    assert task.environment.docker_image == "alexgshaw/crack-7z-hash:20251031"


@pytest.mark.parametrize(
    ("text", "mb"), [("2G", 2048), ("512M", 512), ("0.5g", 512), ("1.5G", 1536), ("2048K", 2), ("1000K", 0)]
)
def test_size_strings_parse_to_mb_as_harbor(text, mb):
    assert parse_size_mb(text) == mb


@pytest.mark.parametrize("text", ["2", "2GB", "G", "-1G", "two G"])
def test_size_strings_without_a_unit_or_number_are_refused(text):
    with pytest.raises(ValueError, match="size"):
        parse_size_mb(text)


def test_memory_conflicting_with_memory_mb_is_refused_naming_both(tmp_path):
    toml = '[environment]\nmemory = "2G"\nmemory_mb = 4096\n'
    with pytest.raises(TaskError, match=r"environment\.memory = '2G' \(2048 MB\) conflicts with "):
        load_task(_bundle(tmp_path / "t", toml))
    same = load_task(_bundle(tmp_path / "u", '[environment]\nmemory = "4G"\nmemory_mb = 4096\n'))
    assert same.environment.memory_mb == 4096


def test_harbor_tasks_init_output_without_metadata_category_loads(tmp_path):
    """``harbor tasks init`` writes version, timeouts and [environment] only; no category."""
    toml = 'version = "1.0"\n\n[agent]\ntimeout_sec = 900.0\n\n[verifier]\ntimeout_sec = 900.0\n'
    task = load_task(_bundle(tmp_path / "init", toml))
    assert (task.category, task.difficulty) == ("unknown", "unknown")
    assert load_pool(str(tmp_path)).statistics().categories == {"unknown": 1}


def test_a_bundle_without_solution_loads_for_training_but_not_for_the_oracle(tmp_path):
    root = _bundle(tmp_path / "nosol", TB2_TOML, solution=False)
    assert load_task(root).has_solution is False
    with pytest.raises(TaskError, match=r"nosol/solution/solve\.sh: missing"):
        load_task(root, require_solution=True)


def test_docker_image_makes_the_dockerfile_optional_as_in_harbor(tmp_path):
    task = load_task(_bundle(tmp_path / "img", TB2_TOML, dockerfile=False))
    assert not task.dockerfile.exists() and task.environment.docker_image
    with pytest.raises(TaskError, match=r"environment/Dockerfile: missing"):
        load_task(_bundle(tmp_path / "noimg", "[metadata]\n", dockerfile=False))


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('[[steps]]\nname = "one"\n', "steps"),
        ('multi_step_reward_strategy = "final"\n', "multi_step_reward_strategy"),
        ('artifacts = ["/app/out"]\n', "artifacts"),
        ('[environment]\nos = "windows"\n', "environment.os"),
        ('[environment]\nskills_dir = "/skills"\n', "environment.skills_dir"),
        ('[environment.healthcheck]\ncommand = "true"\n', "environment.healthcheck"),
        ('[environment.tpu]\ntype = "v6e"\ntopology = "2x2"\n', "environment.tpu"),
        ('[[environment.mcp_servers]]\nname = "x"\nurl = "http://x"\n', "environment.mcp_servers"),
        ('[environment.env]\nTOKEN = "${TOKEN}"\n', "environment.env"),
        ('[verifier.env]\nK = "v"\n', "verifier.env"),
        ('[solution.env]\nK = "v"\n', "solution.env"),
        ('[agent]\nuser = "agent"\n', "agent.user"),
        ("[verifier]\nuser = 0\n", "verifier.user"),
        ('[agent]\nnetwork_mode = "no-network"\n', "agent.network_mode"),
        ('[verifier]\nenvironment_mode = "separate"\n', "verifier.environment_mode"),
        ("[verifier.environment]\ncpus = 2\n", "verifier.environment"),
    ],
)
def test_keys_t1_cannot_honour_are_refused_by_name(tmp_path, toml, key):
    with pytest.raises(TaskError, match=rf"task\.toml: field {key.replace('.', r'\.')} .*not supported"):
        load_task(_bundle(tmp_path / "t", toml))


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ("colour = 1\n", "colour"),
        ("[environment]\nmemroy_mb = 2048\n", "environment.memroy_mb"),
        ("[agent]\ntimeout = 900\n", "agent.timeout"),
        ('[task]\nname = "a/b"\nhomepage = "x"\n', "task.homepage"),
        ("[verifier]\nretries = 2\n", "verifier.retries"),
        ('[task]\nname = "a/b"\nformat = "harbor"\n', "task.format"),  # 81 of 87 community tasks had it
    ],
)
def test_keys_harbor_does_not_have_are_warned_about_not_refused(tmp_path, toml, key):
    # Harbor's TaskConfig ignores keys it does not know (pydantic's default): the task loads there
    task = load_task(_bundle(tmp_path / "t", toml))
    assert len(task.warnings) == 1, task.warnings
    assert f"field {key} is not a key of Harbor's task model" in task.warnings[0]
    assert "ignored, as Harbor ignores it" in task.warnings[0] and "task.toml" in task.warnings[0]


def test_allowed_hosts_without_a_mode_is_an_allowlist_and_may_name_an_ipv4_address(tmp_path):
    toml = '[environment]\nallowed_hosts = ["PyPI.org.", "10.0.0.7"]\n'
    env = load_task(_bundle(tmp_path / "t", toml)).environment
    assert (env.network_mode, env.allowed_hosts) == ("allowlist", ("pypi.org", "10.0.0.7"))


def test_metadata_is_free_form(tmp_path):
    toml = "[metadata]\nanything = {nested = [1, 2]}\nexpert_time_estimate_min = 5.0\n"
    task = load_task(_bundle(tmp_path / "t", toml))
    assert task.config["metadata"]["anything"] == {"nested": [1, 2]}


@pytest.mark.parametrize(
    ("toml", "match"),
    [
        ("[environment]\ncpus = 0\n", r"environment\.cpus must be a number > 0"),
        ("[environment]\nmemory_mb = 1.5\n", r"environment\.memory_mb must be a whole number"),
        ("[environment]\nmemory = 2048\n", r"environment\.memory must be a size string"),
        ('[environment]\nnetwork_mode = "bridge"\n', r"environment\.network_mode must be one of"),
        ('[environment]\nnetwork_mode = "allowlist"\n', r"environment\.allowed_hosts must name at least one"),
        (
            '[environment]\nnetwork_mode = "public"\nallowed_hosts = ["pypi.org"]\n',
            r"only valid with network_mode = 'allowlist'",
        ),
        ('[environment]\nallow_internet = "yes"\n', r"environment\.allow_internet must be true or false"),
        ('[environment]\nworkdir = "app"\n', r"environment\.workdir must be an absolute path"),
        ('version = "1.0"\nschema_version = "1.1"\n', r"field version conflicts with schema_version"),
        ("[environment]\nbuild_timeout_sec = -1\n", r"environment\.build_timeout_sec must be a positive"),
    ],
)
def test_values_of_the_wrong_type_are_refused_naming_the_key(tmp_path, toml, match):
    with pytest.raises(TaskError, match=match):
        load_task(_bundle(tmp_path / "t", toml))


def test_allowlist_hosts_are_kept_normalised(tmp_path):
    toml = '[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["PyPI.org.", "*.astral.sh"]\n'
    task = load_task(_bundle(tmp_path / "t", toml))
    assert task.environment.allowed_hosts == ("pypi.org", "*.astral.sh")


# ---------------------------------------------------------------- the older Terminal-Bench layout


def _tb1_task(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "task.yaml").write_text("instruction: do it\ndifficulty: easy\nparser_name: pytest\n")
    (root / "docker-compose.yaml").write_text("services:\n  client:\n    build: .\n")
    (root / "Dockerfile").write_text("FROM python:3.13-slim\n")
    (root / "run-tests.sh").write_text("pytest tests\n")
    (root / "solution.sh").write_text("true\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_outputs.py").write_text("def test_a():\n    assert True\n")
    return root


def test_the_older_terminal_bench_layout_gets_one_error_naming_the_migration(tmp_path):
    root = _tb1_task(tmp_path / "hello-world")
    with pytest.raises(TaskError) as info:
        load_task(root)
    message = str(info.value)
    assert f"harbor tasks migrate -i {root} -o " in message
    assert "older Terminal-Bench layout" in message and "task.yaml" in message
    assert "missing" not in message  # not a list of the five files Harbor's layout has


def test_a_pool_of_older_layout_tasks_names_each_with_the_migration(tmp_path):
    for name in ("a-task", "b-task"):
        _tb1_task(tmp_path / name)
    pool = load_pool(str(tmp_path), strict=False)
    assert pool.tasks == () and [b.id for b in pool.broken] == ["a-task", "b-task"]
    assert all("harbor tasks migrate" in b.message for b in pool.broken)


# ---------------------------------------------------------------- every broken bundle at once


def test_a_strict_pool_load_reports_every_broken_bundle_in_one_error(tmp_path):
    _bundle(tmp_path / "a-good", TB2_TOML)
    _bundle(tmp_path / "b-typo", '[environment]\nmemory_mb = "lots"\n')
    _bundle(tmp_path / "c-good", LEGACY_TOML)
    _tb1_task(tmp_path / "d-old")
    (_bundle(tmp_path / "e-no-test", TB2_TOML) / "tests" / "test.sh").unlink()
    with pytest.raises(PoolError) as info:
        load_pool(str(tmp_path))
    err = info.value
    assert [b.id for b in err.broken] == ["b-typo", "d-old", "e-no-test"]
    text = str(err)
    assert "3 of 5 task bundles are broken" in text
    assert "- b-typo: " in text and "environment.memory_mb must be a whole number" in text
    assert "- d-old: " in text and "harbor tasks migrate" in text
    assert "- e-no-test: " in text and "tests/test.sh: missing" in text
    assert isinstance(err, TaskError)  # callers catching TaskError still catch it
