"""The unit tier: the README names its command beside the full one, and the tier is what the README says.

``unit`` is given at collection by ``tests/conftest.py`` (`is_unit`), not by hand; these tests check the
README's paragraph on tests, the marker's registration, the rule on small cases, and that the hook runs
before ``-m`` selects.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TESTS = ROOT / "tests"
UNIT = "uv run pytest -m unit"


def _conftest():
    spec = importlib.util.spec_from_file_location("tests_root_conftest", TESTS / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tests_paragraph() -> str:
    """The README's paragraph on tests (it starts ``Tests mirror the packages``), on one line."""
    paragraphs = re.split(r"\n\s*\n", README.read_text(encoding="utf-8"))
    (found,) = [p for p in paragraphs if p.startswith("Tests mirror the packages")]
    return " ".join(found.split())


def test_readme_names_the_unit_command_beside_the_full_one_with_its_time_under_5_minutes():
    text = _tests_paragraph()
    assert f"`{UNIT}`" in text, f"the README's paragraph on tests does not name `{UNIT}`"
    assert "`uv run pytest`" in text, "the README's paragraph on tests does not name the full command"
    measured = re.search(rf"`{UNIT}` \(([\d,]+) tests in (\d+) min (\d+) s", text)
    assert measured, f"the README gives no measured time for `{UNIT}` ('(N tests in M min S s')"
    assert int(measured.group(2)) * 60 + int(measured.group(3)) < 300, measured.group(0)


def test_the_unit_marker_is_registered():
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("unit:") for m in markers), markers


def test_every_file_left_out_of_the_tier_exists():
    missing = [f for f in _conftest().UNIT_EXCLUDED_FILES if not (TESTS / f).is_file()]
    assert not missing, f"UNIT_EXCLUDED_FILES in tests/conftest.py names files that are gone: {missing}"


def _item(rel: str, *markers: str) -> SimpleNamespace:
    """A stand-in for a collected test: its path and its markers."""
    return SimpleNamespace(path=TESTS / rel, get_closest_marker=lambda m: m if m in markers else None)


def test_unit_is_every_test_but_the_marked_the_slow_directories_and_the_slowest_files():
    conftest = _conftest()
    assert conftest.is_unit(_item("t1_reward/test_reward.py"))
    for marker in ("e2e", "docker", "ray", "slow", "gpu"):
        assert not conftest.is_unit(_item("t1_reward/test_reward.py", marker)), marker
    assert not conftest.is_unit(_item("e2e/test_tiny_cpu.py"))
    assert not conftest.is_unit(_item("sandbox_suite/test_leaks.py"))
    assert not conftest.is_unit(_item(conftest.UNIT_EXCLUDED_FILES[0]))


def test_minus_m_unit_selects_by_the_marker_the_hook_gives():
    """The hook runs before ``-m`` deselects: a fast test is selected, an end-to-end one is not."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", UNIT.split()[-1], "-p", "no:randomly"]
        + ["tests/t1_reward/test_reward.py", "tests/e2e/test_continuation.py"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    ids = [line for line in out.stdout.splitlines() if "::" in line]
    assert ids and all(i.startswith("tests/t1_reward/test_reward.py::") for i in ids), out.stdout
