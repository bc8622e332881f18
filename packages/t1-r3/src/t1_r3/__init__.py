"""Rollout routing replay: routing records, capture in the engine, replay in the trainer (T1 §4.2).

Records are int32 ``[T - 1, L, k]`` arrays (SGLang's ``routed_experts``); `capture_routing` records them from
an HF MoE model's routers, `replay_routing` makes the routers select the recorded experts while weighting them
with the live logits.

The record helpers (`t1_r3.records`) need only numpy; the torch parts (`capture_routing`, `replay_routing`,
`RoutingRecorder`, `moe_routers`) load on first use, so numpy-only packages (t1_tito) may import this one.
"""

from typing import TYPE_CHECKING, Any

from t1_r3.records import (
    RoutingMismatchError,
    bytes_per_token,
    check_routing,
    decode_routed_experts,
    encode_routed_experts,
    pad_rows,
)

if TYPE_CHECKING:
    from t1_r3.hf import RoutingRecorder, capture_routing, moe_routers, replay_routing

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

_TORCH_PARTS = {"RoutingRecorder", "capture_routing", "moe_routers", "replay_routing"}


def __getattr__(name: str) -> Any:
    if name in _TORCH_PARTS:
        from t1_r3 import hf

        return getattr(hf, name)
    raise AttributeError(f"module 't1_r3' has no attribute {name!r}")
