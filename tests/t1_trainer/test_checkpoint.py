"""Loading a run's saved actor weights back into the recipe's model (the inverse of `save_weights`)."""

from __future__ import annotations

import pytest
import torch

from t1_policy import build_model
from t1_spec import PPOSpec
from t1_trainer.checkpoint import CheckpointMismatchError, load_actor, read_tensor_shapes
from t1_trainer.torch_backend import TorchBackend
from t1_trainer.weights import save_weights


def test_saved_actor_weights_load_back_bit_for_bit(tiny_model_spec, tmp_path):
    backend = TorchBackend(model_spec=tiny_model_spec, ppo_spec=PPOSpec(batch_size=2), seed=0)
    with torch.no_grad():  # make the saved actor differ from any seeded build
        for p in backend.actor.parameters():
            p.add_(0.01)
    save_weights(backend, tmp_path)
    model = build_model(tiny_model_spec, seed=1)
    loaded = load_actor(model, tmp_path)  # the run directory: weights/actor.safetensors
    assert loaded == tmp_path / "weights" / "actor.safetensors"
    want = backend.actor.state_dict()
    got = model.state_dict()
    assert set(got) == set(want)
    for name, tensor in want.items():
        assert torch.equal(got[name], tensor), name


def test_weights_of_another_model_section_are_refused_naming_the_shapes(tiny_model_spec, tmp_path):
    other = tiny_model_spec.model_copy(update={"hidden_size": 32})
    backend = TorchBackend(model_spec=other, ppo_spec=PPOSpec(batch_size=2), seed=0)
    paths = save_weights(backend, tmp_path)
    with pytest.raises(CheckpointMismatchError, match=r"tensors of another shape \(.*file \[.*model \["):
        load_actor(build_model(tiny_model_spec, seed=0), paths["actor"])


def test_a_critic_file_is_refused_naming_the_unknown_tensors(tiny_model_spec, tmp_path):
    backend = TorchBackend(model_spec=tiny_model_spec, ppo_spec=PPOSpec(batch_size=2), seed=0)
    paths = save_weights(backend, tmp_path)
    with pytest.raises(CheckpointMismatchError, match="tensors the model does not have"):
        load_actor(build_model(tiny_model_spec, seed=0), paths["critic"])


def test_a_missing_or_unreadable_checkpoint_is_named(tiny_model_spec, tmp_path):
    model = build_model(tiny_model_spec, seed=0)
    with pytest.raises(FileNotFoundError, match="weights/actor.safetensors"):
        load_actor(model, tmp_path)
    bad = tmp_path / "actor.safetensors"
    bad.write_bytes(b"not safetensors")
    with pytest.raises(CheckpointMismatchError, match="not a readable safetensors file"):
        load_actor(model, bad)


def test_the_header_gives_names_and_shapes_without_loading_a_tensor(tiny_model_spec, tmp_path):
    backend = TorchBackend(model_spec=tiny_model_spec, ppo_spec=PPOSpec(batch_size=2), seed=0)
    paths = save_weights(backend, tmp_path)
    shapes = read_tensor_shapes(paths["actor"])
    own = {n: tuple(t.shape) for n, t in backend.actor.state_dict().items()}
    assert shapes and all(own[n] == shape for n, shape in shapes.items())


@pytest.mark.parametrize(
    ("cut", "why"),
    [
        (lambda b: b[:5], "shorter than the 8-byte header length"),
        (lambda b: (10**9).to_bytes(8, "little") + b[8:], "runs past the end"),
        (lambda b: b[:8] + b"x" * (len(b) - 8), "not JSON"),
        (lambda b: b[: len(b) - 4], "data offsets"),  # a truncated copy: the last tensor's bytes are gone
    ],
    ids=["short", "header-length", "header-not-json", "truncated-data"],
)
def test_a_corrupt_file_is_named_with_what_is_wrong(tiny_model_spec, tmp_path, cut, why):
    backend = TorchBackend(model_spec=tiny_model_spec, ppo_spec=PPOSpec(batch_size=2), seed=0)
    good = save_weights(backend, tmp_path)["actor"].read_bytes()
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(cut(good))
    with pytest.raises(CheckpointMismatchError, match=why):
        read_tensor_shapes(bad)
