"""The bundle masks a launch covers are kept per process, and found again as soon as a package changes.

Claims: an installed task bundle (a ``t1_*`` package with ``pools``, or ``t1_tasks``) is masked in the next
launch whether it was added as a new package, in a new Python's ``site-packages``, or by giving an existing
package a ``pools`` folder, and is unmasked once removed; while nothing changed, a launch does not search
again (no glob); an answer read while a folder had just changed is not kept.
"""

import glob
import os
import time

import pytest

from t1_sandbox.local import toolchain


@pytest.fixture
def system(monkeypatch, tmp_path):
    """A stand-in for ``/usr``: site folders under ``tmp_path/usr``, bound read-only as the real one is."""
    usr = tmp_path / "usr"
    (usr / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    monkeypatch.setattr(toolchain, "BOUND_SYSTEM_PATHS", (str(usr),))
    monkeypatch.setattr(toolchain, "_SITE_GLOBS", (f"{usr}/lib/python3*/*-packages",))
    monkeypatch.setattr(toolchain, "_MASKS", {})
    monkeypatch.setattr(toolchain, "_t1_tasks_location", lambda: ())
    return usr


def _age(root) -> None:
    """Set every folder under ``root`` to a time long past (so the answer is old enough to keep)."""
    past = time.time() - 3600
    for folder, _, _ in os.walk(root):
        os.utime(folder, (past, past))


def test_a_bundle_installed_changed_or_removed_is_seen_by_the_next_launch(system):
    site = system / "lib" / "python3.11" / "site-packages"
    _age(system)
    assert toolchain.bundle_masks(verifier=False) == ()
    (site / "t1_pool" / "pools").mkdir(parents=True)  # a new package with bundles
    assert toolchain.bundle_masks(verifier=False) == (str(site / "t1_pool"),)
    (site / "t1_plain").mkdir()
    _age(system)
    assert toolchain.bundle_masks(verifier=False) == (str(site / "t1_pool"),)
    (site / "t1_plain" / "pools").mkdir()  # an existing package given bundles
    assert toolchain.bundle_masks(verifier=False) == (str(site / "t1_plain"), str(site / "t1_pool"))
    _age(system)
    newer = system / "lib" / "python3.12" / "dist-packages" / "t1_tasks"  # a new Python, its own site
    newer.mkdir(parents=True)
    assert str(newer) in toolchain.bundle_masks(verifier=False)
    (site / "t1_pool" / "pools").rmdir()
    (site / "t1_pool").rmdir()
    assert str(site / "t1_pool") not in toolchain.bundle_masks(verifier=False)


def test_while_nothing_changed_a_launch_does_not_search_again(system, monkeypatch):
    site = system / "lib" / "python3.11" / "site-packages"
    (site / "t1_pool" / "pools").mkdir(parents=True)
    _age(system)
    first = toolchain.bundle_masks(verifier=False)
    globs = []
    real_glob = glob.glob
    monkeypatch.setattr(toolchain.glob, "glob", lambda *a, **k: globs.append(a) or real_glob(*a, **k))
    assert toolchain.bundle_masks(verifier=False) == first == (str(site / "t1_pool"),)
    assert globs == []


def test_an_answer_read_just_after_a_change_is_not_kept(system, monkeypatch):
    site = system / "lib" / "python3.11" / "site-packages"
    (site / "t1_pool" / "pools").mkdir(parents=True)  # changed just now: its time may be reused
    assert toolchain.bundle_masks(verifier=False) == (str(site / "t1_pool"),)
    assert False not in toolchain._MASKS
