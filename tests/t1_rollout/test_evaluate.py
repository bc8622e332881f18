"""Evaluation (T1 §6): pass@k, resolved rate, failures counted apart, the oracle and do-nothing policies."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
from fractions import Fraction
from pathlib import Path

import pytest

from t1_reward import FallbackCause, RewardResult
from t1_rollout.eval_metrics import EvalTrial, pass_at_k, summarize
from t1_rollout.evaluate import CheckPolicy, EvalSettings, evaluate_pool, is_resolved
from t1_spec import DenseRewardSpec, load_recipe
from t1_tasks import load_pool

REPO = Path(__file__).resolve().parents[2]
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)


def brute_force_pass_at_k(outcomes: list[bool], k: int) -> Fraction:
    """The share of all k-subsets of the attempts that hold at least one resolved attempt (exact)."""
    subsets = list(itertools.combinations(range(len(outcomes)), k))
    hits = sum(any(outcomes[i] for i in s) for s in subsets)
    return Fraction(hits, len(subsets))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_pass_at_k_is_the_share_of_k_subsets_with_a_success(n):
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(float(brute_force_pass_at_k(outcomes, k)), abs=1e-12)


def test_pass_at_k_refuses_k_beyond_the_attempts():
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(3, 1, 4)


def _t(task, attempt, resolved=False, status="finished", reward=0.0, cause=None, cat="a", diff="easy"):
    return EvalTrial(
        task, cat, diff, attempt, status, cause, resolved, None if status == "failed" else reward,
        None, None, 2, 100, 1.0,
    )  # fmt: skip


def test_pool_pass_at_k_averages_the_tasks_of_a_brute_force_count():
    # task x: 1 of 3 resolved; task y: 3 of 3; task z: 0 of 3 (T1 §6: 3 attempts per task)
    outcomes = {"x": [True, False, False], "y": [True, True, True], "z": [False, False, False]}
    trials = [_t(task, i, resolved=r) for task, rs in outcomes.items() for i, r in enumerate(rs)]
    s = summarize(trials, attempts=3)
    for k in (1, 2, 3):
        expected = sum(brute_force_pass_at_k(rs, k) for rs in outcomes.values()) / 3
        assert s["pass_at_k"][k] == pytest.approx(float(expected))
    assert s["resolved_rate"] == pytest.approx(4 / 9)  # resolved trials over all finished trials


def test_failed_trials_are_counted_apart_and_enter_no_denominator():
    trials = [
        _t("x", 0, resolved=True, reward=1.0),
        _t("x", 1, status="failed", cause="sandbox_start: SandboxError: no bwrap"),
        _t("y", 0, resolved=False, reward=0.5, cat="b", diff="hard"),
        _t("y", 1, status="failed", cause="sandbox_start: SandboxError: no bwrap", cat="b", diff="hard"),
    ]
    s = summarize(trials, attempts=2)
    assert (s["trials"], s["failed"]) == (2, 2)
    assert s["resolved_rate"] == 0.5 and s["mean_reward"] == 0.75
    assert s["failed_causes"] == {"sandbox_start": 2}
    # with one finished attempt per task, pass@2 has no task to average (None, not 0)
    assert s["pass_at_k"] == {1: 0.5, 2: None}
    assert s["per_category"]["b"]["resolved_rate"] == 0.0
    assert s["per_difficulty"]["easy"]["failed"] == 1


def test_all_failed_means_no_figure_rather_than_zero():
    s = summarize([_t("x", 0, status="failed", cause="verifier: crashed")], attempts=1)
    assert s["resolved_rate"] is None and s["mean_reward"] is None and s["pass_at_k"] == {1: None}


def test_resolved_needs_every_assertion_or_the_binary_outcome():
    task = load_pool("builtin:mini").tasks[0]
    n = task.n_assertions
    assert is_resolved(RewardResult(n / 20, n, n, None, None, "dense"), task)
    assert not is_resolved(RewardResult((n - 1) / 20, n - 1, n, None, None, "dense"), task)
    # a report that lost assertions resolves nothing, even if all it holds passed
    assert not is_resolved(RewardResult((n - 1) / 20, n - 1, n - 1, None, None, "dense"), task)
    assert is_resolved(RewardResult(1.0, 0, 0, 1.0, FallbackCause.MISSING, "binary_fallback"), task)
    assert not is_resolved(RewardResult(0.0, 0, 0, 0.0, FallbackCause.MISSING, "binary_fallback"), task)


def test_settings_cap_the_context_at_the_model_and_compact_at_the_training_threshold():
    recipe = load_recipe(REPO / "recipes" / "tiny-cpu.yaml")  # evaluation.context_tokens 96,000 by default
    s = EvalSettings.from_recipe(recipe)
    assert s.harness.context_tokens == recipe.model.max_position_embeddings == 8192
    assert s.harness.max_turns == 60 and s.limits.verifier_deadline_s == 900.0
    assert (s.sampling.temperature, s.sampling.top_p, s.sampling.top_k) == (0.1, 0.95, 20)
    assert any(n.startswith("evaluation.context_tokens 96000: capped") for n in s.notes)
    # evaluation.compaction (on by default, T1 §6): the training threshold and summary cap, no note needed
    assert (s.harness.compaction.threshold_tokens, s.harness.compaction.summary_max_tokens) == (3500, 96)
    assert not any(n.startswith("evaluation.compaction") for n in s.notes)
    off = EvalSettings.from_recipe(
        load_recipe(REPO / "recipes" / "tiny-cpu.yaml", ["evaluation.compaction=false"])
    )
    assert off.harness.compaction is None
    own = load_recipe(REPO / "recipes" / "tiny-cpu.yaml", ["evaluation.compaction_threshold_tokens=6000"])
    assert EvalSettings.from_recipe(own).harness.compaction.threshold_tokens == 6000


def test_a_threshold_that_leaves_no_room_in_a_capped_context_is_lowered_and_said():
    # 8192 - 96 (a turn) - 96 (a summary) = 8000 tokens: the highest threshold that still fits both
    recipe = load_recipe(REPO / "recipes" / "tiny-cpu.yaml", ["evaluation.compaction_threshold_tokens=8100"])
    s = EvalSettings.from_recipe(recipe)
    assert s.harness.compaction.threshold_tokens == 8192 - 96 - 96
    assert any(n.startswith("evaluation.compaction_threshold_tokens 8100: lowered to 8000") for n in s.notes)


@needs_bwrap
@pytest.mark.parametrize(("policy", "rate"), [("oracle", 1.0), ("do-nothing", 0.0)])
def test_oracle_resolves_every_task_and_do_nothing_none(policy, rate, tmp_path):
    from t1_sandbox.local import LocalSandbox

    pool = load_pool("builtin:mini", limit=2)
    reward = DenseRewardSpec()
    report = asyncio.run(
        evaluate_pool(
            pool,
            CheckPolicy(policy, LocalSandbox, reward),
            attempts=1,
            concurrency=2,
            total_timeout_s=300,
            work_dir=tmp_path,
        )
    )
    s = report.summary()
    assert (s["trials"], s["failed"]) == (2, 0), s["failed_causes"]
    assert s["resolved_rate"] == rate and s["pass_at_k"] == {1: rate}
    if policy == "oracle":  # every assertion passed: P / S with S = 20 (T1 §5.2, Eq. 20)
        expected = sum(t.n_assertions for t in pool.tasks) / 20 / 2
        assert s["mean_reward"] == pytest.approx(expected)


@needs_bwrap
def test_a_trial_cut_by_the_total_timeout_is_a_failure_with_its_cause(tmp_path):
    from t1_sandbox.local import LocalSandbox

    report = asyncio.run(
        evaluate_pool(
            load_pool("builtin:mini", limit=1),
            CheckPolicy("oracle", LocalSandbox, DenseRewardSpec()),
            attempts=1,
            concurrency=1,
            total_timeout_s=0.01,
            work_dir=tmp_path,
        )
    )
    s = report.summary()
    assert (s["trials"], s["failed"]) == (0, 1)
    assert list(s["failed_causes"]) == ["evaluation"]
