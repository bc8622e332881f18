from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from t1_spec import Problem, RecipeError, load_recipe

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_path() -> Path:
    return ROOT / "recipes" / "tiny-cpu.yaml"


@pytest.fixture(scope="session")
def prod_path() -> Path:
    return ROOT / "recipes" / "t1-122b.yaml"


@pytest.fixture(scope="session")
def tiny(tiny_path):
    return load_recipe(tiny_path)


@pytest.fixture(scope="session")
def prod(prod_path):
    return load_recipe(prod_path)


@pytest.fixture(scope="session")
def problems_of() -> Callable[..., list[Problem]]:
    """``problems_of(path, *overrides)``: the problems ``load_recipe`` reports (fails if the recipe loads)."""

    def run(path: Path, *overrides: str) -> list[Problem]:
        with pytest.raises(RecipeError) as info:
            load_recipe(path, list(overrides))
        return info.value.problems

    return run
