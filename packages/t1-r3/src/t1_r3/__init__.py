"""Rollout routing replay: routing records, capture in the engine, replay in the trainer (T1 §4.2).

Records are ``[T - 1, L, k]`` arrays of expert ids, one column per MoE layer, held compact (uint8 for E <=
256, `routing_dtype`) and decoded from SGLang's int32 ``routed_experts``; `capture_routing` records them from
an HF MoE model's routers, `replay_routing` makes the routers select the recorded experts while weighting them
with the live logits (`replay_routing_packed`: several samples packed in one row). The families R3 knows are
the entries of `ROUTER_FAMILIES`.

The record helpers (`t1_r3.records`) need only numpy; the torch parts (`capture_routing`, `replay_routing`,
`RoutingRecorder`, `moe_routers`, `moe_layers`, `ROUTER_FAMILIES`) load on first use, so numpy-only packages
(t1_tito) may import this one.
"""

from typing import TYPE_CHECKING, Any

from t1_r3.records import (
    RoutingMismatchError,
    bytes_per_token,
    check_routing,
    check_start_len,
    compact_routing,
    decode_routed_experts,
    encode_routed_experts,
    load_routing,
    pad_rows,
    routing_dtype,
    save_routing,
)

if TYPE_CHECKING:
    from t1_r3.families import ROUTER_FAMILIES, RouterFamily
    from t1_r3.hf import (
        RoutingRecorder,
        capture_routing,
        moe_layers,
        moe_routers,
        replay_routing,
        replay_routing_packed,
    )

__all__ = [
    "ROUTER_FAMILIES",
    "RouterFamily",
    "RoutingMismatchError",
    "RoutingRecorder",
    "bytes_per_token",
    "capture_routing",
    "check_routing",
    "check_start_len",
    "compact_routing",
    "decode_routed_experts",
    "encode_routed_experts",
    "load_routing",
    "moe_layers",
    "moe_routers",
    "pad_rows",
    "replay_routing",
    "replay_routing_packed",
    "routing_dtype",
    "save_routing",
]

_TORCH_PARTS = {
    "RoutingRecorder",
    "capture_routing",
    "moe_layers",
    "moe_routers",
    "replay_routing",
    "replay_routing_packed",
}
_FAMILY_PARTS = {"ROUTER_FAMILIES", "RouterFamily"}


def __getattr__(name: str) -> Any:
    if name in _TORCH_PARTS:
        from t1_r3 import hf

        return getattr(hf, name)
    if name in _FAMILY_PARTS:
        from t1_r3 import families

        return getattr(families, name)
    raise AttributeError(f"module 't1_r3' has no attribute {name!r}")
