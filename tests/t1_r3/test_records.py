import base64
import struct

import numpy as np
import pytest

from t1_r3 import (
    RoutingMismatchError,
    bytes_per_token,
    check_routing,
    check_start_len,
    decode_routed_experts,
    encode_routed_experts,
    pad_rows,
)


def test_paper_record_costs_1536_bytes_per_token():
    # T1 §4.2: b_tok = L k 4 B = 1536 B/token for (L, k) = (48, 8).
    assert bytes_per_token(48, 8) == 1536


def test_decode_reads_sglang_little_endian_int32_base64():
    values = [3, 5, 1, 4, 0, 7, 2, 6]  # 2 rows x 2 layers x 2 experts
    payload = base64.b64encode(struct.pack("<8i", *values)).decode()
    got = decode_routed_experts(payload, num_layers=2, top_k=2)
    assert got.dtype == np.int32 and got.shape == (2, 2, 2)
    assert got[0, 0].tolist() == [3, 5] and got[0, 1].tolist() == [1, 4] and got[1, 1].tolist() == [2, 6]
    assert decode_routed_experts(payload.encode(), num_layers=2, top_k=2).tolist() == got.tolist()


def test_encode_is_what_sglang_sends():
    arr = np.arange(24, dtype=np.int32).reshape(3, 4, 2)
    assert encode_routed_experts(arr) == base64.b64encode(struct.pack("<24i", *range(24))).decode()
    np.testing.assert_array_equal(
        decode_routed_experts(encode_routed_experts(arr), num_layers=4, top_k=2), arr
    )


def test_decode_refuses_element_count_not_multiple_of_layers_times_k():
    payload = base64.b64encode(struct.pack("<6i", *range(6))).decode()
    with pytest.raises(RoutingMismatchError, match="not a multiple of L\\*k = 4\\*2 = 8"):
        decode_routed_experts(payload, num_layers=4, top_k=2)


def test_decode_refuses_truncated_or_non_base64_payload():
    with pytest.raises(RoutingMismatchError, match="multiple of 4"):
        decode_routed_experts(base64.b64encode(b"\x01\x02\x03").decode(), num_layers=1, top_k=1)
    with pytest.raises(RoutingMismatchError, match="base64"):
        decode_routed_experts("not base64 !!", num_layers=1, top_k=1)


def _good(rows=5, layers=3, k=2, experts=8):
    return pad_rows(rows, num_layers=layers, top_k=k, num_experts=experts)


def test_check_accepts_rows_equal_tokens_minus_one():
    check_routing(_good(5), num_tokens=6, num_layers=3, top_k=2, num_experts=8)
    check_routing(_good(3), num_tokens=6, num_layers=3, top_k=2, num_experts=8, start_len=2)


def test_check_refuses_rows_not_tokens_minus_one():
    with pytest.raises(RoutingMismatchError, match="5 rows but 5 tokens"):
        check_routing(_good(5), num_tokens=5, num_layers=3, top_k=2, num_experts=8)


def test_check_refuses_wrong_layer_count():
    with pytest.raises(RoutingMismatchError, match="L=4"):
        check_routing(_good(5), num_tokens=6, num_layers=4, top_k=2, num_experts=8)


def test_check_refuses_expert_ids_outside_range():
    bad = _good(5)
    bad[2, 1, 0] = 8
    with pytest.raises(RoutingMismatchError, match=r"expert id 8 at \[row 2, layer 1, slot 0\]"):
        check_routing(bad, num_tokens=6, num_layers=3, top_k=2, num_experts=8)
    bad[2, 1, 0] = -1
    with pytest.raises(
        RoutingMismatchError, match=r"expert id -1 at \[row 2, layer 1, slot 0\] is negative"
    ) as info:
        check_routing(bad, num_tokens=6, num_layers=3, top_k=2, num_experts=8)
    assert "more experts" not in str(info.value)  # a negative id says nothing about the expert count


def test_check_refuses_all_zero_moe_layer():
    bad = _good(5)
    bad[:, 2, :] = 0
    with pytest.raises(RoutingMismatchError, match=r"layers \[2\] are all zero"):
        check_routing(bad, num_tokens=6, num_layers=3, top_k=2, num_experts=8)


def test_check_refuses_repeated_expert_in_a_row():
    bad = _good(5)
    bad[4, 0] = [6, 6]
    with pytest.raises(RoutingMismatchError, match="row 4, layer 0 repeats"):
        check_routing(bad, num_tokens=6, num_layers=3, top_k=2, num_experts=8)


def test_pad_rows_are_distinct_and_not_constant():
    pad = pad_rows(4, num_layers=3, top_k=2, num_experts=8)
    assert pad.shape == (4, 3, 2) and pad.dtype == np.int32
    assert all(len(set(r)) == 2 for r in pad.reshape(-1, 2).tolist())
    assert len(np.unique(pad)) == 8  # spread over all experts, not one hot expert


@pytest.mark.parametrize("start_len", [-1, -5])
def test_check_refuses_a_negative_start_len(start_len):
    """Issue: start_len -1 was accepted (rows = T - 1 - (-1) = T matched a record one row too long)."""
    record = _good(6)  # 6 rows = 6 tokens - 1 - (-1): the old arithmetic accepted it
    with pytest.raises(ValueError, match="start_len = .* is negative"):
        check_routing(record, num_tokens=6, num_layers=3, top_k=2, num_experts=8, start_len=start_len)


def test_check_refuses_start_len_beyond_the_tokens():
    with pytest.raises(ValueError, match="start_len = 6 is beyond"):
        check_routing(_good(0), num_tokens=6, num_layers=3, top_k=2, num_experts=8, start_len=6)


@pytest.mark.parametrize(("layers", "k"), [(-1, 8), (48, 0), (0, 8), (48, -8)])
def test_bytes_per_token_refuses_non_positive_shapes(layers, k):
    """Issue: bytes_per_token(-1, 8) returned -32 bytes."""
    with pytest.raises(ValueError, match="num_layers|top_k"):
        bytes_per_token(layers, k)


def test_float_routing_is_refused_not_truncated():
    """Issue: a float record (2.7) was silently encoded as expert 2."""
    record = _good(5).astype(np.float64) + 0.7
    with pytest.raises(RoutingMismatchError, match="not an integer type.*truncate"):
        encode_routed_experts(record)
    with pytest.raises(RoutingMismatchError, match="not an integer type"):
        check_routing(record, num_tokens=6, num_layers=3, top_k=2, num_experts=8)
    with pytest.raises(RoutingMismatchError, match="not an integer type"):
        encode_routed_experts(np.ones((1, 1, 2), dtype=bool))


def test_integer_routing_of_any_width_still_encodes():
    """int64 expert ids (torch's default index dtype) encode to the same int32 wire bytes."""
    record = _good(5)
    assert encode_routed_experts(record.astype(np.int64)) == encode_routed_experts(record.astype(np.int32))


@pytest.mark.parametrize("kwargs", [{"num_rows": -1}, {"num_layers": 0}, {"top_k": 0}, {"num_experts": 0}])
def test_pad_rows_refuses_bad_shapes(kwargs):
    args = {"num_rows": 1, "num_layers": 2, "top_k": 2, "num_experts": 4, **kwargs}
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        pad_rows(args.pop("num_rows"), **args)


@pytest.mark.parametrize(
    ("value", "tokens", "words"),
    [(True, 5, "integer, got bool"), (2.0, 5, "integer"), (-1, None, "negative"), (5, 5, "beyond")],
)
def test_start_len_rule_refuses_by_the_fields_name(value, tokens, words):
    with pytest.raises(RoutingMismatchError, match=f"turn 2: routed_experts_start_len .*{words}"):
        check_start_len(value, num_tokens=tokens, where="turn 2")


def test_start_len_rule_accepts_zero_to_the_last_consumed_position():
    # 5 tokens: rows cover [start, 4); start 4 = num_tokens - 1 is an empty record, 5 no record at all
    assert [check_start_len(v, num_tokens=5) for v in (0, 4, np.int64(3))] == [0, 4, 3]
    assert check_start_len(10**6) == 10**6  # no token count: only the lower bound
