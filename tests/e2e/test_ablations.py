"""The paper's ablations run on the CPU at small size: GRPO groups, binary and ratio rewards, cold and warm
critic.

Each runs its `recipes/tiny-*.yaml` for one PPO step with one short turn per trial (T1 §4.5, §5, §9, Fig. 7
and 16). Expected rewards are recomputed here from each trial's own assertion counts with the paper's
formulas, not read back from the code under test.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t1.cli import app

REPO = Path(__file__).resolve().parents[2]
SHORT = ["ppo.steps=1", "rollout.max_turns=1", "rollout.max_new_tokens=16", "trainer.checkpoint_every=0"]
EV_KEYS = (
    "critic/ev_token_pre",
    "critic/ev_token_post",
    "critic/ev_trajectory_pre",
    "critic/ev_trajectory_post",
)


def _train(recipe: str, tmp_path: Path, *overrides: str) -> tuple[list[dict], list[dict]]:
    """Runs ``t1 train recipes/<recipe>.yaml`` shortened; returns the metrics rows and the PPO trials."""
    runs = tmp_path / "runs"
    args = ["train", str(REPO / "recipes" / f"{recipe}.yaml"), f"logging.run_root={runs}", *SHORT, *overrides]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (run,) = runs.iterdir()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trials = [json.loads(p.read_text()) for p in sorted((run / "trajectories" / "step-0000").glob("*.json"))]
    return rows, trials


def _finished(trials: list[dict]) -> list[dict]:
    return [t for t in trials if t["status"] == "finished" and t["reward"] is not None]


@pytest.mark.e2e
def test_grpo_runs_whole_groups_of_two_with_a_zero_mean_group_baseline(tmp_path):
    # 2 tasks x 2 samples, no oversampling: both groups must close and be admitted whole (T1 §9)
    rows, trials = _train("tiny-grpo", tmp_path, "rollout.launched=4")
    (row,) = rows
    assert row["phase"] == "ppo" and row["samples_per_task"] == 2
    assert Counter(t["task_id"] for t in trials) == Counter({t: 2 for t in {t["task_id"] for t in trials}})
    assert len(trials) == 4 and len({t["trial_id"] for t in trials}) == 4
    admitted = row["groups_admitted"]
    assert admitted + row["groups_dropped"] == 2 and row["trials_admitted"] == 2 * admitted
    assert row["trials_admitted"] + row["trials_dropped_with_group"] + row["trials_failed"] == 4
    assert (row["grpo/groups"], row["grpo/group_size_min"], row["grpo/group_size_max"]) == (admitted, 2, 2)
    assert row["grpo/group_advantage_mean_abs_max"] < 1e-6  # the group baseline: mean advantage 0
    # a group whose two rewards are equal carries no gradient (T1 §9); recount from the trials themselves
    by_task: dict[str, set[float]] = {}
    for t in _finished(trials):
        by_task.setdefault(t["task_id"], set()).add(t["reward"])
    if row["groups_dropped"] == 0:
        assert row["grpo/uniform_groups"] == sum(len(r) == 1 for r in by_task.values())
    assert not any(k.startswith("critic/") for k in row)  # no critic trained, no EV
    assert row["weight_version_after"] == 1


@pytest.mark.e2e
def test_binary_reward_is_one_only_when_every_assertion_passes_with_a_cold_critic(tmp_path):
    rows, trials = _train("tiny-binary", tmp_path, "ppo.batch_size=2", "rollout.launched=2")
    (row,) = rows  # no warm-up row: the critic starts cold (T1 §4.5, Fig. 7)
    assert row["phase"] == "ppo"
    finished = _finished(trials)
    assert finished
    for t in finished:
        assert t["reward"] in (0.0, 1.0)
        if t["assertions_total"]:
            assert t["reward"] == float(t["assertions_passed"] == t["assertions_total"])
    for key in EV_KEYS:
        assert key in row
    assert _same(row["critic/explained_variance"], row["critic/ev_token_pre"])


@pytest.mark.e2e
def test_ratio_reward_is_max_of_outcome_and_scaled_pass_ratio(tmp_path):
    rows, trials = _train("tiny-ratio", tmp_path, "ppo.batch_size=2", "rollout.launched=2")
    (row,) = rows
    finished = _finished(trials)
    assert finished
    for t in finished:
        p, n = t["assertions_passed"], t["assertions_total"]
        assert 0.0 <= t["reward"] <= 1.0  # clamped to [0, max(1, b)] with b in {0, 1} (T1 §5)
        if n and t["fallback"] is None:
            b = float(p == n)
            assert t["reward"] == pytest.approx(min(max(b, 0.4 * p / n), max(1.0, b)))
    assert row["reward_mean"] == pytest.approx(sum(t["reward"] for t in finished) / len(finished))


@pytest.mark.e2e
def test_warm_critic_trains_alone_for_an_epoch_before_the_first_policy_step(tmp_path):
    # 2 tasks, 2 launched a step: one warm-up rollout covers the pool once (T1 §4.5: one epoch)
    rows, _ = _train("tiny-warm-critic", tmp_path, "pool.limit=2", "ppo.batch_size=2", "rollout.launched=2")
    assert [r["phase"] for r in rows] == ["critic_warmup", "ppo"]
    warm, ppo = rows
    assert "weight_version_after" not in warm  # no actor step, nothing published during warm-up
    assert ppo["weight_version_after"] == 1
    for key in EV_KEYS:
        assert key in warm and key in ppo
    # the row's EV per token is the pre-update one, as before the per-trajectory values existed
    assert _same(ppo["critic/explained_variance"], ppo["critic/ev_token_pre"])
    # warm-up trains the critic alone on everything it rolled out: no actor metric, every sample used
    assert not any(k.startswith("actor/") for k in warm)
    assert warm["trainer/samples"] == warm["samples"] and math.isfinite(warm["critic/value_loss"])


def _same(a: float | None, b: float | None) -> bool:
    """Equal, or both undefined (nan, or None once written to JSON)."""
    undefined = {a is None or (isinstance(a, float) and math.isnan(a)), b is None or math.isnan(b or 0.0)}
    return undefined == {True} or a == b
