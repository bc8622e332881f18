"""The learning benchmark's shuffled-reward control (tools/bench/bench_learning_recipe.py): it wraps the
loop's `t1_trainer.step.ppo_step` and must accept every argument the loop passes, permuting rewards across
trials."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    sys.path.insert(0, str(ROOT / "tools" / "bench"))
    spec = importlib.util.spec_from_file_location(
        "bench_learning_recipe", ROOT / "tools" / "bench" / "bench_learning_recipe.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_control_forwards_every_keyword_and_permutes_rewards_across_trials(monkeypatch):
    from t1_trainer import step

    seen: dict = {}

    def fake(backend, samples, ppo_spec, **kwargs):
        seen["rewards"] = {s.trial_id: s.reward for s in samples}
        seen["kwargs"] = kwargs

    # every keyword the real step takes, as the loop passes them
    keywords = {
        name: 1
        for name, p in inspect.signature(step.ppo_step).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert keywords, "ppo_step has keyword-only parameters the loop passes"
    monkeypatch.setattr(step, "ppo_step", fake)
    original, shuffled = _bench().shuffled_ppo_step(seed=3)
    rewards = {f"t{i}": i / 10 for i in range(8)}
    # two samples (chunks) per trial share their trial's reward before and after the permutation
    samples = [SimpleNamespace(trial_id=t, reward=r) for t, r in rewards.items() for _ in range(2)]
    shuffled(None, samples, None, **keywords)
    assert seen["kwargs"] == keywords
    assert sorted(seen["rewards"].values()) == sorted(rewards.values())
    assert seen["rewards"] != rewards
    for t in rewards:
        assert len({s.reward for s in samples if s.trial_id == t}) == 1


def test_the_resolved_share_counts_scored_trials_that_passed_every_assertion(tmp_path):
    import json

    def trial(step: int, name: str, passed, total, reward, fallback=None) -> None:
        d = tmp_path / "trajectories" / f"step-{step:04d}"
        d.mkdir(parents=True, exist_ok=True)
        record = {
            "reward": reward,
            "assertions_passed": passed,
            "assertions_total": total,
            "fallback": fallback,
        }
        (d / f"{name}.json").write_text(json.dumps(record))

    trial(0, "a", 4, 4, 0.2)
    trial(0, "b", 1, 4, 0.05)
    trial(0, "c", None, None, None)  # an infrastructure failure: not scored, not counted
    trial(1, "a", 0, 0, 0.0)  # no assertion ran: not resolved
    trial(1, "b", 5, 5, 0.25)
    trial(1, "c", None, None, 1.0, fallback="no_report")  # binary fallback, outcome 1: resolved
    trial(1, "d", None, None, 0.0, fallback="no_report")  # binary fallback, outcome 0
    trial(2, "a", 3, 3, 0.15)
    (tmp_path / "trajectories" / "step-0002" / "b.json").write_text(
        '{"reward": 0.1}'
    )  # no counts: not resolved
    (tmp_path / "trajectories" / "step-0002" / "torn.json").write_text('{"rew')  # skipped
    (tmp_path / "trajectories" / "step-0003").mkdir()  # nothing scored: left out
    assert _bench().resolved_curve(tmp_path) == [0.5, 0.5, 0.5]
