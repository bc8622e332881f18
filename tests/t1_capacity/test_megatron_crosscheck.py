"""Cross-check with Megatron-LM's published weight + optimizer formula for a dense GPT.

Megatron-LM ``theoretical_memory_usage.py`` / ``dist_optimizer.md``: with bf16 parameters and fp32 main grads,
bytes per parameter are 18 without the distributed optimizer and 6 + 12/d with it (d = its shard count). The
per-rank parameter count below is computed independently (Megatron's own counting for a GPT with SwiGLU,
``2 h^2 (1 + g/a)`` attention, vocab-parallel embedding and untied output layer, most loaded = last stage).
"""

from dataclasses import replace

import pytest

from t1_capacity import CapacityConstants, ModelShape, Plan, footprint

GPT = ModelShape(
    vocab_size=32_000,
    hidden_size=4096,
    num_layers=32,
    num_experts=0,
    top_k=0,
    moe_intermediate_size=0,
    shared_expert_intermediate_size=11_008,  # the dense SwiGLU MLP
    num_attention_heads=32,
    num_key_value_heads=32,
    head_dim=128,
    full_attention_interval=1,
    tie_word_embeddings=False,
    qk_norm=False,
    declared_expert_params=None,
    declared_dense_params=None,
)
STATE = ("dense_weights", "dense_grads", "dense_optimizer")
NO_ACTIVATIONS = CapacityConstants(alpha=0.0, b0_gib=0.0)


def megatron_last_stage_params(tp: int, pp: int) -> float:
    h, f, v, L = 4096, 11_008, 32_000, 32
    v_pad = -(-v // (128 * tp)) * (128 * tp)
    attention = 2 * h * h * (1 + 32 / 32)  # q, k, v, o with g = a
    mlp = 3 * h * f
    norms = 2 * h
    per_layer = (attention + mlp) / tp + norms
    last = per_layer * L / pp + v_pad * h / tp + h  # output layer + final norm on the last stage
    if pp == 1:
        last += v_pad * h / tp  # the first stage's embedding is on the same rank
    return last


def state_bytes(plan: Plan) -> float:
    f = footprint(GPT, plan, NO_ACTIVATIONS, "actor", stage=plan.pp - 1)
    return sum(f.term(name).bytes for name in STATE)


def test_dense_gpt_parameter_count_is_megatrons():
    # 6.74B: the well-known LLaMA-7B-shaped count (embedding + output untied)
    total = state_bytes(Plan(tp=1, pp=1, dp=1)) / 18
    assert total == pytest.approx(megatron_last_stage_params(1, 1))
    assert total == pytest.approx(6_738_415_616, rel=1e-9)


def test_without_sharding_18_bytes_per_parameter():
    plan = Plan(tp=1, pp=1, dp=1)
    assert state_bytes(plan) == pytest.approx(18 * megatron_last_stage_params(1, 1))


@pytest.mark.parametrize(("tp", "pp", "dp"), [(1, 1, 8), (2, 2, 16), (4, 2, 4), (8, 4, 2)])
def test_distributed_optimizer_6_plus_12_over_d(tp, pp, dp):
    plan = Plan(tp=tp, pp=pp, dp=dp)
    expected = (6 + 12 / dp) * megatron_last_stage_params(tp, pp)
    assert state_bytes(plan) == pytest.approx(expected, rel=1e-12)


def test_context_parallel_joins_the_optimizer_shard_group():
    """Megatron-Core shards the dense optimizer over dp x cp (Megatron-Bridge's estimator: 6 + 12/(dp cp))."""
    plan = Plan(tp=2, pp=2, cp=2, dp=4)
    expected = (6 + 12 / 8) * megatron_last_stage_params(2, 2)
    assert state_bytes(plan) == pytest.approx(expected, rel=1e-12)


def test_hand_numbers_tp2_pp2_dp16():
    """A held number: 6.74B-shaped GPT, tp 2, pp 2, dp 16 -> 1,684,672,512 params on the last stage."""
    plan = Plan(tp=2, pp=2, dp=16)
    params = megatron_last_stage_params(2, 2)
    assert params == 1_684_672_512
    assert state_bytes(plan) == pytest.approx(11_371_539_456)  # 6.75 B/param, 10.59 GiB
    assert state_bytes(replace(plan, dp=1)) / 2**30 == pytest.approx(18 * 1_684_672_512 / 2**30)
