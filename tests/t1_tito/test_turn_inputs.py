"""A turn's own values: any integer sequence (numpy too) is accepted; impossible values are refused."""

import numpy as np
import pytest

from t1_tito import InvalidTurnError, RoutingMismatchError, StreamMisalignmentError, Turn, stitch

META = {"task_id": "t", "family": "f", "trial_id": "trial-1", "reward": 1.0}


def make(prompt, output, logprobs, *, routing=None, start=0) -> Turn:
    return Turn(
        prompt_ids=prompt,
        output_ids=output,
        output_logprobs=logprobs,
        routed_experts=routing,
        routed_experts_start_len=start,
        policy_version=1,
        finish_reason="stop",
    )


def test_numpy_ids_and_logprobs_stitch_like_lists():
    """Issue: numpy prompt_ids raised "truth value of an array is ambiguous". p = [5, 6, 7], a = [8, 9]."""
    as_numpy = make(np.array([5, 6, 7], dtype=np.int64), np.array([8, 9]), np.array([-0.5, -0.25]))
    as_list = make([5, 6, 7], [8, 9], [-0.5, -0.25])
    got = stitch([as_numpy], **META).samples[0]
    want = stitch([as_list], **META).samples[0]
    assert got.token_ids.tolist() == [5, 6, 7, 8, 9] == want.token_ids.tolist()
    assert got.loss_mask.tolist() == [0, 0, 0, 1, 1]
    assert got.rollout_logprobs.tolist() == [0.0, 0.0, 0.0, -0.5, -0.25]


def test_numpy_ids_with_routing_rows():
    """T = 3 + 2 = 5 tokens, so 4 routing rows [4, L=1, k=2]."""
    routing = np.zeros((4, 1, 2), dtype=np.int32)
    t = make(np.arange(3), np.array([3, 4]), [-1.0, -2.0], routing=routing)
    assert stitch([t], **META).samples[0].routing.shape == (4, 1, 2)


def test_empty_numpy_prompt_is_refused_as_empty():
    with pytest.raises(StreamMisalignmentError, match="empty prompt_ids"):
        make(np.array([], dtype=np.int64), [1], [-1.0]).validate()


@pytest.mark.parametrize(
    ("prompt", "output", "match"),
    [
        ([1, -2, 3], [4], "prompt_ids: token id -2 is negative"),
        ([1, 2], np.array([4, -7]), "output_ids: token id -7 is negative"),
        ([1, 2], [2**31], "exceeds"),
    ],
)
def test_negative_or_oversized_token_ids_are_refused(prompt, output, match):
    with pytest.raises(InvalidTurnError, match=match):
        make(prompt, output, [-1.0] * len(output)).validate()


@pytest.mark.parametrize(
    ("prompt", "output"),
    [([1.5, 2], [3]), ([1, 2], ["a"]), (np.array([1.0, 2.0]), [3]), ("abc", [3]), ([True, 2], [3])],
)
def test_non_integer_ids_are_a_type_error(prompt, output):
    with pytest.raises(TypeError, match="integer"):
        make(prompt, output, [-1.0] * len(output)).validate()


@pytest.mark.parametrize("bad", [5.0, 1e-3, float("nan"), float("inf"), float("-inf")])
def test_logprobs_must_be_finite_and_at_most_zero(bad):
    """log p <= 0 because p <= 1; the issue's +5 was accepted."""
    with pytest.raises(InvalidTurnError, match=r"output_logprobs\[1\]"):
        make([1, 2], [3, 4], [-0.1, bad]).validate()


def test_logprob_zero_is_a_certain_token_and_accepted():
    make([1, 2], [3], [0.0]).validate()


def test_negative_start_len_is_refused_without_arithmetic_nonsense():
    """Issue: start_len -1 gave "...=2+1-1--1 = 3"."""
    t = make([1, 2], [3], [-1.0], routing=np.zeros((3, 1, 2), dtype=np.int32), start=-1)
    with pytest.raises(RoutingMismatchError, match="routed_experts_start_len = -1 is negative") as info:
        t.validate()
    assert "--1" not in str(info.value)
    unrouted = make([1, 2], [3], [-1.0], start=-1)
    with pytest.raises(RoutingMismatchError, match="negative"):
        unrouted.validate()


BAD_START_LENS = [-1, 1.5, "2", True, None, np.float64(2.0)]


def _refusal(call) -> tuple[type[BaseException], str]:
    with pytest.raises(Exception) as info:  # noqa: PT011 - the type is what is compared below
        call()
    return info.type, str(info.value)


@pytest.mark.parametrize("bad", BAD_START_LENS, ids=repr)
def test_a_bad_start_len_is_the_same_error_in_t1_r3_and_t1_tito(bad):
    """One rule, `t1_r3.check_start_len` (a float was a TypeError in t1_tito, a ValueError in t1_r3)."""
    from t1_r3 import check_routing

    record = np.zeros((2, 1, 2), dtype=np.int32)  # 3 tokens -> rows for positions [0, 2)
    turn = make([1, 2], [3], [-1.0], routing=record, start=bad)
    r3_type, r3_msg = _refusal(lambda: check_routing(record, num_tokens=3, start_len=bad, where="turn 0"))
    validate_type, validate_msg = _refusal(lambda: turn.validate("turn 0"))
    stitch_type, stitch_msg = _refusal(lambda: stitch([turn], **META))
    assert r3_type is validate_type is stitch_type is RoutingMismatchError
    assert issubclass(RoutingMismatchError, ValueError)
    # the same words, naming the field and the turn
    assert r3_msg == validate_msg == stitch_msg
    assert r3_msg.startswith("turn 0: routed_experts_start_len ")
