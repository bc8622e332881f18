"""Versioned pydantic specs of a T1 run (``schema: t1/v1``), recipe loading and JSON Schema export.

Import what you need from here::

    from t1_spec import load_recipe, Recipe, RecipeError

No torch import anywhere in this package.
"""

from t1_spec._base import Spec, SpecRuleError, Violation
from t1_spec.critic_warmup import CriticWarmupSpec
from t1_spec.diff import ABSENT, Change, diff_recipes
from t1_spec.engine import EmbeddedEngineSpec, EngineSpec, SamplingSpec, SGLangEngineSpec
from t1_spec.errors import Problem, RecipeError
from t1_spec.evaluation import EvaluationSpec
from t1_spec.harness import BuiltinHarnessSpec, ExternalHarnessSpec, HarnessSpec
from t1_spec.liveness import LivenessSpec
from t1_spec.loading import (
    base_of,
    load_recipe,
    merge_recipe_dicts,
    recipe_digest,
    recipe_to_dict,
    recipe_to_yaml,
    resolve_recipe,
    validate_recipe,
)
from t1_spec.logging_spec import LoggingSpec, WandbSpec
from t1_spec.model import PARAM_TOLERANCE, LayerType, ModelSpec
from t1_spec.plan import DEFAULT_ALPHA, PlanSpec
from t1_spec.pool import PoolAuditSpec, PoolSpec
from t1_spec.ppo import (
    AdvantageSpec,
    GAEAdvantageSpec,
    GRPOAdvantageSpec,
    IcePopSpec,
    NoOffPolicySpec,
    OffPolicySpec,
    PPOSpec,
    TISSpec,
)
from t1_spec.recipe import Recipe
from t1_spec.registry import BackendNotBuilt, Registry
from t1_spec.reward import BinaryRewardSpec, DenseRewardSpec, RatioRewardSpec, RewardSpec
from t1_spec.rollout import ContinuationSpec, RolloutSpec
from t1_spec.runtime import RaySpec, RuntimeSpec
from t1_spec.sandbox import (
    DaytonaSandboxSpec,
    DockerSandboxSpec,
    HarborSandboxSpec,
    LocalSandboxSpec,
    SandboxSpec,
)
from t1_spec.schema import export_schemas
from t1_spec.sft import SftSpec
from t1_spec.tito import TitoSpec
from t1_spec.trainer import TrainerSpec
from t1_spec.versioning import COMPATIBILITY_POLICY, KNOWN_SCHEMAS, SCHEMA_VERSION

__all__ = [
    "ABSENT",
    "COMPATIBILITY_POLICY",
    "DEFAULT_ALPHA",
    "KNOWN_SCHEMAS",
    "PARAM_TOLERANCE",
    "SCHEMA_VERSION",
    "AdvantageSpec",
    "BackendNotBuilt",
    "BinaryRewardSpec",
    "BuiltinHarnessSpec",
    "Change",
    "ContinuationSpec",
    "CriticWarmupSpec",
    "DaytonaSandboxSpec",
    "DenseRewardSpec",
    "DockerSandboxSpec",
    "EmbeddedEngineSpec",
    "EngineSpec",
    "EvaluationSpec",
    "ExternalHarnessSpec",
    "GAEAdvantageSpec",
    "GRPOAdvantageSpec",
    "HarborSandboxSpec",
    "HarnessSpec",
    "IcePopSpec",
    "LayerType",
    "LivenessSpec",
    "LocalSandboxSpec",
    "LoggingSpec",
    "ModelSpec",
    "NoOffPolicySpec",
    "OffPolicySpec",
    "PPOSpec",
    "PlanSpec",
    "PoolAuditSpec",
    "PoolSpec",
    "Problem",
    "RatioRewardSpec",
    "RaySpec",
    "Recipe",
    "RecipeError",
    "Registry",
    "RewardSpec",
    "RolloutSpec",
    "RuntimeSpec",
    "SGLangEngineSpec",
    "SamplingSpec",
    "SandboxSpec",
    "SftSpec",
    "Spec",
    "SpecRuleError",
    "TISSpec",
    "TitoSpec",
    "TrainerSpec",
    "Violation",
    "WandbSpec",
    "base_of",
    "diff_recipes",
    "export_schemas",
    "load_recipe",
    "merge_recipe_dicts",
    "recipe_digest",
    "recipe_to_dict",
    "recipe_to_yaml",
    "resolve_recipe",
    "validate_recipe",
]
