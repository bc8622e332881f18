"""``diff_recipes``: what an ablation changes against its base, and nothing else."""

from __future__ import annotations

from pathlib import Path

from t1_spec import ABSENT, base_of, diff_recipes, load_recipe

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def changes(name: str) -> dict[str, tuple[object, object]]:
    path = RECIPES / f"{name}.yaml"
    base = base_of(path)
    assert base == (RECIPES / "t1-122b.yaml").resolve()
    return {c.field: (c.base, c.new) for c in diff_recipes(load_recipe(base), load_recipe(path))}


def test_no_r3_changes_only_routing_replay() -> None:
    assert set(changes("no-r3")) == {"name", "description", "ppo.routing_replay"}
    assert changes("no-r3")["ppo.routing_replay"] == (True, False)


def test_cold_critic_changes_only_warmup() -> None:
    assert set(changes("cold-critic")) == {"name", "description", "critic_warmup.enabled"}


def test_grpo_diff_shows_estimator_and_geometry() -> None:
    c = changes("grpo")
    assert c["ppo.advantage.estimator"] == ("gae", "grpo")
    assert c["ppo.advantage.group_size"] == (ABSENT, 8)
    assert c["ppo.advantage.gamma"] == (1.0, ABSENT)
    assert c["ppo.samples_per_task"] == (1, 8)
    assert "ppo.clip_eps" not in c


def test_binary_tmax_diff_shows_reward_pool_and_start() -> None:
    c = changes("binary-tmax")
    assert c["reward.kind"] == ("dense", "binary")
    assert c["pool.source"] == ("T1-15k", "TMax-15k")
    assert c["reward.scale"] == (20.0, ABSENT)


def test_ratio_reward_diff() -> None:
    c = changes("ratio-reward")
    assert c["reward.kind"] == ("dense", "ratio")
    assert c["reward.coefficient"] == (ABSENT, 0.4)


def test_a_recipe_against_itself_has_no_changes(prod) -> None:
    assert diff_recipes(prod, prod) == []


def test_base_of_a_root_recipe_is_none() -> None:
    assert base_of(RECIPES / "t1-122b.yaml") is None
