"""The recipe's PPO spec reaches the trainer unchanged (T1 §4.5 defaults); refused settings stay refused."""

import pytest

from t1_spec import GRPOAdvantageSpec, PPOSpec
from t1_trainer.advantages import ADVANTAGE_ESTIMATORS, GRPOEstimator
from t1_trainer.errors import TrainerConfigError
from t1_trainer.torch_backend import TorchBackend


def test_recipe_spec_maps_to_the_papers_settings(tiny_model_spec):
    spec = PPOSpec(batch_size=2)
    assert (spec.advantage.estimator, spec.advantage.gamma, spec.advantage.lam) == ("gae", 1.0, 1.0)
    assert (spec.clip_eps, spec.value_clip, spec.actor_lr, spec.critic_lr) == (0.2, 0.2, 1.0e-6, 1.5e-5)
    assert (spec.adam_betas, spec.weight_decay, spec.routing_replay) == ((0.9, 0.98), 0.1, True)
    assert not spec.normalize_advantages and spec.kl_coef == 0 and spec.load_balancing_coef == 0
    # the backend reads the spec itself: its optimizers carry the paper's settings
    be = TorchBackend(model_spec=tiny_model_spec, ppo_spec=spec, seed=0)
    assert be.ppo is spec
    for opt, lr in ((be.actor_opt, 1.0e-6), (be.critic_opt, 1.5e-5)):
        decay, no_decay = opt.param_groups
        assert (decay["lr"], decay["betas"], decay["weight_decay"]) == (lr, (0.9, 0.98), 0.1)
        assert no_decay["weight_decay"] == 0.0  # norms, biases and gates are not decayed


def test_nested_advantage_section_is_read():
    spec = PPOSpec(batch_size=2, advantage=GRPOAdvantageSpec(group_size=4), samples_per_task=4)
    assert ADVANTAGE_ESTIMATORS.load(spec.advantage.estimator) is GRPOEstimator


def test_whitening_from_the_recipe_is_refused(tiny_model_spec):
    with pytest.raises(TrainerConfigError, match="normalize_advantages"):
        TorchBackend(
            model_spec=tiny_model_spec, ppo_spec=PPOSpec(batch_size=2, normalize_advantages=True), seed=0
        )
