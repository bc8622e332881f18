"""rollout.harness.kind through the shared preflight and the evaluation settings: the harness is honoured."""

from __future__ import annotations

import sys
from pathlib import Path

from t1.run.preflight import preflight
from t1_rollout.evaluate import EvalSettings
from t1_rollout.external import ExternalHarness
from t1_rollout.harness import BuiltinHarness
from t1_spec import load_recipe

TINY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"


def _external(program: str):
    return load_recipe(TINY, ["rollout.harness.kind=external", f"rollout.harness.command=[{program},--x]"])


def test_preflight_refuses_an_external_harness_whose_program_is_missing():
    problems = preflight(_external("/nonexistent/agent-bin")).problems
    assert any("rollout.harness.command" in p and "/nonexistent/agent-bin" in p for p in problems), problems


def test_preflight_accepts_an_external_harness_whose_program_exists():
    problems = preflight(_external(sys.executable)).problems
    assert not any("rollout.harness" in p for p in problems), problems


def test_evaluation_runs_the_recipes_harness():
    assert isinstance(EvalSettings.from_recipe(load_recipe(TINY)).harness.agent, BuiltinHarness)
    agent = EvalSettings.from_recipe(_external(sys.executable)).harness.agent
    assert agent == ExternalHarness((sys.executable, "--x"))
