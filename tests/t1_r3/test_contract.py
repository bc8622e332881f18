"""One routing contract: `t1_r3.check_routing` and `t1_r3.RoutingMismatchError`, for every stage (T1 §4.2)."""

from __future__ import annotations

import numpy as np
import pytest

import t1_r3
import t1_tito
from t1_r3 import RoutingMismatchError, check_routing, encode_routed_experts
from t1_tito import Turn, stitch

META = {"task_id": "t", "family": "f", "trial_id": "trial"}


def _rows(n: int, layers: int = 2, k: int = 2) -> np.ndarray:
    """``n`` rows of distinct experts per layer: row j routes to experts (j, j + 1) mod 8."""
    j = np.arange(n, dtype=np.int32)[:, None, None]
    return ((j + np.arange(k, dtype=np.int32)[None, None, :]) % 8) * np.ones((1, layers, 1), dtype=np.int32)


def test_tito_exports_the_r3_class_itself():
    assert t1_tito.RoutingMismatchError is t1_r3.RoutingMismatchError
    assert issubclass(RoutingMismatchError, ValueError)  # callers refusing bad input as ValueError still do


def test_catching_the_r3_class_catches_a_turn_with_the_wrong_row_count():
    bad = Turn(
        prompt_ids=[1, 2, 3],
        output_ids=[4],
        output_logprobs=[-0.5],
        routed_experts=_rows(2),  # 3 + 1 tokens need 3 rows
        policy_version=0,
        finish_reason="stop",
    )
    with pytest.raises(t1_r3.RoutingMismatchError, match="turn 0: routed_experts: routing has 2 rows"):
        stitch([bad], reward=0.0, **META)


def test_catching_the_r3_class_catches_a_gap_between_turns():
    first = Turn(
        prompt_ids=[1, 2],
        output_ids=[3],
        output_logprobs=[-0.5],
        routed_experts=_rows(2),
        policy_version=0,
        finish_reason="stop",
    )
    second = Turn(
        prompt_ids=[1, 2, 3, 4, 5],
        output_ids=[6],
        output_logprobs=[-0.5],
        routed_experts=_rows(1),
        routed_experts_start_len=4,  # 6 tokens from position 4 hold 1 row; rows so far cover [0, 2): a gap
        policy_version=0,
        finish_reason="stop",
    )
    with pytest.raises(t1_r3.RoutingMismatchError, match="gap"):
        stitch([first, second], reward=0.0, **META)


def test_catching_the_r3_class_catches_the_sglang_clients_ingest_check():
    from t1_rollout.engine.sglang import SGLangEngine

    engine = SGLangEngine("http://127.0.0.1:9", num_layers=2, top_k=2, num_experts=8)
    answer = {
        "output_ids": [5, 6],
        "meta_info": {
            "output_token_logprobs": [[-0.1, 5], [-0.2, 6]],
            "finish_reason": {"type": "stop"},
            "weight_version": "0",  # the client refuses an answer without the version that sampled it
            "routed_experts": encode_routed_experts(_rows(4)),  # 3 + 2 tokens need 4 rows: fits
        },
    }
    kw = {"prompt_tokens": 3, "return_logprob": True, "return_routed_experts": True, "latency_s": 0.0}
    assert engine.parse_answer(answer, start_len=0, **kw).routed_experts.shape == (4, 2, 2)
    answer["meta_info"]["routed_experts"] = encode_routed_experts(_rows(5))
    with pytest.raises(t1_r3.RoutingMismatchError, match="5 rows but 5 tokens"):
        engine.parse_answer(answer, start_len=0, **kw)
    engine.close()


def test_without_the_model_only_the_row_contract_is_checked():
    # TITO does not know the model: an all-zero k = 2 record (repeated expert 0) passes the row check there,
    # and is refused once the model's top_k is given (the trainer's and the engines' call).
    record = np.zeros((4, 1, 2), dtype=np.int32)
    check_routing(record, num_tokens=5)
    with pytest.raises(RoutingMismatchError, match="all zero"):
        check_routing(record, num_tokens=5, num_layers=1, top_k=2, num_experts=8)
    with pytest.raises(RoutingMismatchError, match="expected rows = tokens - 1 - start_len"):
        check_routing(record, num_tokens=6)
    with pytest.raises(RoutingMismatchError, match="is negative"):
        check_routing(-np.ones((4, 1, 2), dtype=np.int32), num_tokens=5)


def test_a_start_beyond_the_tokens_is_a_routing_error():
    with pytest.raises(RoutingMismatchError, match="start_len = 5 is beyond"):
        check_routing(np.zeros((0, 1, 2), dtype=np.int32), num_tokens=5, start_len=5)


def test_where_names_the_record():
    with pytest.raises(RoutingMismatchError, match=r"^chunk 3: routing has 1 rows"):
        check_routing(_rows(1), num_tokens=5, where="chunk 3")
