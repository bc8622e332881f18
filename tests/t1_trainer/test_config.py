"""The recipe's PPO spec reaches the trainer unchanged (T1 §4.5 defaults); refused settings stay refused."""

import pytest

from t1_spec import GRPOAdvantageSpec, PPOSpec
from t1_trainer.config import PpoHyperparams
from t1_trainer.errors import TrainerConfigError


def test_recipe_spec_maps_to_the_papers_settings():
    hp = PpoHyperparams.from_spec(PPOSpec(batch_size=2))
    assert (hp.estimator, hp.gamma, hp.lam) == ("gae", 1.0, 1.0)
    assert (hp.clip_eps, hp.value_clip, hp.actor_lr, hp.critic_lr) == (0.2, 0.2, 1.0e-6, 1.5e-5)
    assert (hp.adam_betas, hp.weight_decay, hp.routing_replay) == ((0.9, 0.98), 0.1, True)
    assert not hp.normalize_advantages and hp.kl_coef == 0 and hp.load_balancing_coef == 0


def test_nested_advantage_section_is_read():
    spec = PPOSpec(batch_size=2, advantage=GRPOAdvantageSpec(group_size=4), samples_per_task=4)
    assert PpoHyperparams.from_spec(spec).estimator == "grpo"


def test_whitening_from_the_recipe_is_refused():
    with pytest.raises(TrainerConfigError, match="normalize_advantages"):
        PpoHyperparams.from_spec(PPOSpec(batch_size=2, normalize_advantages=True))
