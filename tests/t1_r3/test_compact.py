"""Compact routing records: one byte per expert id when E <= 256, two when larger (T1 §4.2)."""

import base64

import numpy as np
import pytest

from t1_r3 import (
    RoutingMismatchError,
    bytes_per_token,
    check_routing,
    compact_routing,
    decode_routed_experts,
    encode_routed_experts,
    load_routing,
    routing_dtype,
    save_routing,
)


def _record(rows=6, layers=3, k=4, experts=256, seed=0):
    g = np.random.default_rng(seed)
    return np.argsort(g.random((rows, layers, experts)), axis=2)[:, :, :k].astype(np.int32)


def test_paper_shape_costs_384_bytes_per_token_compact():
    # (L, k, E) = (48, 8, 256): 48 * 8 one-byte ids, a quarter of the wire's L k 4 B = 1,536 B (T1 §4.2)
    assert bytes_per_token(48, 8, num_experts=256) == 384
    assert bytes_per_token(48, 8) == 1536


@pytest.mark.parametrize(
    ("experts", "dtype"),
    [(1, np.uint8), (8, np.uint8), (256, np.uint8), (257, np.uint16), (65536, np.uint16)],
)
def test_one_byte_up_to_256_experts_two_beyond(experts, dtype):
    assert routing_dtype(experts) == np.dtype(dtype)


def test_no_compact_dtype_beyond_65536_experts():
    with pytest.raises(ValueError, match="65536"):
        routing_dtype(65537)


def test_decode_into_compact_dtype_keeps_every_id():
    wire = _record()
    payload = encode_routed_experts(wire)
    got = decode_routed_experts(payload, num_layers=3, top_k=4, num_experts=256)
    assert got.dtype == np.uint8 and got.flags.writeable
    np.testing.assert_array_equal(got.astype(np.int32), wire)
    assert got.nbytes == wire.nbytes // 4
    wide = decode_routed_experts(payload, num_layers=3, top_k=4, num_experts=512)
    assert wide.dtype == np.uint16 and (wide == wire).all()


@pytest.mark.parametrize("bad", [256, 300, -1, -256])
def test_decode_refuses_ids_a_narrowing_cast_would_wrap(bad):
    # uint8(300) == 44 and uint8(-256) == 0: the range is checked on the int32 values before the cast
    wire = _record()
    wire[2, 1, 3] = bad
    with pytest.raises(RoutingMismatchError, match=f"expert id {bad} .* outside \\[0, 256\\)"):
        decode_routed_experts(encode_routed_experts(wire), num_layers=3, top_k=4, num_experts=256)


def test_compact_routing_checks_before_casting():
    wire = _record()
    assert compact_routing(wire, num_experts=256).dtype == np.uint8
    wire[0, 0, 0] = 300
    with pytest.raises(RoutingMismatchError, match="300"):
        compact_routing(wire, num_experts=256)
    with pytest.raises(RoutingMismatchError, match="not an integer"):
        compact_routing(wire.astype(np.float32), num_experts=512)


def test_check_routing_takes_compact_records_and_still_fails_closed():
    rec = _record().astype(np.uint8)
    check_routing(rec, num_tokens=7, num_layers=3, top_k=4, num_experts=256)
    dup = rec.copy()
    dup[4, 2, 3] = dup[4, 2, 0]
    with pytest.raises(RoutingMismatchError, match="row 4, layer 2 repeats an expert"):
        check_routing(dup, num_tokens=7, top_k=4)
    zero = rec.copy()
    zero[:, 1] = 0
    with pytest.raises(RoutingMismatchError, match=r"MoE layers \[1\] are all zero"):
        check_routing(zero, num_tokens=7, top_k=4)
    with pytest.raises(RoutingMismatchError, match="outside \\[0, 8\\)"):
        check_routing(rec, num_tokens=7, num_experts=8)


def test_compact_record_encodes_to_the_same_wire_bytes():
    wire = _record()
    expected = base64.b64encode(wire.astype("<i4").tobytes()).decode()
    assert encode_routed_experts(wire.astype(np.uint8)) == expected


def test_on_disk_record_is_one_byte_per_id(tmp_path):
    wire = _record(rows=100)
    path = tmp_path / "routing.npy"
    save_routing(path, wire, num_experts=256)
    back = load_routing(path)
    assert back.dtype == np.uint8 and (back == wire).all()
    assert path.stat().st_size < wire.size + 256  # ids plus the .npy header
    np.save(tmp_path / "wide.npy", wire)
    with pytest.raises(RoutingMismatchError, match="not a compact"):
        load_routing(tmp_path / "wide.npy")
