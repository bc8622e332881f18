"""The trainer's seams resolve through `t1_spec.Registry`; the torch preflight says what it cannot run."""

import pytest
import torch

from t1_spec import BackendNotBuilt, load_recipe
from t1_trainer.advantages import ADVANTAGE_ESTIMATORS, GAEEstimator, GRPOEstimator
from t1_trainer.base import TRAINER_BACKENDS, TrainerBackend
from t1_trainer.torch_backend import TorchBackend

TINY = "recipes/tiny-cpu.yaml"


@pytest.fixture
def tiny(request):
    root = request.config.rootpath

    def load(*overrides):
        return load_recipe(root / TINY, list(overrides))

    return load


def test_every_registered_trainer_backend_loads():
    assert TRAINER_BACKENDS.field == "trainer.backend"
    assert TRAINER_BACKENDS.kinds() == ("torch", "megatron")
    assert TRAINER_BACKENDS.load("torch") is TorchBackend


def test_megatron_is_registered_and_an_unknown_backend_is_refused_naming_the_field():
    # megatron was refused by the registry until its backend was built; it now loads (no megatron import)
    from t1_trainer.megatron.backend import MegatronBackend

    assert TRAINER_BACKENDS.problem("megatron") is None
    assert TRAINER_BACKENDS.load("megatron") is MegatronBackend
    with pytest.raises(BackendNotBuilt, match="trainer.backend 'deepspeed'"):
        TRAINER_BACKENDS.load("deepspeed")


def test_every_spec_estimator_has_an_implementation():
    assert ADVANTAGE_ESTIMATORS.field == "ppo.advantage.estimator"
    assert ADVANTAGE_ESTIMATORS.load("gae") is GAEEstimator and GAEEstimator.uses_critic
    assert ADVANTAGE_ESTIMATORS.load("grpo") is GRPOEstimator and not GRPOEstimator.uses_critic


def test_tiny_recipe_passes_the_torch_preflight(tiny):
    assert TorchBackend.preflight(tiny()) == []


def test_advantage_normalization_is_refused_by_the_preflight(tiny):
    lines = TorchBackend.preflight(tiny("ppo.normalize_advantages=true"))
    assert len(lines) == 1
    assert lines[0].startswith("ppo.normalize_advantages: ") and "T1 §5.2" in lines[0]


@pytest.mark.parametrize(("field", "loss"), [("kl_coef", "KL"), ("load_balancing_coef", "load-balancing")])
def test_a_loss_coefficient_with_replay_off_is_refused_as_not_built(tiny, field, loss):
    # with R3 on the spec refuses it (T1 §4.3); with R3 off the spec allows it, but torch builds neither loss
    lines = TorchBackend.preflight(tiny("ppo.routing_replay=false", f"ppo.{field}=0.01"))
    assert lines == [
        f"ppo.{field} 0.01: the torch trainer builds no {loss} loss; T1 runs with it at 0 (set it to 0)"
    ]


def test_an_invisible_cuda_device_is_refused(tiny):
    # the first index torch does not see: cuda:0 on a CPU machine
    index = torch.cuda.device_count()
    lines = TorchBackend.preflight(tiny(f"trainer.device=cuda:{index}"))
    assert lines == [
        f"trainer.device 'cuda:{index}': torch sees {index} CUDA device(s) here; "
        "use 'cpu' or a visible device"
    ]


def test_a_packed_micro_batch_is_accepted(tiny):
    # built: several samples per micro-batch run as one packed forward (t1_trainer.packing)
    assert TorchBackend.preflight(tiny("ppo.micro_batch_size=2")) == []
    assert TorchBackend.preflight(tiny("ppo.micro_batch_size=4", "ppo.micro_batch_tokens=512")) == []


def test_from_spec_builds_what_the_recipe_says(tiny):
    recipe = tiny()
    be = TorchBackend.from_spec(recipe)
    assert isinstance(be, TrainerBackend)
    assert be.ppo is recipe.ppo and be.device == torch.device(recipe.trainer.device)
    assert be.temperature == recipe.engine.sampling.temperature and be.gap_without_replay
    # no actor given: the engine's starting weights, in the recipe's dtype
    from t1_policy import build_model

    engine_model = build_model(recipe.model, seed=recipe.seed, dtype=getattr(torch, recipe.model.dtype))
    expected = engine_model.state_dict()
    got = be.export_weights()
    assert set(got) == set(expected) and all(torch.equal(got[k], expected[k]) for k in expected)
