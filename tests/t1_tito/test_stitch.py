"""Stitching turns into samples with four aligned streams, routing tiling, reward placement, drift audit."""

import dataclasses

import numpy as np
import pytest

from t1_tito import (
    ChatTemplate,
    RoutingMismatchError,
    StreamMisalignmentError,
    TitoSession,
    Turn,
    audit_drift,
    load_tokenizer,
    stitch,
)

L, K = 2, 3
META = {"task_id": "bisect-01", "family": "version_control", "trial_id": "trial-7"}


def rows(start: int, end: int, offset: int = 0) -> np.ndarray:
    """Routing rows for positions [start, end): every expert id of row j encodes its position j (+ offset)."""
    return (np.arange(start, end, dtype=np.int32)[:, None, None] + offset) * np.ones(
        (1, L, K), dtype=np.int32
    )


def turn(prompt, output, *, version=1, routed=True, start=0, finish="stop", offset=0):
    logprobs = [-0.1 * (i + 1) for i in range(len(output))]
    end = len(prompt) + len(output) - 1
    return Turn(
        prompt_ids=list(prompt),
        output_ids=list(output),
        output_logprobs=logprobs,
        routed_experts=rows(start, end, offset) if routed else None,
        routed_experts_start_len=start,
        policy_version=version,
        finish_reason=finish,
    )


def test_strict_prefix_keeps_sampled_ids_primer_example():
    # Primer (T1 §4.1 worked example): T_1 = p_1 || a_1 is a prefix of p_2 with no remaining context, so the
    # stream is T_1 || a_2 and exactly the three sampled positions carry mask 1 and their log-probs.
    # (The primer's concrete id lists are lost from the text; these ids satisfy every stated condition.)
    p1, a1 = [11, 12, 13], [21, 22]
    p2, a2 = p1 + a1, [23]
    result = stitch([turn(p1, a1), turn(p2, a2, start=len(p2) - 1)], reward=0.25, **META)
    (s,) = result.samples
    assert s.token_ids.tolist() == [11, 12, 13, 21, 22, 23]
    assert s.loss_mask.tolist() == [0, 0, 0, 1, 1, 1]
    assert s.rollout_logprobs.tolist() == pytest.approx([0, 0, 0, -0.1, -0.2, -0.1])
    assert result.chunks_split == 0
    assert result.audit.drift_rate == 0.0 and result.audit.loss_tokens == 3


def test_observation_context_enters_masked():
    p1, a1 = [1, 2], [3, 4]
    obs = [90, 91, 92]
    p2, a2 = p1 + a1 + obs, [5]
    (s,) = stitch([turn(p1, a1), turn(p2, a2, start=len(p1 + a1) - 1)], reward=1.0, **META).samples
    assert s.token_ids.tolist() == [1, 2, 3, 4, 90, 91, 92, 5]
    assert s.loss_mask.tolist() == [0, 0, 1, 1, 0, 0, 0, 1]
    assert s.rollout_logprobs[4:7].tolist() == [0, 0, 0]


def test_broken_prefix_splits_into_a_new_chunk():
    p1, a1 = [1, 2], [3, 4]
    p2 = [1, 2, 3, 99, 7]  # the harness re-encoded a_1 differently: not a prefix
    p3 = p2 + [8] + [9]  # turn 3 extends the new chunk
    turns = [turn(p1, a1), turn(p2, [8]), turn(p3, [10], start=len(p2) + 1 - 1)]
    result = stitch(turns, reward=0.35, **META)
    assert result.chunks_split == 1 and result.audit.splits == 1 and result.audit.chunks == 2
    first, second = result.samples
    assert first.token_ids.tolist() == [1, 2, 3, 4]
    assert second.token_ids.tolist() == [1, 2, 3, 99, 7, 8, 9, 10]
    assert second.loss_mask.tolist() == [0, 0, 0, 0, 0, 1, 0, 1]
    assert [s.chunk_index for s in result.samples] == [0, 1]
    assert {s.trial_id for s in result.samples} == {"trial-7"}
    assert result.audit.drifted_loss_tokens == 0


def test_reward_sits_on_last_sampled_token_of_each_chunk():
    p1, a1 = [1, 2], [3, 4]
    turns = [turn(p1, a1), turn([5, 6, 7], [8, 9])]  # split
    result = stitch(turns, reward=0.5, **META)
    for s in result.samples:
        last_sampled = max(i for i, m in enumerate(s.loss_mask.tolist()) if m == 1)
        assert s.reward_index == last_sampled and s.reward == 0.5


def test_reward_index_skips_trailing_context():
    # A chunk ends in masked context only if a later turn had no output; the reward stays on a sampled token.
    turns = [turn([1, 2], [3]), turn([1, 2, 3, 4, 5], [])]
    (s,) = stitch(turns, reward=1.0, **META).samples
    assert s.token_ids.tolist() == [1, 2, 3, 4, 5] and s.reward_index == 2


def test_routing_rows_concatenate_when_start_len_matches():
    p1, a1 = [1, 2, 3], [4, 5]
    p2, a2 = p1 + a1 + [6], [7, 8]
    turns = [turn(p1, a1), turn(p2, a2, start=len(p1 + a1) - 1)]
    (s,) = stitch(turns, reward=0.0, **META).samples
    assert s.routing.dtype == np.int32 and s.routing.shape == (s.num_tokens - 1, L, K)
    assert (s.routing[:, 0, 0] == np.arange(s.num_tokens - 1)).all()  # each row still at its own position


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_a_compact_routing_record_stays_compact_in_the_sample(dtype):
    # One byte per expert id for E <= 256 (T1 §4.2, t1_r3.routing_dtype): stitching must not widen it.
    p1, a1 = [1, 2, 3], [4, 5]
    p2, a2 = p1 + a1 + [6], [7, 8]
    turns = [turn(p1, a1), turn(p2, a2, start=len(p1 + a1) - 1)]
    for t in turns:
        t.routed_experts = t.routed_experts.astype(dtype)
    (s,) = stitch(turns, reward=0.0, **META).samples
    assert s.routing.dtype == dtype and s.routing.shape == (s.num_tokens - 1, L, K)
    assert (s.routing[:, 0, 0] == np.arange(s.num_tokens - 1)).all()
    s.validate()


def test_full_sequence_routing_supersedes_earlier_rows():
    p1, a1 = [1, 2, 3], [4, 5]
    p2, a2 = p1 + a1 + [6], [7]
    turns = [turn(p1, a1), turn(p2, a2, start=0, offset=100)]
    (s,) = stitch(turns, reward=0.0, **META).samples
    assert (s.routing[:, 0, 0] == np.arange(s.num_tokens - 1) + 100).all()


@pytest.mark.parametrize(("start", "kind"), [(7, "gap"), (2, "overlap")])
def test_routing_gap_or_overlap_raises(start, kind):
    p1, a1 = [1, 2, 3], [4, 5]  # covers rows [0, 4)
    p2 = p1 + a1 + [6, 6, 6]
    with pytest.raises(RoutingMismatchError, match=kind):
        stitch([turn(p1, a1), turn(p2, [7], start=start)], reward=0.0, **META)


def test_missing_routing_in_a_routed_chunk_raises():
    p1, a1 = [1, 2], [3]
    p2 = p1 + a1 + [4]
    with pytest.raises(RoutingMismatchError, match="turn 1"):
        stitch([turn(p1, a1), turn(p2, [5], routed=False)], reward=0.0, **META)


def test_missing_routing_healed_by_a_later_full_record():
    p1, a1 = [1, 2], [3]
    p2 = p1 + a1 + [4]
    p3 = p2 + [5] + [6]
    turns = [turn(p1, a1), turn(p2, [5], routed=False), turn(p3, [7], start=0)]
    (s,) = stitch(turns, reward=0.0, **META).samples
    assert s.routing.shape[0] == s.num_tokens - 1


def test_split_chunk_needs_routing_from_position_zero():
    with pytest.raises(RoutingMismatchError, match="gap"):
        stitch([turn([1, 2], [3]), turn([9, 9, 9], [4], start=2)], reward=0.0, **META)


def test_routing_shape_change_raises():
    p1, a1 = [1, 2], [3]
    t2 = turn(p1 + a1 + [4], [5], start=2)
    t2.routed_experts = np.zeros((2, L + 1, K), dtype=np.int32)
    with pytest.raises(RoutingMismatchError, match="L, k"):
        stitch([turn(p1, a1), t2], reward=0.0, **META)


def test_turn_routing_rows_must_match_its_tokens():
    t = turn([1, 2], [3])
    t.routed_experts = rows(0, 5)
    with pytest.raises(RoutingMismatchError, match="expected"):
        stitch([t], reward=0.0, **META)


def test_logprob_count_must_match_output():
    t = turn([1, 2], [3, 4])
    t.output_logprobs = [-0.5]
    with pytest.raises(StreamMisalignmentError, match="log-probs"):
        stitch([t], reward=0.0, **META)


def test_unrouted_trajectory_has_no_routing():
    (s,) = stitch([turn([1, 2], [3], routed=False)], reward=0.0, **META).samples
    assert s.routing is None


def test_mixed_policy_versions_record_the_oldest_and_flag():
    p1, a1 = [1, 2], [3]
    turns = [turn(p1, a1, version=4), turn(p1 + a1 + [4], [5], start=2, version=3)]
    (s,) = stitch(turns, reward=0.0, **META).samples
    assert s.policy_version == 3 and s.policy_versions_mixed
    (single,) = stitch([turn(p1, a1, version=4)], reward=0.0, **META).samples
    assert single.policy_version == 4 and not single.policy_versions_mixed


def test_chunk_without_sampled_tokens_is_dropped_and_counted():
    result = stitch([turn([1, 2], [])], reward=1.0, **META)
    assert result.samples == [] and result.audit.dropped_empty_chunks == 1


def test_repair_cases_beyond_strict_need_their_bounds_and_the_tokenizer():
    # Built (test_boundary_cases.py); without the recipe's bounds or the tokenizer they refuse to guess.
    for mode in ("normalized", "retokenized"):
        with pytest.raises(ValueError, match="normalize_max_s"):
            stitch([turn([1], [2])], reward=0.0, repair=mode, **META)
        with pytest.raises(ValueError, match="tokenizer"):
            stitch([turn([1], [2])], reward=0.0, repair=mode, normalize_max_s=96, normalize_max_u=16, **META)
    with pytest.raises(ValueError, match="unknown repair"):
        stitch([turn([1], [2])], reward=0.0, repair="lenient", **META)


@pytest.fixture(scope="module")
def real_trajectory():
    """Three turns built by a TitoSession over the real tokenizer and template, with routing per turn."""
    tok, tpl = load_tokenizer(), ChatTemplate()
    session = TitoSession(tok, tpl)
    replies = [
        '{"commands": [{"keystrokes": "git log --oneline | wc -l\\n"}]}',
        '{"task_complete": true}',
        "ok",
    ]
    observations = ["$ git log --oneline | wc -l\n512", "Are you sure?", "Done."]
    prompt = session.start([{"role": "system", "content": "agent"}, {"role": "user", "content": "Bisect."}])
    turns, covered = [], 0
    for i, (reply, obs) in enumerate(zip(replies, observations, strict=True)):
        sampled = tok.encode(reply) + [tok.im_end_id]
        turns.append(turn(prompt, sampled, start=covered, version=2))
        covered = len(prompt) + len(sampled) - 1
        if i < len(replies) - 1:
            prompt = session.next_prompt(prompt, sampled, [{"role": "user", "content": obs}])
    return turns


def test_four_stream_invariant_after_stitching(real_trajectory):
    (s,) = stitch(real_trajectory, reward=0.35, **META).samples
    s.validate()
    last = real_trajectory[-1]
    assert s.token_ids.tolist() == last.prompt_ids + last.output_ids
    assert s.loss_mask.shape == s.rollout_logprobs.shape == s.token_ids.shape
    assert s.routing.shape == (s.num_tokens - 1, L, K)
    assert (s.rollout_logprobs[s.loss_mask == 0] == 0).all()
    # Independent: sampled positions of turn i are [len(p_i), len(p_i) + len(a_i)).
    expected = np.zeros(s.num_tokens, dtype=np.int8)
    for t in real_trajectory:
        expected[len(t.prompt_ids) : len(t.prompt_ids) + len(t.output_ids)] = 1
    assert (s.loss_mask == expected).all()


def test_drift_audit_is_zero_for_a_strict_trajectory(real_trajectory):
    audit = stitch(real_trajectory, reward=0.35, **META).audit
    assert audit.loss_tokens == sum(len(t.output_ids) for t in real_trajectory)
    assert audit.drifted_loss_tokens == 0 and audit.drift_rate == 0.0
    assert audit.retokenized_context_tokens == 0 and audit.splits == 0 and audit.chunks == 1


def test_drift_audit_catches_a_corrupted_stitch(real_trajectory):
    (s,) = stitch(real_trajectory, reward=0.35, **META).samples
    corrupted_ids = s.token_ids.copy()
    corrupted_ids[s.reward_index - 1] += 1  # one displaced identifier in the loss region
    bad = dataclasses.replace(s, token_ids=corrupted_ids)
    audit = audit_drift(real_trajectory, [bad])
    assert audit.drifted_loss_tokens == 1
    assert audit.drift_rate == pytest.approx(1 / audit.loss_tokens)

    shifted = dataclasses.replace(s, loss_mask=np.roll(s.loss_mask, 1))  # mask off by one position
    assert audit_drift(real_trajectory, [shifted]).drifted_loss_tokens > 0


def valid_sample():
    return stitch([turn([1, 2], [3, 4])], reward=1.0, **META).samples[0]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"loss_mask": np.array([0, 0, 1], dtype=np.int8)}, "lengths differ"),
        ({"routing": rows(0, 4)}, "routing"),
        ({"rollout_logprobs": np.array([-1, 0, -0.1, -0.2], dtype=np.float32)}, "masked positions"),
        ({"reward_index": 1}, "not a loss position"),
        ({"reward_index": 2}, "not the last loss position"),
        ({"token_ids": np.array([1, 2, 3, 4], dtype=np.int64)}, "int32"),
        ({"loss_mask": np.array([0, 0, 1, 2], dtype=np.int8)}, "0 and 1"),
    ],
)
def test_sample_validate_names_what_is_off(change, match):
    with pytest.raises(StreamMisalignmentError, match=match):
        dataclasses.replace(valid_sample(), **change).validate()


def test_audits_sum_over_trials():
    a = stitch([turn([1, 2], [3, 4])], reward=0.0, **META).audit
    b = stitch([turn([1, 2], [3]), turn([7], [8])], reward=0.0, **META).audit
    total = type(a).total([a, b])
    assert (total.loss_tokens, total.chunks, total.splits, total.drifted_loss_tokens) == (4, 3, 1, 0)
