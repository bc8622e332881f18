"""Task bundles never read host files through links: a link that leaves the bundle is refused by name.

The attack: a bundle whose ``instruction.md`` (or ``task.toml``, a test file, ``environment/``) is a link to a
host file the trainer can read puts that file in the agent's prompt, the image hash or the uploaded tests.
"""

import os
import shutil
from pathlib import Path

import pytest

from t1_tasks import TaskError, load_pool, load_task
from t1_tasks.task import bundle_digest

MESSAGE = "links outside the bundle are not followed"


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    good = load_pool("builtin:mini").get("csv-region-totals").path
    shutil.copytree(good, tmp_path / "pool" / "task")
    return tmp_path / "pool" / "task"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A host file outside the bundle, readable by the trainer: what the attack wants in the prompt."""
    path = tmp_path / "host-secret.txt"
    path.write_text("TOKEN=hunter2\n")
    return path


@pytest.mark.parametrize("rel", ["instruction.md", "task.toml", "tests/test_outputs.py", "solution/solve.sh"])
def test_a_file_linked_to_a_host_file_is_refused_naming_the_link_and_its_target(bundle, secret, rel):
    target = bundle / rel
    if not target.exists():  # the copied task names its test file differently: link a new one
        target = bundle / "tests" / "test_linked.py"
    target.unlink(missing_ok=True)
    target.symlink_to(secret)
    with pytest.raises(TaskError) as info:
        load_task(bundle)
    message = str(info.value)
    assert str(target) in message and str(secret) in message and MESSAGE in message
    assert "hunter2" not in message


def test_the_instruction_never_carries_the_linked_file_into_the_prompt(bundle, secret):
    (bundle / "instruction.md").unlink()
    (bundle / "instruction.md").symlink_to(secret)
    pool = load_pool(bundle.parent, strict=False)
    assert not pool.tasks
    assert MESSAGE in pool.broken[0].message and "missing" not in pool.broken[0].message


@pytest.mark.parametrize("rel", ["environment", "tests", "solution"])
def test_a_folder_linked_outside_the_bundle_is_refused(bundle, tmp_path, rel):
    outside = tmp_path / "elsewhere"
    shutil.move(bundle / rel, outside)
    (bundle / rel).symlink_to(outside)
    with pytest.raises(TaskError, match=MESSAGE):
        load_task(bundle)


def test_a_relative_link_climbing_out_of_the_bundle_is_refused(bundle, secret):
    (bundle / "environment" / "data.txt").symlink_to(Path("..") / ".." / ".." / secret.name)
    with pytest.raises(TaskError, match=MESSAGE) as info:
        load_task(bundle)
    assert "environment/data.txt" in str(info.value)


def test_a_link_to_a_root_only_or_missing_host_path_is_refused_not_reported_missing(bundle):
    (bundle / "instruction.md").unlink()
    (bundle / "instruction.md").symlink_to("/etc/shadow")
    with pytest.raises(TaskError, match=MESSAGE):
        load_task(bundle)
    (bundle / "instruction.md").unlink()
    (bundle / "instruction.md").symlink_to("/nonexistent/t1-no-such-file")
    with pytest.raises(TaskError, match=MESSAGE):
        load_task(bundle)


def test_every_refused_link_is_named_in_one_message(bundle, secret):
    (bundle / "environment" / "a").symlink_to(secret)
    (bundle / "tests" / "b").symlink_to("/dev/zero")
    with pytest.raises(TaskError) as info:
        load_task(bundle)
    assert "environment/a" in str(info.value) and "tests/b" in str(info.value)


def test_a_link_that_stays_inside_the_bundle_is_kept(bundle):
    (bundle / "environment" / "tests-copy").symlink_to(Path("..") / "tests" / "test.sh")
    (bundle / "environment" / "here").symlink_to(".")
    task = load_task(bundle)
    assert (task.environment_dir / "tests-copy").is_symlink()


def test_a_fifo_in_the_bundle_is_refused_rather_than_read(bundle):
    os.mkfifo(bundle / "tests" / "test_fifo.py")  # reading it would block task loading forever
    with pytest.raises(TaskError, match="not a regular file, directory or link"):
        load_task(bundle)


def test_a_pool_with_a_linked_bundle_file_is_a_broken_bundle_in_strict_loading(bundle, secret):
    (bundle / "task.toml").unlink()
    (bundle / "task.toml").symlink_to(secret)
    with pytest.raises(TaskError, match=MESSAGE):
        load_pool(bundle.parent)


def test_the_bundle_digest_counts_a_link_by_its_target_text(bundle, tmp_path):
    (bundle / "environment" / "l").symlink_to("/dev/zero")  # read, it would never end
    first = bundle_digest(bundle)
    (bundle / "environment" / "l").unlink()
    (bundle / "environment" / "l").symlink_to("/dev/null")
    assert bundle_digest(bundle) != first
