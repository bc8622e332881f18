"""Closed-form per-device memory model, plan search and device split (T1 §7, §7.1, Eq. 21, Prop. 7.1).

Pure functions on small frozen dataclasses; no torch. Typical use::

    from t1_capacity import load, check_plan
    inputs = load("recipes/t1-122b.yaml")
    verdict = check_plan(inputs.model, inputs.plan, inputs.constants)
    verdict.fits, verdict.actor.binding.name, verdict.actor.headroom_gib

    from t1_capacity import admit_recipe  # the run's preflight: ok and one line naming the binding term
    admit_recipe(recipe).ok
"""

from t1_capacity.admit import RecipeAdmission, admit_recipe
from t1_capacity.calibrate import Calibration, CalibrationError, Measurement, fit, read_measurements
from t1_capacity.check import PlanCheck, check_plan, max_expert_parallel, max_token_wall, smallest_fix
from t1_capacity.footprint import (
    ACTOR,
    CRITIC,
    GIB,
    PAPER_CONSTANTS,
    TERM_NAMES,
    CapacityConstants,
    Footprint,
    Stage,
    Term,
    allocator_residue_bytes,
    attention_activation_bytes,
    dense_grad_bytes,
    dense_optimizer_bytes,
    dense_weight_bytes,
    expert_grad_bytes,
    expert_optimizer_bytes,
    expert_weight_bytes,
    footprint,
    logit_buffer_bytes,
    recurrent_activation_bytes,
    stages,
)
from t1_capacity.plan import Plan, PlanError, batch_splits_dp_ok, plan_problems, validate_plan
from t1_capacity.recipe import CapacityInputs, from_recipe, load
from t1_capacity.search import Candidate, SearchResult, enumerate_plans, search_plans
from t1_capacity.shapes import PAPER_MODEL, ModelShape
from t1_capacity.split import StepSplit, balance_point, optimal_split, step_time

__all__ = [
    "ACTOR",
    "CRITIC",
    "GIB",
    "PAPER_CONSTANTS",
    "PAPER_MODEL",
    "TERM_NAMES",
    "Calibration",
    "CalibrationError",
    "Candidate",
    "CapacityConstants",
    "CapacityInputs",
    "Footprint",
    "Measurement",
    "ModelShape",
    "Plan",
    "PlanCheck",
    "PlanError",
    "RecipeAdmission",
    "SearchResult",
    "Stage",
    "StepSplit",
    "Term",
    "admit_recipe",
    "allocator_residue_bytes",
    "attention_activation_bytes",
    "balance_point",
    "check_plan",
    "dense_grad_bytes",
    "dense_optimizer_bytes",
    "dense_weight_bytes",
    "enumerate_plans",
    "expert_grad_bytes",
    "expert_optimizer_bytes",
    "expert_weight_bytes",
    "fit",
    "footprint",
    "from_recipe",
    "load",
    "logit_buffer_bytes",
    "max_expert_parallel",
    "max_token_wall",
    "optimal_split",
    "plan_problems",
    "batch_splits_dp_ok",
    "read_measurements",
    "recurrent_activation_bytes",
    "search_plans",
    "smallest_fix",
    "stages",
    "step_time",
    "validate_plan",
]
