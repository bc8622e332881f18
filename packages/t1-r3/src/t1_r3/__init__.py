"""Rollout routing replay: routing records, capture in the engine, replay in the trainer (T1 §4.2).

Records are int32 ``[T - 1, L, k]`` arrays (SGLang's ``routed_experts``); `capture_routing` records them from
an HF MoE model's routers, `replay_routing` makes the routers select the recorded experts while weighting them
with the live logits.
"""

from t1_r3.hf import RoutingRecorder, capture_routing, moe_routers, replay_routing
from t1_r3.records import (
    RoutingMismatchError,
    bytes_per_token,
    check_routing,
    decode_routed_experts,
    encode_routed_experts,
    pad_rows,
)

__all__ = [
    "RoutingMismatchError",
    "RoutingRecorder",
    "bytes_per_token",
    "capture_routing",
    "check_routing",
    "decode_routed_experts",
    "encode_routed_experts",
    "moe_routers",
    "pad_rows",
    "replay_routing",
]
