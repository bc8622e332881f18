"""The shared update loop (`t1_trainer.update`) changes no number the backends computed before it existed.

`golden_update.json` was written by this file (``T1_WRITE_UPDATE_GOLDEN=1``) from the code in which the torch
and megatron backends each ran their own update loop: per scenario, every metric of the step but the times,
and a SHA-256 of the actor's and the critic's weights after it. On a machine with the same torch build and CPU
kernels (the fingerprint stored beside them) every value and digest must be equal, bit for bit; elsewhere
float kernels may round differently, and the metrics and weight sums are compared within 1e-5 instead.

The scenarios cover what the loop does: two passes, the live-routing gap (``logprob_gap_every`` 1), a
staleness-1 step whose ratio takes the rollout's log-probs and whose Eq. 25 split uses the kept behaviour
weights, the ``tis`` correction, replay off, the critic warm-up, the no-update gap measurement, and one
megatron CPU step.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from t1_spec import ModelSpec, PPOSpec, TISSpec, load_recipe
from t1_trainer.step import critic_warmup_step, ppo_step
from t1_trainer.torch_backend import TorchBackend

GOLDEN = Path(__file__).with_name("golden_update.json")
TINY_RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"
TWO_PASSES = PPOSpec(batch_size=2, actor_lr=1e-4, critic_lr=1e-3, ppo_epochs=2)
WRITE = os.environ.get("T1_WRITE_UPDATE_GOLDEN") == "1"


def _fingerprint() -> dict[str, str]:
    return {"torch": torch.__version__, "cpu": torch.backends.cpu.get_cpu_capability()}


def _digest(model: torch.nn.Module) -> dict[str, object]:
    h = hashlib.sha256()
    total = 0.0
    for name, t in sorted(model.state_dict().items()):
        if not isinstance(t, torch.Tensor):  # megatron's ``_extra_state`` entries
            continue
        t = t.detach().cpu().contiguous()
        h.update(name.encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        total += float(t.double().sum())
    return {"sha256": h.hexdigest(), "sum": total}


def _metrics(m: dict) -> dict:
    return {k: v for k, v in m.items() if not k.endswith("time_s")}


def _state(be) -> dict:
    return {"actor": _digest(be.actor), "critic": _digest(be.critic)}


@pytest.fixture(scope="module")
def full_attention(tiny_model_spec) -> ModelSpec:
    return ModelSpec(**{**tiny_model_spec.model_dump(), "full_attention_interval": 1})


def _batch(spec, sample_with):
    from t1_policy import build_model

    sampler = build_model(spec, seed=0)
    batch = [
        sample_with(sampler, prompt_len=24, turns=[(8, 6), (6, 0)], reward=r, seed=i, task_id=f"t{i}")
        for i, r in enumerate([0.2, 0.9])
    ]
    return sampler, batch


def _run_torch(spec, sample_with) -> dict:
    _, batch = _batch(spec, sample_with)
    out: dict = {}
    be = TorchBackend(model_spec=spec, ppo_spec=TWO_PASSES, seed=0, logprob_gap_every=1)
    out["gap_before"] = be.logprob_gap(batch)
    first = ppo_step(be, batch, TWO_PASSES)
    be.policy_version = 1  # as publish_weights would
    second = ppo_step(be, batch, TWO_PASSES, staleness=1)
    out["two_steps"] = {"first": _metrics(first), "second": _metrics(second), **_state(be)}
    tis = TWO_PASSES.model_copy(update={"off_policy": TISSpec(cap=1.001)})
    be = TorchBackend(model_spec=spec, ppo_spec=tis, seed=0, logprob_gap_every=2)
    ppo_step(be, batch, tis)
    be.policy_version = 1  # the second step's ratios are off 1 by the first update: some are truncated
    out["tis"] = {"step": _metrics(ppo_step(be, batch, tis, staleness=1)), **_state(be)}
    no_r3 = TWO_PASSES.model_copy(update={"routing_replay": False})
    be = TorchBackend(model_spec=spec, ppo_spec=no_r3, seed=0, logprob_gap_every=1)
    out["no_replay"] = {"step": _metrics(ppo_step(be, batch, no_r3)), **_state(be)}
    be = TorchBackend(model_spec=spec, ppo_spec=TWO_PASSES, seed=0)
    out["warmup"] = {"step": _metrics(critic_warmup_step(be, batch, TWO_PASSES)), **_state(be)}
    return out


def _run_megatron(spec, sample_with) -> dict:
    from t1_trainer.megatron.backend import MegatronBackend

    sampler, batch = _batch(spec, sample_with)
    plan = load_recipe(TINY_RECIPE).plan
    be = MegatronBackend(
        model_spec=spec, ppo_spec=TWO_PASSES, plan=plan, seed=0, actor=sampler, logprob_gap_every=1
    )
    first = ppo_step(be, batch, TWO_PASSES)
    return {"step": _metrics(first), **_state(be)}


def _same(got, want, exact: bool, where: str) -> None:
    if isinstance(want, dict):
        assert set(got) == set(want), f"{where}: keys differ: {sorted(set(got) ^ set(want))}"
        for k in want:
            if k == "sha256" and not exact:
                continue
            _same(got[k], want[k], exact, f"{where}/{k}")
    elif isinstance(want, float) and isinstance(got, float):
        if math.isnan(want):
            assert math.isnan(got), f"{where}: {got} != nan"
        elif exact:
            assert got == want, f"{where}: {got!r} != {want!r}"
        else:
            assert got == pytest.approx(want, rel=1e-5, abs=1e-7), where
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def _check(name: str, got: dict) -> None:
    got = json.loads(json.dumps(got))  # the same float and list forms the file holds
    if WRITE:
        stored = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        stored[name] = got
        stored["fingerprint"] = _fingerprint()
        GOLDEN.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
        return
    stored = json.loads(GOLDEN.read_text())
    exact = stored["fingerprint"] == _fingerprint()
    _same(got, stored[name], exact, name)


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # a thread count changes CPU reduction order, so the bits
    yield
    torch.set_num_threads(before)


def test_the_torch_backends_steps_are_unchanged_bit_for_bit(tiny_model_spec, sample_with, one_thread):
    _check("torch", _run_torch(tiny_model_spec, sample_with))


def test_the_megatron_backends_cpu_step_is_unchanged_bit_for_bit(full_attention, sample_with, one_thread):
    pytest.importorskip("megatron.core", reason="megatron-core (the t1-trainer[megatron] extra) is absent")
    _check("megatron", _run_megatron(full_attention, sample_with))


def test_the_golden_file_holds_real_updates():
    # a guard against a golden written from a run that trained nothing
    stored = json.loads(GOLDEN.read_text())
    two = stored["torch"]["two_steps"]
    assert two["first"]["actor/loss_tokens"] == 2 * 14
    version_term = two["second"]["actor/mismatch_version"]
    assert np.isfinite(version_term) and version_term > 0
    assert two["second"]["actor/routing_flip_fraction"] > 0
    assert stored["torch"]["tis"]["step"]["actor/off_policy_truncated_fraction"] > 0
    assert two["first"]["actor/ratio_mean"] != two["second"]["actor/ratio_mean"]
