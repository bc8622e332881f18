"""The workspace as the architecture tests see it: the packages under ``packages/``, their sources parsed.

Every test that takes a ``package`` argument runs once per workspace package found under ``packages/*/`` (a
new package is picked up without editing the tests).
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = REPO_ROOT / "packages"

CLI_PACKAGE = "t1"
"""The command-line package: the top row; no library package may import it."""


def normalize(dist: str) -> str:
    """A distribution name in PEP 503 normal form (``PyYAML`` -> ``pyyaml``, ``a_b`` -> ``a-b``)."""
    return re.sub(r"[-_.]+", "-", dist).lower()


def requirement_name(requirement: str) -> str:
    """The distribution named by a PEP 508 requirement string, normalized (``torch>=2.6`` -> ``torch``)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, f"cannot read a distribution name from requirement {requirement!r}"
    return normalize(match.group(1))


@dataclass(frozen=True)
class Package:
    """One workspace package: ``packages/<folder>/``, its ``pyproject.toml`` and ``src/<import name>/``."""

    folder: Path
    dist: str
    """``[project].name``, normalized."""
    import_names: tuple[str, ...]
    """Top-level import packages under ``src/`` (folders with an ``__init__.py``)."""
    dependencies: frozenset[str] = field(default_factory=frozenset)
    """``[project].dependencies``, normalized distribution names."""
    optional: frozenset[str] = field(default_factory=frozenset)
    """Every ``[project.optional-dependencies]`` extra's distributions, normalized."""

    def __str__(self) -> str:
        return self.dist

    @cached_property
    def modules(self) -> tuple[Path, ...]:
        """Every ``.py`` file under ``src/``, sorted."""
        return tuple(sorted((self.folder / "src").rglob("*.py")))

    def trees(self) -> list[tuple[Path, ast.Module]]:
        """Each module parsed with ``ast``."""
        return [(path, ast.parse(path.read_text(encoding="utf-8"), str(path))) for path in self.modules]

    def imported_top_names(self) -> dict[str, list[str]]:
        """Top-level names of every absolute import anywhere in the sources (inside functions too).

        Returns:
            ``{top-level name: ["path:line", ...]}`` of where it is imported.
        """
        found: dict[str, list[str]] = {}
        for path, tree in self.trees():
            where = path.relative_to(REPO_ROOT).as_posix()
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], []).append(f"{where}:{node.lineno}")
        return found


def discover_packages() -> list[Package]:
    """Every workspace package under ``packages/`` (a folder with a ``pyproject.toml`` and a ``src/``)."""
    out = []
    for pyproject in sorted(PACKAGES.glob("*/pyproject.toml")):
        folder = pyproject.parent
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        src = folder / "src"
        names = tuple(sorted(p.parent.name for p in src.glob("*/__init__.py")))
        extras = project.get("optional-dependencies", {})
        out.append(
            Package(
                folder=folder,
                dist=normalize(project["name"]),
                import_names=names,
                dependencies=frozenset(requirement_name(r) for r in project.get("dependencies", [])),
                optional=frozenset(requirement_name(r) for reqs in extras.values() for r in reqs),
            )
        )
    return out


WORKSPACE = discover_packages()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize every test taking ``package`` over the discovered workspace packages."""
    if "package" in metafunc.fixturenames:
        metafunc.parametrize("package", WORKSPACE, ids=[p.dist for p in WORKSPACE])


@pytest.fixture(scope="session")
def workspace() -> list[Package]:
    """Every workspace package."""
    return WORKSPACE
