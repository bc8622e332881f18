"""The rollout pieces build from the recipe's typed sections, exactly as the loop needs them (T1 §7.4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from t1_reward import AssertionOutcome, AssertionStatus, FallbackCause, Report, compute_reward
from t1_rollout.compaction import CompactionConfig
from t1_rollout.engine import ENGINES, SamplingParams
from t1_rollout.harness import Episode, HarnessConfig
from t1_rollout.scheduler import BatchResult, SchedulerConfig, collect_batch
from t1_rollout.trial import TrialLimits, TrialRecord
from t1_rollout.verify import VerifierRun
from t1_spec import DenseRewardSpec, load_recipe
from t1_tasks import load_pool
from t1_tasks.pool import StepTasks
from t1_tito import Turn, stitch

TINY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"


@pytest.fixture(scope="module")
def recipe():
    return load_recipe(TINY)


def test_harness_limits_and_scheduler_come_from_the_rollout_section(recipe):
    ro = recipe.rollout  # tiny-cpu: 3 turns, 120 s agent, 96 tokens/turn, 4096 context, 2000 B observations
    assert HarnessConfig.from_spec(ro) == HarnessConfig(
        max_turns=3,
        agent_deadline_s=120,
        max_new_tokens=96,
        context_tokens=4096,
        observation_max_bytes=2000,
        # compaction at the recipe's 3500 tokens, the summary capped like a turn (summary cap unset)
        compaction=CompactionConfig(threshold_tokens=3500, summary_max_tokens=96),
    )
    assert TrialLimits.from_spec(ro) == TrialLimits(
        remote_deadline_s=300, agent_deadline_s=120, verifier_deadline_s=60
    )
    # 5 launched for 4 admitted (ppo.batch_size), 2 in flight; creation pacing keeps the spec's 6/s, 600/min
    assert SchedulerConfig.from_spec(ro) == SchedulerConfig(
        launched=5, admitted=4, concurrency=2, creation_rate_per_s=6.0, creation_quota_per_min=600.0
    )


def test_sampling_comes_from_the_engine_section_and_the_turn_budget(recipe):
    params = SamplingParams.from_spec(recipe.engine.sampling, max_new_tokens=96, seed=11)
    assert params == SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=96, seed=11)


def test_harness_default_observation_cap_is_the_specs():
    from t1_spec import RolloutSpec

    assert HarnessConfig(
        max_turns=1, agent_deadline_s=1, max_new_tokens=1, context_tokens=2
    ).observation_max_bytes == (RolloutSpec.model_fields["observation_max_bytes"].default)


def test_the_engine_registry_holds_the_embedded_and_the_sglang_engine():
    from t1_rollout.engine.embedded import EmbeddedEngine
    from t1_rollout.engine.sglang import SGLangReplicas

    assert ENGINES.field == "engine.kind" and ENGINES.kinds() == ("embedded", "sglang")
    assert ENGINES.load("embedded") is EmbeddedEngine
    # the SGLang engine publishes weights now, so it is registered for training
    assert ENGINES.problem("sglang") is None and ENGINES.load("sglang") is SGLangReplicas


def test_embedded_engine_from_spec_serves_the_given_model_at_version_zero(recipe, tiny_model_spec):
    from t1_policy import build_model
    from t1_rollout.engine.embedded import EmbeddedEngine

    model = build_model(tiny_model_spec, seed=0)
    engine = EmbeddedEngine.from_spec(recipe.engine, model=model, seed=recipe.seed)
    try:
        assert engine.model is model and engine.weight_version == 0 and str(engine.device) == "cpu"
        assert (engine.num_layers, engine.top_k, engine.num_experts) == (4, 2, 8)  # tiny-cpu's L, k, E
    finally:
        engine.close()


def test_embedded_engine_preflight_names_an_invisible_cuda_device(recipe):
    import torch

    from t1_rollout.engine.embedded import EmbeddedEngine

    assert EmbeddedEngine.preflight(recipe) == []
    far = f"cuda:{torch.cuda.device_count()}"  # one past the last visible device
    problems = EmbeddedEngine.preflight(load_recipe(TINY, [f"engine.device={far}"]))
    assert problems == [
        f"engine.device '{far}': torch sees {torch.cuda.device_count()} CUDA device(s) here; "
        "use 'cpu' or a visible device"
    ]


# ---- a trial record writes itself out ----------------------------------------------------------------

TRAJECTORY_KEYS = [
    "trial_id",
    "task_id",
    "family",
    "status",
    "cause",
    "finish",
    "parse_failures",
    "compactions",
    "summary_turns",
    "turns",
    "prompt_tokens",
    "completion_tokens",
    "policy_versions",
    "turn_policy_versions",
    "steps",
    "resumes",
    "resampled_turns",
    "endpoint_calls",
    "messages",
    "reward",
    "assertions_passed",
    "assertions_total",
    "fallback",
    "tampered",
    "tamper_evidence",
    "outcomes",
    "verifier",
    "image_built_with_network",
    "samples",
    "tito",
    "timings_s",
]


def _finished(tmp_path) -> TrialRecord:
    turns = [
        Turn(
            prompt_ids=[1, 2, 3],
            output_ids=[4, 5],
            output_logprobs=[-0.1, -0.2],
            policy_version=2,
            finish_reason="stop",
        ),
        Turn(
            prompt_ids=[1, 2, 3, 4, 5, 6],
            output_ids=[7],
            output_logprobs=[-0.3],
            policy_version=2,
            finish_reason="stop",
        ),
    ]
    report = Report(
        outcomes=(
            AssertionOutcome("a", AssertionStatus.PASSED),
            AssertionOutcome("b", AssertionStatus.FAILED),
        ),
        binary=0.0,
        source="ctrf",
        fallback=None,
    )
    reward = compute_reward(report, DenseRewardSpec())
    episode = Episode(turns=turns, messages=[{"role": "user", "content": "hi"}], parse_failures=1)
    episode.finish = "max_turns"
    return TrialRecord(
        trial_id="t__1",
        task_id="t",
        family="scripting",
        status="finished",
        episode=episode,
        verifier=VerifierRun(out_dir=tmp_path, exit_code=1, timed_out=False, duration_s=1.0, stdout_tail=""),
        report=report,
        reward=reward,
        stitch=stitch(turns, reward=reward.value, task_id="t", family="scripting", trial_id="t__1"),
        timings={"total": 2.5},
    )


def test_to_json_has_the_trajectory_files_keys_and_values(tmp_path):
    data = _finished(tmp_path).to_json()
    assert list(data) == TRAJECTORY_KEYS
    assert (data["turns"], data["prompt_tokens"], data["completion_tokens"]) == (2, [3, 6], [2, 1])
    assert data["policy_versions"] == [2] and data["finish"] == "max_turns" and data["parse_failures"] == 1
    assert data["turn_policy_versions"] == [2, 2] and (data["steps"], data["resumes"]) == ([], 0)
    assert data["resampled_turns"] == 0 and data["endpoint_calls"] == []  # the built-in harness: no endpoint
    assert data["reward"] == pytest.approx(1 / 20) and (
        data["assertions_passed"],
        data["assertions_total"],
    ) == (1, 2)
    assert [o["name"] for o in data["outcomes"]] == ["a", "b"]
    assert data["verifier"] == {
        "exit_code": 1,
        "timed_out": False,
        "error": None,
        "signal": None,
        "dir": str(tmp_path),
        "toolchain": None,  # what T1 provided to the verifier: nothing for this hand-built run
        "network": None,  # the verifier sandbox's network as T1 set it: unknown for this hand-built run
    }
    assert data["tampered"] is False and data["tamper_evidence"] == []
    # one chunk: 3 prompt + 2 sampled + 1 observation + 1 sampled = 7 tokens, 3 of them sampled
    assert data["samples"] == [{"chunk": 0, "tokens": 7, "loss_tokens": 3}]
    assert data["tito"] == {
        "loss_tokens": 3,
        "drifted": 0,
        "splits": 0,
        "boundaries": {"strict": 1, "normalized": 0, "retokenized": 0, "split": 0, "forced_split": 0},
        "total_tokens": 7,
        "retokenized_context_tokens": 0,
        "affected_loss_tokens": 0,
    }
    assert data["compactions"] == [] and data["summary_turns"] == []
    assert data["timings_s"] == {"total": 2.5}
    json.dumps(data)  # JSON-ready as is


def test_to_json_of_a_trial_that_never_started():
    data = TrialRecord(
        trial_id="t__2", task_id="t", family="f", status="cancelled", cause="scheduler: x"
    ).to_json()
    assert list(data) == TRAJECTORY_KEYS
    assert data["finish"] is None and data["parse_failures"] == 0 and data["messages"] == []
    assert data["reward"] is None and data["assertions_passed"] is None and data["fallback"] is None
    assert data["verifier"] is None and data["tito"] is None and data["samples"] == []


def test_a_fallback_reward_leaves_the_assertion_counts_unknown():
    report = Report(outcomes=(), binary=1.0, source="reward.json", fallback=FallbackCause.MISSING)
    rec = TrialRecord(trial_id="x", task_id="t", family="f", reward=compute_reward(report, DenseRewardSpec()))
    data = rec.to_json()
    assert data["reward"] == 1.0 and data["assertions_passed"] is None and data["assertions_total"] is None


# ---- the batch's metrics ---------------------------------------------------------------------------

METRIC_KEYS = [
    "reward_mean",
    "assertions_passed_mean",
    "assertions_total_mean",
    "fallbacks",
    "report_duplicates",
    "parse_failure_rate",
    "turns_mean",
    "tokens_mean",
    "loss_tokens",
    "tito_drift_loss_region",
    "tito_drifted_tokens",
    "chunks_split",
    "tito_boundaries",
    "tito_retokenized_context_fraction",
    "samples",
    "trials_launched",
    "trials_admitted",
    "trials_finished",
    "trials_failed",
    "trials_cancelled",
    "trials_dropped_with_group",
    "samples_per_task",
    "groups_admitted",
    "groups_dropped",
    "trials_tampered",
    "failures_by_stage",
    "retention_by_family",
    "policy_versions",
    "finish_reasons",
    "chunks_per_trajectory_mean",
    "chunks_per_trajectory_max",
    "compaction_attempts",
    "compaction_succeeded",
    "compaction_failed",
    "compaction_failures",
    "compaction_failure_rate",
    "compaction_tokens_before_mean",
    "compaction_tokens_after_mean",
    "compaction_summary_tokens_mean",
    "compaction_warning",
    "retention_by_family_outcome",
    "retention_by_turns",
    "retention_by_tokens",
    "retention_by_reward",
]


def test_batch_metrics_over_the_admitted_trials(tmp_path):
    ok = _finished(tmp_path)
    failed = TrialRecord(
        trial_id="f", task_id="u", family="scripting", status="failed", cause="sandbox_start: x"
    )
    batch = BatchResult(admitted=[ok], failed=[failed], launched=2, epochs=[0, 0])
    m = batch.metrics()
    assert list(m) == METRIC_KEYS
    assert m["reward_mean"] == pytest.approx(1 / 20) and m["assertions_total_mean"] == 2
    assert m["parse_failure_rate"] == pytest.approx(1 / 2) and m["turns_mean"] == 2
    assert (m["samples"], m["loss_tokens"], m["tokens_mean"]) == (1, 3, 7)
    assert m["failures_by_stage"] == {"sandbox_start": 1} and m["retention_by_family"] == {"scripting": 0.5}
    assert (m["trials_launched"], m["trials_admitted"], m["trials_failed"]) == (2, 1, 1)
    assert m["trials_tampered"] == 0
    # one strict boundary between the trial's two turns; nothing re-tokenized
    assert m["tito_boundaries"] == {
        "strict": 1,
        "normalized": 0,
        "retokenized": 0,
        "split": 0,
        "forced_split": 0,
    }
    assert m["tito_retokenized_context_fraction"] == 0.0
    assert (
        m["report_duplicates"] == 0
        and m["policy_versions"] == [2]
        and m["finish_reasons"] == {"max_turns": 1}
    )
    json.dumps(m)


def test_an_empty_batch_reports_no_means():
    m = BatchResult().metrics()
    assert m["reward_mean"] is None and m["tokens_mean"] is None and m["tito_drift_loss_region"] is None
    assert m["tito_boundaries"] == {} and m["tito_retokenized_context_fraction"] is None


# ---- the scheduler draws rollout.launched tasks from the pool ---------------------------------------


async def test_collect_batch_draws_launched_tasks_and_keeps_their_epochs():
    pool = load_pool("builtin:mini", limit=6)
    draws, replay = StepTasks(pool, 0), StepTasks(pool, 0)
    config = SchedulerConfig(
        launched=5, admitted=4, concurrency=5, creation_rate_per_s=1000, creation_quota_per_min=60000
    )

    async def run_one(task, record):
        record.status = "finished"
        return record

    for _ in range(3):  # 15 draws over 6 tasks: the second and third batches straddle epoch boundaries
        want = replay.draw(5)
        batch = await collect_batch(draws, run_one, config)
        assert batch.launched == 5 and batch.epochs == [e for e, _ in want]
        launched = batch.admitted + batch.finished_late + batch.failed + batch.cancelled
        assert sorted(r.launch_index for r in launched) == list(range(5))
        assert {r.task_id for r in launched} == {t.id for _, t in want}


async def test_a_source_that_gives_another_count_is_refused():
    class Short:
        def draw(self, n):
            return []

    config = SchedulerConfig(
        launched=2, admitted=1, concurrency=1, creation_rate_per_s=10, creation_quota_per_min=600
    )
    with pytest.raises(ValueError, match="gave 0 tasks for rollout.launched=2"):
        await collect_batch(Short(), None, config)
