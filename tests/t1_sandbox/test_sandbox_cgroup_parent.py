"""Sandbox cgroups: the ``t1`` parent groups are set up once per process, again when they vanish (T1 §6)."""

import dataclasses
import os

import pytest

from t1_sandbox.base import SandboxError
from t1_sandbox.local import cgroups

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (cgroups)")


@pytest.fixture
def own_parent(monkeypatch):
    """The machine's hierarchy with a parent group of this test's own in place of ``t1``."""
    try:
        hierarchy = cgroups.cgroup_hierarchy()
    except SandboxError as exc:
        pytest.skip(str(exc))
    name = f"t1-test-{os.getpid()}"
    parents = {c: p.with_name(name) for c, p in hierarchy.parents.items()}
    monkeypatch.setattr(cgroups, "_HIERARCHY", dataclasses.replace(hierarchy, parents=parents))
    monkeypatch.setattr(cgroups, "_READY_PARENTS", set())
    yield sorted(set(parents.values()))
    for parent in set(parents.values()):
        for group in parent.glob("sbx-*"):
            group.rmdir()
        if parent.exists():
            parent.rmdir()


def test_a_parent_removed_after_the_first_sandbox_is_set_up_again_for_the_next(own_parent):
    first = cgroups.SandboxCgroup(memory_mb=64, max_processes=16, cpus=1)
    assert all(d.parent in own_parent and d.is_dir() for d in first.dirs)
    assert first.remove() == []
    assert set(cgroups._READY_PARENTS) == set(own_parent)  # set up once, not at every sandbox
    for parent in own_parent:
        parent.rmdir()  # gone (an operator's clean-up) while this process still runs
    second = cgroups.SandboxCgroup(memory_mb=64, max_processes=16, cpus=1)
    try:
        assert all(d.is_dir() for d in second.dirs)
        limit = "memory.max" if second.hierarchy.version == 2 else "memory.limit_in_bytes"
        assert int((second._dir("memory") / limit).read_text()) == 64 * 1024 * 1024
        assert (second._dir("pids") / "pids.max").read_text().strip() == "16"
    finally:
        assert second.remove() == []
