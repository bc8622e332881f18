"""Benchmark: activation residency per rank of the context-parallel Gated DeltaNet scan (T1 §7.1).

Run (from the repository root):

    OMP_NUM_THREADS=1 uv run python tools/bench/bench_cp_scan.py [--tokens 8192] [--cps 1 2 4]
        [--device cpu|cuda]

For every context-parallel degree ``cp`` it starts ``cp`` gloo ranks (``torch.multiprocessing``), and each
rank runs one forward and backward of a Gated DeltaNet mixer (recipes/tiny-cpu.yaml's shape: hidden 64, 2
key and 4 value heads of 16, kernel 4) through `t1_trainer.context_parallel.gated_deltanet_cp` on its share
of one packed micro-batch of ``--tokens`` tokens (samples of 1/2, 1/4 and 1/8 of it, then 1/8 padding), in
the trainer's interleaved layout. The baseline is ``cp = 1`` in the same run: the same function on the whole
micro-batch in one process, where the scan is the plain one-rank scan.

What is measured, per rank, and the largest rank reported:

- ``saved_bytes``: the bytes autograd holds for the backward at the end of the forward, i.e. every storage
  saved during it (``torch.autograd.graph.saved_tensors_hooks``, once per storage, parameters excluded):
  the layer's activation residency, which T1 §7.1 says divides by ``cp`` (measured there: 1/2, 1/4, 1/8 at
  cp = 2, 4, 8).
- ``cuda_peak_bytes`` (``--device cuda`` only): ``torch.cuda.max_memory_allocated`` over the forward and
  backward, less what was allocated before it (inputs and weights); all ranks share the one GPU, each is its
  own process, and the state and halo messages are staged through host memory (gloo).
- ``seconds``: the forward and backward's wall time on the slowest rank, for information: the ranks of a
  scan run one after another, so time does not divide (and on a shared 2-core box it is noise).

It prints one row per ``cp`` with the ratio to ``cp = 1``, then one JSON line ``{"bench": "cp_scan", ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[2]


def _layer(device: str):
    from transformers.models.qwen3_5_moe import Qwen3_5MoeTextConfig
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeGatedDeltaNet

    torch.manual_seed(0)
    cfg = Qwen3_5MoeTextConfig(
        hidden_size=64,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_conv_kernel_dim=4,
        num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"],
    )
    return Qwen3_5MoeGatedDeltaNet(cfg, 0).to(device)


def _check_tokens(tokens: int, cp: int) -> None:
    # entries of 1/8 of the micro-batch, each in 2 * cp chunks of whole 64-token scan chunks
    unit = 8 * 2 * cp * 64
    if tokens <= 0 or tokens % unit:
        raise SystemExit(
            f"bench_cp_scan: --tokens {tokens} must be a positive multiple of {unit} for cp={cp}"
        )


def _descriptor(tokens: int, cp: int):
    from t1_trainer.context_parallel import PackedCPDescriptor

    _check_tokens(tokens, cp)
    lengths = (tokens // 2, tokens // 4, tokens // 8, tokens // 8)
    return PackedCPDescriptor(cp=cp, lengths=lengths, real=(True, True, True, False), segments=(2 * cp,) * 4)


def _rank(rank: int, cp: int, tokens: int, device: str, path: str) -> None:
    from t1_trainer.context_parallel import gated_deltanet_cp

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{path}/store", rank=rank, world_size=cp, timeout=timedelta(seconds=300)
    )
    layer, desc = _layer(device), _descriptor(tokens, cp)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(desc.local_tokens, 64, generator=g).to(device).requires_grad_(True)
    params = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    dist.barrier()
    start = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = gated_deltanet_cp(layer, x, desc=desc, group=dist.group.WORLD)
    held = sum(saved.values())
    out.square().mean().backward()
    if device == "cuda":
        torch.cuda.synchronize()
    row = {"rank": rank, "saved_bytes": held, "seconds": time.perf_counter() - start}
    if device == "cuda":
        row["cuda_peak_bytes"] = torch.cuda.max_memory_allocated() - before
    Path(path, f"rank{rank}.json").write_text(json.dumps(row))
    dist.destroy_process_group()


def measure(cp: int, tokens: int, device: str) -> dict:
    """Runs ``cp`` ranks once; returns the largest rank's figures (bytes, seconds)."""
    with tempfile.TemporaryDirectory(prefix="t1-cp-scan-") as path:
        # CUDA cannot be used in a forked child: spawn there (slower start, same measurement)
        method = "spawn" if device == "cuda" else "fork"
        mp.start_processes(_rank, args=(cp, tokens, device, path), nprocs=cp, start_method=method)
        rows = [json.loads(Path(path, f"rank{r}.json").read_text()) for r in range(cp)]
    out = {
        "cp": cp,
        "saved_bytes": max(r["saved_bytes"] for r in rows),
        "seconds": max(r["seconds"] for r in rows),
    }
    if device == "cuda":
        out["cuda_peak_bytes"] = max(r["cuda_peak_bytes"] for r in rows)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192, help="tokens of the packed micro-batch")
    parser.add_argument("--cps", type=int, nargs="+", default=[1, 2, 4], help="degrees; 1 is the baseline")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_cp_scan: --device cuda but CUDA is not available here", file=sys.stderr)
        return 2
    cps = sorted(set(args.cps) | {1})
    for cp in cps:  # refuse before any rank starts
        _check_tokens(args.tokens, cp)
    rows = [measure(cp, args.tokens, args.device) for cp in cps]
    base = rows[0]
    print(f"Gated DeltaNet mixer, {args.tokens} tokens packed, {args.device}; baseline cp = 1 (one rank)")
    print(
        f"{'cp':>3} {'saved MiB/rank':>15} {'ratio':>7} {'1/cp':>6}"
        + ("  cuda peak MiB  ratio" if base.get("cuda_peak_bytes") else "")
    )
    for row in rows:
        row["saved_ratio"] = row["saved_bytes"] / base["saved_bytes"]
        mib = row["saved_bytes"] / 2**20
        line = f"{row['cp']:>3} {mib:>15.2f} {row['saved_ratio']:>7.3f} {1 / row['cp']:>6.3f}"
        if "cuda_peak_bytes" in row:
            row["cuda_peak_ratio"] = row["cuda_peak_bytes"] / base["cuda_peak_bytes"]
            line += f"  {row['cuda_peak_bytes'] / 2**20:>13.2f}  {row['cuda_peak_ratio']:.3f}"
        print(line)
    print(json.dumps({"bench": "cp_scan", "tokens": args.tokens, "device": args.device, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
