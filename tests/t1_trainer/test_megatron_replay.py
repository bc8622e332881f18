"""Feeding T1's routing records into megatron-core's router replay: plain tensors, then megatron objects.

Expected rows are written out by hand from the router's token order (seq-major over ``[s, b, E]`` logits) and
the record contract (``[T - 1, L, k]``); the megatron part drives megatron-core 0.19.2's ``RouterReplay`` and
``topk_routing_with_score_function`` (the function ``TopKRouter.routing`` calls) on the CPU.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from t1_r3 import RoutingMismatchError
from t1_trainer.megatron.replay import (
    RoutingReplayError,
    clear_router_replay,
    feed_router_replay,
    moe_layer_order,
    pending_backward,
    replay_backward,
    replay_targets,
    set_replay_action,
)

L, K, E = 3, 2, 8


def record(num_tokens: int, seed: int) -> np.ndarray:
    """A valid ``[T - 1, L, k]`` record: distinct experts per row, uint8 as T1 keeps it."""
    rng = np.random.default_rng(seed)
    rows = [[rng.permutation(E)[:K] for _ in range(L)] for _ in range(num_tokens - 1)]
    return np.asarray(rows, dtype=np.uint8).reshape(num_tokens - 1, L, K)


def targets(records, seq_lens, **kw):
    kw.setdefault("moe_layer_order", range(L))
    return replay_targets(records, seq_lens=seq_lens, num_moe_layers=L, top_k=K, num_experts=E, **kw)


def test_each_router_gets_its_own_record_column_in_order():
    rec = record(5, seed=0)
    out = targets([rec], [5], moe_layer_order=[2, 0, 1])
    assert [t.shape for t in out] == [(5, K)] * 3
    assert all(t.dtype == torch.int64 for t in out)
    for t, col in zip(out, [2, 0, 1], strict=True):
        assert torch.equal(t[:4], torch.from_numpy(rec[:, col, :].astype(np.int64)))


def test_thd_concatenates_samples_each_padded_to_the_multiple():
    a, b = record(4, seed=1), record(3, seed=2)
    (t0,) = targets([a, b], [4, 3], moe_layer_order=[0], pad_to=4)
    assert t0.shape == (8, K)  # 4 + 4 rows: sample a 3 recorded + 1 last; b 2 recorded + 2
    assert torch.equal(t0[0:3], torch.from_numpy(a[:, 0].astype(np.int64)))
    assert torch.equal(t0[4:6], torch.from_numpy(b[:, 0].astype(np.int64)))


def test_sbhd_rows_are_seq_major_as_the_router_flattens_them():
    a, b = record(3, seed=3), record(2, seed=4)
    (t1,) = targets([a, b], [3, 2], moe_layer_order=[1], layout="sbhd")
    assert t1.shape == (3 * 2, K)  # S = 3, B = 2: row s * 2 + b
    assert torch.equal(t1[0], torch.from_numpy(a[0, 1].astype(np.int64)))  # s0 b0
    assert torch.equal(t1[1], torch.from_numpy(b[0, 1].astype(np.int64)))  # s0 b1
    assert torch.equal(t1[2], torch.from_numpy(a[1, 1].astype(np.int64)))  # s1 b0


def test_padding_rows_spread_over_experts_and_stay_distinct():
    # one 1-token sample padded to 64 rows: every row is padding (the last position included)
    out = targets([np.zeros((0, L, K), dtype=np.uint8)], [1], pad_to=64)
    for t in out:
        assert (t[:, 0] != t[:, 1]).all()  # distinct experts in each row
        counts = torch.bincount(t.reshape(-1), minlength=E)
        assert counts.sum() == 64 * K
        assert (counts > 0).all()  # all experts used, none carries the whole padding
        assert counts.max() <= 2 * (64 * K // E)  # an all-expert-0 padding would put 64 on expert 0


def test_padding_offset_runs_across_samples():
    # two samples' padding must not repeat the same pattern (one running offset for the batch)
    (t0,) = targets([record(2, 5), record(2, 6)], [2, 2], moe_layer_order=[0], pad_to=4)
    pad_a, pad_b = t0[1:4], t0[5:8]
    assert not torch.equal(pad_a, pad_b)


def test_sequence_parallel_ranks_take_contiguous_blocks():
    recs, lens = [record(6, 7), record(4, 8)], [6, 4]
    full = targets(recs, lens, pad_to=4)
    halves = [targets(recs, lens, pad_to=4, sp_rank=r, sp_size=2) for r in (0, 1)]
    for layer in range(L):
        assert torch.equal(torch.cat([halves[0][layer], halves[1][layer]]), full[layer])
    with pytest.raises(RoutingReplayError, match="sp_size=5"):
        targets(recs, lens, pad_to=4, sp_size=5)  # 8 + 4 = 12 rows


def test_missing_record_is_refused_naming_the_sample():
    with pytest.raises(RoutingReplayError, match="sample 1: no routing record") as info:
        targets([record(3, 0), None], [3, 4])
    assert isinstance(info.value, RoutingMismatchError)  # T1's one routing error still catches it


@pytest.mark.parametrize(
    ("bad", "lens", "pattern"),
    [
        (record(4, 0)[:, :2], [4], r"sample 0: routing shape \(3, 2, 2\)"),  # a layer short
        (record(4, 0), [5], "sample 0: routing has 3 rows but 5 tokens"),  # rows != tokens - 1
        (np.full((2, L, K), 9, dtype=np.uint8), [3], "sample 0: expert id 9"),  # id >= E
    ],
)
def test_mis_shaped_record_is_refused(bad, lens, pattern):
    with pytest.raises(RoutingReplayError, match=pattern):
        targets([bad], lens)


def test_all_zero_layer_is_refused_naming_the_layer():
    rec = record(4, 0)
    rec[:, 1] = 0
    with pytest.raises(RoutingReplayError, match=r"sample 0: MoE layers \[1\] are all zero"):
        targets([rec], [4])


def test_context_parallel_ranks_take_load_balanced_chunks_of_each_sample():
    # thd, cp = 2: each sample padded to 8 rows, cut into 4 chunks of 2; rank 0 holds chunks 0 and 3, rank 1
    # chunks 1 and 2 (written out by hand)
    recs, lens = [record(7, 9), record(5, 10)], [7, 5]
    full = targets(recs, lens, pad_to=8)
    ranks = [targets(recs, lens, pad_to=8, cp_rank=r, cp_size=2) for r in (0, 1)]
    want = {0: [0, 1, 6, 7, 8, 9, 14, 15], 1: [2, 3, 4, 5, 10, 11, 12, 13]}
    for r, got in enumerate(ranks):
        for layer in range(L):
            assert torch.equal(got[layer], full[layer][want[r]])


def test_context_parallel_then_sequence_parallel_in_sbhd():
    # sbhd, S = 8, B = 2: cp rank 1 holds positions 2-5 (rows s * 2 + b), then tp rank 1 the second half
    recs, lens = [record(7, 11), record(4, 12)], [7, 4]
    full = targets(recs, lens, pad_to=8, layout="sbhd")
    (got,) = targets(
        recs, lens, pad_to=8, layout="sbhd", cp_rank=1, cp_size=2, sp_rank=1, sp_size=2, moe_layer_order=[0]
    )
    rows = [s * 2 + b for s in (4, 5) for b in (0, 1)]
    assert torch.equal(got, full[0][rows])


def test_context_parallel_refuses_rows_that_do_not_split_into_its_chunks():
    with pytest.raises(RoutingReplayError, match="2\\*cp_size = 4"):
        targets([record(3, 0)], [3], cp_size=2, pad_to=3)  # 3 rows, not a multiple of 4
    with pytest.raises(ValueError, match="cp_rank=2"):
        targets([record(3, 0)], [3], cp_size=2, cp_rank=2, pad_to=4)


# ---- megatron-core's own RouterReplay ----

replay_mod = pytest.importorskip("megatron.core.transformer.moe.router_replay")
moe_utils = pytest.importorskip("megatron.core.transformer.moe.moe_utils")


@pytest.fixture
def instances():
    """Three megatron RouterReplay objects as three MoE layers (1-based layer numbers 1..3) create them."""
    made = [replay_mod.RouterReplay() for _ in range(L)]
    for n, inst in enumerate(made, start=1):
        inst.layer_number = n
    yield made
    for inst in made:  # leave the process-wide list as it was
        replay_mod.RouterReplay.global_router_replay_instances.remove(inst)


def route(inst, logits):
    """megatron's top-k routing of ``[tokens, E]`` logits, ``inst`` as its replay (softmax after top-k)."""
    return moe_utils.topk_routing_with_score_function(
        logits, K, score_function="softmax", router_replay=inst, dense_output=True
    )


def test_moe_layer_order_from_megatron_layer_numbers(instances):
    assert moe_layer_order(instances) == [0, 1, 2]
    assert moe_layer_order(instances[1:], moe_layers=[5, 1, 2]) == [1, 2]
    with pytest.raises(RoutingReplayError, match="decoder layer 0"):
        moe_layer_order(instances, moe_layers=[1, 2])


def test_router_picks_exactly_the_fed_experts_with_live_weights(instances):
    rec = record(6, seed=11)
    fed = feed_router_replay(
        instances, [rec], moe_layer_order=[0, 1, 2], seq_lens=[6], num_moe_layers=L, top_k=K, num_experts=E
    )
    set_replay_action(instances, "REPLAY_FORWARD")
    logits = torch.randn(6, E, generator=torch.Generator().manual_seed(0), requires_grad=True)
    probs, idx = route(instances[1], logits)
    assert torch.equal(idx[:5], torch.from_numpy(rec[:, 1].astype(np.int64)))
    assert torch.equal(idx, fed[1])
    # T1 §4.2: g_e = exp(s_e) / sum over the recorded experts of exp(s_e'), from the live logits
    gathered = logits.detach().gather(1, fed[1])
    assert torch.allclose(probs.detach(), torch.softmax(gathered, dim=-1))
    (probs * torch.arange(K)).sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0  # the router still learns
    clear_router_replay(instances)


def test_backward_recompute_replays_each_micro_batch_in_forward_order(instances):
    recs = [record(5, seed=20), record(5, seed=21)]
    kw = dict(moe_layer_order=[0, 1, 2], seq_lens=[5], num_moe_layers=L, top_k=K, num_experts=E)
    set_replay_action(instances, "REPLAY_FORWARD")
    logits = torch.randn(5, E, generator=torch.Generator().manual_seed(1))
    forward_idx = []
    for rec in recs:  # two micro-batches' forwards (1F1B keeps both in flight)
        feed_router_replay(instances, [rec], **kw)
        forward_idx.append([route(inst, logits)[1] for inst in instances])
    assert pending_backward(instances) == [2, 2, 2]
    with replay_backward(instances):  # activation recomputation in each micro-batch's backward
        for mb in range(2):
            recomputed = [route(inst, logits)[1] for inst in instances]
            for layer in range(L):
                assert torch.equal(recomputed[layer], forward_idx[mb][layer])
    assert pending_backward(instances) == [0, 0, 0]
    assert all(i.router_replay_action == replay_mod.RouterReplayAction.REPLAY_FORWARD for i in instances)
    clear_router_replay(instances)
    assert all(i.router_replay_action is None and i.target_topk_idx is None for i in instances)


def test_feed_refuses_a_missing_record_before_touching_any_router(instances):
    with pytest.raises(RoutingReplayError, match="sample 0"):
        feed_router_replay(
            instances,
            [None],
            moe_layer_order=[0, 1, 2],
            seq_lens=[4],
            num_moe_layers=L,
            top_k=K,
            num_experts=E,
        )
    assert pending_backward(instances) == [0, 0, 0]
    with pytest.raises(RoutingReplayError, match="3 router replay instances"):
        feed_router_replay(
            instances,
            [record(3, 0)],
            moe_layer_order=[0],
            seq_lens=[3],
            num_moe_layers=L,
            top_k=K,
            num_experts=E,
        )


@pytest.mark.parametrize("bad", [0.5, True, "1"])
def test_context_parallel_refuses_a_rank_that_is_not_an_integer(bad):
    # 0.5 used to pass the range check and select rows between chunks, silently
    with pytest.raises(ValueError, match="cp_rank must be an integer"):
        targets([record(7, 0)], [7], cp_size=2, cp_rank=bad, pad_to=8)


def test_context_parallel_split_error_names_the_sample():
    # thd: the second sample's 5 rows (pad_to 1) do not split into 4 chunks, the first's 8 do
    with pytest.raises(RoutingReplayError, match="sample 1: 5 routed rows"):
        targets([record(8, 0), record(5, 1)], [8, 5], cp_size=2, pad_to=1)
    with pytest.raises(RoutingReplayError, match="the common length: 6 routed rows"):
        targets([record(5, 0)], [5], cp_size=2, pad_to=6, layout="sbhd")


def test_sequence_parallel_rank_must_be_an_integer():
    recs, lens = [record(6, 7)], [6]
    with pytest.raises(ValueError, match="sp_rank must be an integer"):
        targets(recs, lens, pad_to=4, sp_rank=0.5, sp_size=2)
