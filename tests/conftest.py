"""Fixtures shared by every test package.

The tiny Qwen3.5-MoE's shape is declared once, in the ``model:`` section of `recipes/tiny-cpu.yaml`; tests
take it from `tiny_model_spec`, and a variant from ``tiny_model_spec.model_copy(update={...})``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from t1_spec import ModelSpec, load_recipe

REPO_ROOT = Path(__file__).resolve().parents[1]
TINY_RECIPE = REPO_ROOT / "recipes" / "tiny-cpu.yaml"


@pytest.fixture(scope="session")
def tiny_model_spec() -> ModelSpec:
    """The frozen `ModelSpec` of `recipes/tiny-cpu.yaml` (path from the repo root, not the cwd)."""
    return load_recipe(TINY_RECIPE).model
