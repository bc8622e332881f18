"""Benchmark: decoding an SGLang routing payload into a compact, checked record vs a plain base64 decode.

Run (from the repository root):

    uv run python tools/bench/bench_routing_decode.py [--tokens 18000] [--layers 48] [--top-k 8]
        [--experts 256] [--repeat 15]

The payload is what SGLang's ``meta_info["routed_experts"]`` carries for one sample: base64 of little-endian
int32 ``[tokens - 1, L, k]`` with distinct random experts per row (defaults: the paper's shape (L, k, E) =
(48, 8, 256) and an 18k-token trajectory, T1 §4.2 and §6.3). Side by side in the same run, alternating:

* baseline, "plain": ``np.frombuffer(base64.b64decode(payload), dtype="<i4")``, no check, int32;
* T1: `t1_r3.decode_routed_experts` with ``num_experts`` (range check before the narrowing cast, uint8 out)
  followed by `t1_r3.check_routing` with the model's L, k, E and the token count (rows == tokens - 1, ids in
  range, no repeated expert, no all-zero layer): what `t1_rollout`'s SGLang engine runs on every answer.

Each repeat times both once, interleaved (`paired.interleave`: A B, then B A, ...); the ratio is plain / T1
(higher is better, goal >= 0.8). Prints min / median / max of the per-repeat ratios and the bytes per token
of both records, then one JSON line. The T1 result is checked equal to the plain decode before any figure is
printed. Nothing asserts on time.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import time
from collections.abc import Callable

import numpy as np
from paired import interleave, paired_ratios  # tools/bench/paired.py

from t1_r3 import bytes_per_token, check_routing, decode_routed_experts


def payload(tokens: int, layers: int, top_k: int, experts: int, seed: int = 0) -> str:
    """SGLang's base64 payload of ``[tokens - 1, L, k]`` distinct random experts (int32 little-endian)."""
    g = np.random.default_rng(seed)
    rows = tokens - 1
    out = np.empty((rows, layers, top_k), dtype="<i4")
    for start in range(0, rows, 2048):  # argsort per chunk: [2048, L, E] floats at a time
        stop = min(rows, start + 2048)
        out[start:stop] = np.argsort(g.random((stop - start, layers, experts)), axis=2)[:, :, :top_k]
    return base64.b64encode(out.tobytes()).decode("ascii")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=18000)
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    L, k, E, T = args.layers, args.top_k, args.experts, args.tokens
    text = payload(T, L, k, E)

    def plain() -> np.ndarray:
        return np.frombuffer(base64.b64decode(text), dtype="<i4")

    def t1() -> np.ndarray:
        rec = decode_routed_experts(text, num_layers=L, top_k=k, num_experts=E)
        check_routing(rec, num_tokens=T, num_layers=L, top_k=k, num_experts=E)
        return rec

    ref, got = plain(), t1()  # also warms both paths
    np.testing.assert_array_equal(got.reshape(-1).astype(np.int32), ref)

    def timed(fn: Callable[[], object]) -> Callable[[], float]:
        def arm() -> float:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0

        return arm

    times = interleave({"plain": timed(plain), "t1": timed(t1)}, repeat=args.repeat)
    t_plain, t_t1 = times["plain"], times["t1"]
    ratios = paired_ratios(t_plain, t_t1)
    mb = len(text) / 2**20
    print(f"payload: {T} tokens x (L, k, E) = ({L}, {k}, {E}); {mb:.1f} MiB of base64; {args.repeat} repeats")
    print(f"plain base64 + frombuffer (int32, no check): median {statistics.median(t_plain) * 1e3:8.2f} ms")
    print(f"t1 decode + check_routing (uint8 record):    median {statistics.median(t_t1) * 1e3:8.2f} ms")
    print(
        f"ratio plain / t1: min {min(ratios):.3f}  median {statistics.median(ratios):.3f}  "
        f"max {max(ratios):.3f}  (goal >= 0.8)"
    )
    wire_b, compact_b = bytes_per_token(L, k), bytes_per_token(L, k, num_experts=E)
    print(f"record: {got.dtype} {compact_b} B/token in memory (wire int32: {wire_b} B/token)")
    print(
        json.dumps(
            {
                "bench": "routing_decode",
                "tokens": T,
                "layers": L,
                "top_k": k,
                "experts": E,
                "repeat": args.repeat,
                "plain_ms_median": statistics.median(t_plain) * 1e3,
                "t1_ms_median": statistics.median(t_t1) * 1e3,
                "ratio_min": min(ratios),
                "ratio_median": statistics.median(ratios),
                "ratio_max": max(ratios),
                "record_dtype": str(got.dtype),
                "bytes_per_token": compact_b,
                "wire_bytes_per_token": wire_b,
            }
        )
    )


if __name__ == "__main__":
    main()
