import math

import numpy as np
import pytest
import torch

from t1_r3 import RoutingMismatchError, capture_routing, moe_routers, replay_routing


def _router_outputs(model):
    """Hooks (registered after replay's) that see what each router hands its MoE block."""
    seen: list[tuple] = []
    handles = [
        r.register_forward_hook(lambda m, a, out, i=i: seen.append((i, *(o.detach().clone() for o in out))))
        for i, r in enumerate(moe_routers(model))
    ]
    return seen, handles


def test_primer_two_layer_example_selects_recorded_and_softmaxes_over_them(make_model):
    # Primer (R3 on a 2-layer model): R_1[1,1,:] = [3,5] and R_1[1,2,:] = [1,4]; layer 1 normalises exp(s)
    # over experts 3 and 5 only, layer 2 over experts 1 and 4 only.
    model = make_model(num_layers=2)
    ids = torch.tensor([[7, 11, 13]])
    with capture_routing(model) as rec, torch.no_grad():
        model(ids)
    routing = rec.rows()[:2].copy()  # [T-1, L, k]
    routing[1, 0] = [3, 5]
    routing[1, 1] = [1, 4]
    with replay_routing(model, routing), torch.no_grad():
        seen, handles = _router_outputs(model)
        model(ids)
    for h in handles:
        h.remove()
    for layer, experts in ((0, (3, 5)), (1, (1, 4))):
        _, logits, scores, idx = seen[layer]
        assert idx[1].tolist() == list(experts)
        s = logits[1].double().tolist()
        z = sum(math.exp(s[e]) for e in experts)
        expected = [math.exp(s[e]) / z for e in experts]
        assert scores[1].tolist() == pytest.approx(expected, abs=1e-6)


def test_replay_of_capture_reproduces_sampler_logprobs(model, ids):
    with capture_routing(model) as rec, torch.no_grad():
        live = model(ids).logits
    routing = rec.rows()[: ids.shape[1] - 1]
    with replay_routing(model, routing), torch.no_grad():
        replayed = model(ids).logits
    # Every position whose routing was recorded matches to float rounding (the padded last row changes which
    # tokens each expert's matmul batches together, hence not always bit-equal); the last one used padding.
    torch.testing.assert_close(replayed[:, :-1], live[:, :-1], rtol=0, atol=1e-6)
    assert (replayed[:, :-1] - live[:, :-1]).abs().max() < 1e-6


def test_capture_in_decode_matches_capture_in_prefill(model, ids):
    with capture_routing(model) as rec, torch.no_grad():
        model(ids)
    prefill = rec.rows()
    with capture_routing(model) as rec, torch.no_grad():
        out = model(ids[:, :10], use_cache=True)
        for t in range(10, ids.shape[1]):
            out = model(ids[:, t : t + 1], cache=out.cache, use_cache=True)
    decode = rec.rows()
    assert decode.shape == prefill.shape == (ids.shape[1], 4, 2)
    np.testing.assert_array_equal(decode, prefill)


def test_replay_keeps_recorded_selection_when_live_topk_changes(make_model, ids):
    model = make_model(seed=3)
    router = moe_routers(model)[0]
    inputs: list[torch.Tensor] = []
    hd = router.register_forward_hook(lambda m, a, out: inputs.append(a[0].detach().clone()))
    with capture_routing(model) as rec, torch.no_grad():
        model(ids)
    hd.remove()
    routing = rec.rows()[: ids.shape[1] - 1]
    # A small step on layer 0's router: lift one expert token 5 did not pick just past its best logit.
    h5 = inputs[0][5]
    unpicked = sorted(set(range(8)) - set(routing[5, 0].tolist()))[0]
    with torch.no_grad():
        logits5 = router.weight @ h5
        gap = float(logits5.max() - logits5[unpicked]) + 1e-3
        router.weight[unpicked] += gap * h5 / h5.dot(h5)
        with capture_routing(model) as live_rec:
            model(ids)
        assert unpicked in live_rec.rows()[5, 0].tolist()  # live top-k changed
        with replay_routing(model, routing), capture_routing(model) as replay_rec:
            model(ids)
    np.testing.assert_array_equal(replay_rec.rows()[:-1], routing)  # replay kept the recorded selection


def test_gradients_reach_router_and_only_recorded_experts(model, ids):
    with capture_routing(model) as rec, torch.no_grad():
        model(ids)
    routing = rec.rows()[: ids.shape[1] - 1]
    model.zero_grad()
    with replay_routing(model, routing):
        logits = model(ids).logits
        torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).sum().backward()
    for layer, router in enumerate(moe_routers(model)):
        assert router.weight.grad is not None and router.weight.grad.abs().sum() > 0
        experts = model.model.layers[layer].mlp.experts
        used = set(routing[:, layer].ravel().tolist())
        for e in range(8):
            touched = bool(experts.gate_up_proj.grad[e].abs().sum() > 0)
            assert touched == (e in used), (layer, e)
    model.zero_grad()


def test_wrong_row_count_raises_before_any_router_runs(model, ids):
    routing = np.zeros((ids.shape[1] - 2, 4, 2), dtype=np.int32)
    routing[..., 1] = 1
    calls: list[int] = []
    hd = moe_routers(model)[0].register_forward_pre_hook(lambda m, a: calls.append(1))
    try:
        with replay_routing(model, routing), pytest.raises(RoutingMismatchError, match="24 tokens"):
            model(ids)
    finally:
        hd.remove()
    assert calls == []


def test_wrong_row_count_raises_before_routers_also_via_base_model(model, ids):
    # Trainers call `model.model(...)` and apply the LM head themselves; the check guards that entry too.
    routing = np.tile(np.array([0, 1], dtype=np.int32), (ids.shape[1], 4, 1))  # T rows: one too many
    calls: list[int] = []
    hd = moe_routers(model)[0].register_forward_pre_hook(lambda m, a: calls.append(1))
    try:
        with replay_routing(model, routing), pytest.raises(RoutingMismatchError, match="25-token forward"):
            model.model(input_ids=ids, use_cache=False)
    finally:
        hd.remove()
    assert calls == []


def test_wrong_layer_count_and_out_of_range_ids_raise_at_entry(model):
    with pytest.raises(RoutingMismatchError, match="L=4"):
        with replay_routing(model, np.tile(np.array([0, 1], dtype=np.int32), (5, 3, 1))):
            pass
    bad = np.tile(np.array([0, 1], dtype=np.int32), (5, 4, 1))
    bad[2, 3, 1] = 8
    with pytest.raises(RoutingMismatchError, match="outside"):
        with replay_routing(model, bad):
            pass


def test_hooks_removed_after_exception_and_live_routing_returns(model, ids):
    with torch.no_grad():
        before = model(ids).logits
    routing = np.tile(np.array([6, 7], dtype=np.int32), (ids.shape[1] - 1, 4, 1))
    with pytest.raises(ValueError, match="boom"), replay_routing(model, routing):
        raise ValueError("boom")
    assert all(not r._forward_hooks for r in moe_routers(model))
    assert not model._forward_pre_hooks and not model.model._forward_pre_hooks
    with torch.no_grad():
        assert torch.equal(model(ids).logits, before)


def test_batched_replay_is_not_built(model, ids):
    routing = np.tile(np.array([0, 1], dtype=np.int32), (ids.shape[1] - 1, 4, 1))
    with replay_routing(model, routing), pytest.raises(NotImplementedError, match="batched"):
        model(ids.repeat(2, 1))


def test_activation_recomputation_replays_the_same_routing(make_model, ids):
    # With gradient checkpointing, routers run again in backward; inside the context they replay the record,
    # so the gradient equals the one without recomputation.
    grads = []
    for checkpointing in (False, True):
        model = make_model(seed=5)
        with capture_routing(model) as rec, torch.no_grad():
            model(ids)
        routing = rec.rows()[: ids.shape[1] - 1]
        with torch.no_grad():  # move the router so live routing would differ from the record
            for r in moe_routers(model):
                r.weight.mul_(-1.0)
        model.train()
        if checkpointing:
            # transformers renamed it; the old name warns (FutureWarning) in the locked 5.24
            enable = getattr(model, "activation_checkpointing_enable", None)
            if enable is not None:
                enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        calls: list[int] = []
        hd = moe_routers(model)[0].register_forward_hook(lambda m, a, out, calls=calls: calls.append(1))
        with replay_routing(model, routing):
            model(ids, use_cache=False).logits[:, :-1].logsumexp(-1).sum().backward()
        hd.remove()
        assert len(calls) == (2 if checkpointing else 1)  # the router really ran again in backward
        grads.append(moe_routers(model)[0].weight.grad.clone())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-6)


def test_replaying_a_live_record_selects_the_same_experts_and_logprobs_to_float_rounding(model, ids):
    """docs/concepts/r3.md: selection identical; numerics equal to float32 rounding (~1e-7), not bitwise."""
    with capture_routing(model) as rec, torch.no_grad():
        live = model(ids).logits
    routing = rec.rows()[: ids.shape[1] - 1]
    with capture_routing(model) as again, replay_routing(model, routing), torch.no_grad():
        replayed = model(ids).logits
    assert np.array_equal(again.rows()[: ids.shape[1] - 1], routing)  # the recorded selection is what ran
    targets = ids[0, 1:, None]
    lp_live = torch.log_softmax(live[0, :-1].double(), -1).gather(-1, targets)
    lp_replay = torch.log_softmax(replayed[0, :-1].double(), -1).gather(-1, targets)
    assert float((lp_live - lp_replay).abs().max()) < 1e-6
