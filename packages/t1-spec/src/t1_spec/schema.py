"""JSON Schema export of every spec into ``specs/v1/`` (committed; a test compares them with the code)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from t1_spec.critic_warmup import CriticWarmupSpec
from t1_spec.engine import EngineSpec, SamplingSpec
from t1_spec.evaluation import EvaluationSpec
from t1_spec.liveness import LivenessSpec
from t1_spec.logging_spec import LoggingSpec
from t1_spec.model import ModelSpec
from t1_spec.plan import PlanSpec
from t1_spec.pool import PoolSpec
from t1_spec.ppo import AdvantageSpec, PPOSpec
from t1_spec.recipe import Recipe
from t1_spec.reward import RewardSpec
from t1_spec.rollout import RolloutSpec
from t1_spec.runtime import RuntimeSpec
from t1_spec.sandbox import SandboxSpec
from t1_spec.sft import SftSpec
from t1_spec.tito import TitoSpec
from t1_spec.trainer import TrainerSpec
from t1_spec.versioning import SCHEMA_VERSION

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

SECTION_TYPES: dict[str, Any] = {
    "model": ModelSpec,
    "pool": PoolSpec,
    "plan": PlanSpec,
    "reward": RewardSpec,
    "ppo": PPOSpec,
    "advantage": AdvantageSpec,
    "critic_warmup": CriticWarmupSpec,
    "sft": SftSpec,
    "rollout": RolloutSpec,
    "tito": TitoSpec,
    "sandbox": SandboxSpec,
    "engine": EngineSpec,
    "sampling": SamplingSpec,
    "trainer": TrainerSpec,
    "evaluation": EvaluationSpec,
    "liveness": LivenessSpec,
    "logging": LoggingSpec,
    "runtime": RuntimeSpec,
}
"""Schema file stem -> spec type; each gets ``<stem>.schema.json`` beside ``recipe.schema.json``."""

EXTENDS_DESCRIPTION = (
    "Path of a base recipe, relative to this file. This file is deep-merged over the base; a polymorphic "
    "section whose `kind`/`estimator` changes replaces the base's section. Removed before validation."
)


def _with_header(schema: dict[str, Any], stem: str, title: str | None = None) -> dict[str, Any]:
    head = {"$schema": JSON_SCHEMA_DIALECT, "$id": f"{SCHEMA_VERSION}/{stem}.schema.json"}
    if title is not None:
        head["title"] = title
    return {**head, **schema}


def recipe_schema() -> dict[str, Any]:
    """JSON Schema of a recipe file: the ``Recipe`` model plus the loader's ``extends`` key.

    A file with ``extends:`` may omit what its base provides, so the top-level ``required`` list only applies
    when ``extends`` is absent (``if``/``then``/``else``); nested sections keep their own requirements.
    """
    schema = Recipe.model_json_schema(by_alias=True, mode="validation")
    props = {"extends": {"type": "string", "description": EXTENDS_DESCRIPTION}, **schema["properties"]}
    schema["properties"] = props
    required = schema.pop("required", [])
    schema["if"] = {"required": ["extends"]}
    schema["then"] = {"required": ["schema"]}
    schema["else"] = {"required": required}
    return _with_header(schema, "recipe")


def section_schema(stem: str) -> dict[str, Any]:
    """JSON Schema of one section (``stem`` from ``SECTION_TYPES``)."""
    tp = SECTION_TYPES[stem]
    schema = TypeAdapter(tp).json_schema(by_alias=True, mode="validation")
    title = None if "title" in schema else stem.replace("_", " ").title().replace(" ", "") + "Spec"
    return _with_header(schema, stem, title)


def all_schemas() -> dict[str, dict[str, Any]]:
    """File name -> schema for every file ``export_schemas`` writes."""
    out = {"recipe.schema.json": recipe_schema()}
    out.update({f"{stem}.schema.json": section_schema(stem) for stem in SECTION_TYPES})
    return out


def render(schema: dict[str, Any]) -> str:
    """Deterministic text of a schema (2-space indent, trailing newline)."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def export_schemas(out_dir: str | Path) -> list[Path]:
    """Write one JSON Schema per spec into ``out_dir`` (created if needed).

    Args:
        out_dir: target folder, ``specs/v1`` in the repository.

    Returns:
        the written paths, ``recipe.schema.json`` first.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in all_schemas().items():
        target = out / name
        target.write_text(render(schema), encoding="utf-8")
        written.append(target)
    return written
