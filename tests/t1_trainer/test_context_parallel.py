"""The context-parallel recurrent scan of T1 §7.1 against one rank: exact forward, gradients across ranks.

The rank groups are gloo processes forked with ``torch.multiprocessing`` (one fork per group size runs every
case, so the import cost is paid once); each rank saves what it computed, and the test compares it with
transformers' own Gated DeltaNet layer and gated-delta-rule functions run sample by sample in this process,
the independent one-rank reference. Tolerances: the forward is compared with ``torch.equal``; gradients of
per-token tensors within 1.2e-7 relative (``||a - b|| / ||b||``, T1 §7.1); parameter gradients are sums over
tokens that context parallelism splits into per-rank partial sums, so their summation order differs from one
rank's and they are held to 1e-6 relative (measured up to about 5e-7 on 2 ranks), see `_PARAM_RTOL`, and to be
no farther from a float64 computation than one rank's float32 ones are (which sit 1e-6 to 1e-5 from it). Where
pieces are not whole chunks (the ``ragged`` case) the chunk form runs on another chunk grid than one rank's,
so it agrees to float32 rounding only; the token-by-token form is exact there.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers.models.qwen3_5_moe import Qwen3_5MoeTextConfig
from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import (
    Qwen3_5MoeGatedDeltaNet,
    causal_conv1d_fn,
    torch_chunk_gated_delta_rule,
    torch_recurrent_gated_delta_rule,
)

from t1_trainer.context_parallel import (
    DescriptorError,
    PackedCPDescriptor,
    causal_conv1d_cp,
    contiguous_to_interleaved,
    gated_delta_rule_cp,
    gated_deltanet_cp,
    interleaved_to_contiguous,
    stream_positions,
)

_TOKEN_RTOL = 1.2e-7  # T1 §7.1's gradient agreement
_PARAM_RTOL = 1e-6  # per-rank partial sums of a token reduction: a different float32 summation order
_MOVED_GRID_RTOL = 1e-5  # chunk form where pieces are not whole chunks: another chunk grid, float32 rounding
_SCAN_INPUTS = ("q", "k", "v", "g", "beta")
_HIDDEN, _HK, _HV, _DK, _DV, _KERNEL = 64, 2, 4, 16, 16, 4


def _desc(cp: int, lengths, kinds: str) -> PackedCPDescriptor:
    """kinds: one letter per entry: r real, p padding split 2*cp ways, l rank-local padding."""
    seg = {"r": 2 * cp, "p": 2 * cp, "l": cp}
    return PackedCPDescriptor(
        cp=cp,
        lengths=tuple(lengths),
        real=tuple(k == "r" for k in kinds),
        segments=tuple(seg[k] for k in kinds),
    )


def _paper_cases(cp: int) -> dict[str, PackedCPDescriptor]:
    """T1 §7.1's two lengths, T = 33,792 and 65,536, packed: two samples and a padding tail."""
    return {
        "t33792": _desc(cp, (20992, 8448, 4352), "rrp"),
        "t65536": _desc(cp, (40960, 16384, 8192), "rrp"),
    }


def _cases(cp: int) -> dict[str, PackedCPDescriptor]:
    """Two sequence lengths with packed samples and padding; pieces a multiple of 64 tokens for ``chunk``."""
    a = 64 * cp  # the shortest length whose pieces are whole chunks
    return {
        "short": _desc(cp, (4 * a, 2 * a, a, a), "rrpr"),
        "long": _desc(cp, (16 * a, 8 * a, 4 * a, 2 * a, a), "rrrlr"),
        "ragged": _desc(cp, (10 * cp, 4 * cp, 2 * cp, 18 * cp, 2 * cp), "rrlrr"),  # pieces of 10, 4, 2, 18, 2
    }


def _scan_algorithms(name: str) -> tuple[str, ...]:
    """``recurrent`` (token by token, slow) only where the chunk grid moves: there it is the exact one."""
    return ("chunk", "recurrent") if name == "ragged" else ("chunk",)


def _layer() -> Qwen3_5MoeGatedDeltaNet:
    torch.manual_seed(0)
    cfg = Qwen3_5MoeTextConfig(
        hidden_size=_HIDDEN,
        linear_num_key_heads=_HK,
        linear_num_value_heads=_HV,
        linear_key_head_dim=_DK,
        linear_value_head_dim=_DV,
        linear_conv_kernel_dim=_KERNEL,
        num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"],
    )
    layer = Qwen3_5MoeGatedDeltaNet(cfg, 0)
    with torch.no_grad():  # weights large enough that every term matters
        for p in layer.parameters():
            p.normal_(0, 0.3)
        layer.A_log.uniform_(-1, 1)
    return layer


def _stream(desc: PackedCPDescriptor, seed: int) -> dict[str, torch.Tensor]:
    """Full-stream inputs: hidden states, loss weights, and raw scan inputs (``[tokens, ...]``)."""
    g = torch.Generator().manual_seed(seed)
    t = sum(desc.lengths)
    return {
        "hidden": torch.randn(t, _HIDDEN, generator=g),
        "weight": torch.randn(t, _HIDDEN, generator=g),
        "q": torch.randn(t, _HK, _DK, generator=g),
        "k": torch.randn(t, _HK, _DK, generator=g),
        "v": torch.randn(t, _HV, _DV, generator=g),
        "g": -torch.rand(t, _HV, generator=g),
        "beta": torch.rand(t, _HV, generator=g),
        "w_core": torch.randn(t, _HV, _DV, generator=g),
    }


def _entries(full: torch.Tensor, desc: PackedCPDescriptor):
    off = 0
    for e, n in enumerate(desc.lengths):
        yield e, full[off : off + n]
        off += n


def _interleaved(full: torch.Tensor, desc: PackedCPDescriptor, r: int) -> torch.Tensor:
    """Rank r's load-balanced shard, written here independently of the code under test."""
    cp, out = desc.cp, []
    for e, x in _entries(full, desc):
        if desc.segments[e] == cp:
            out.append(x.chunk(cp)[r])
        else:
            chunks = x.chunk(2 * cp)
            out += [chunks[r], chunks[2 * cp - 1 - r]]
    return torch.cat(out)


def _contiguous(full: torch.Tensor, desc: PackedCPDescriptor, r: int) -> torch.Tensor:
    return torch.cat([x.chunk(desc.cp)[r] for _, x in _entries(full, desc)])


def _rank_main(rank: int, size: int, path: str, paper: bool) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{path}/store", rank=rank, world_size=size, timeout=timedelta(seconds=300)
    )
    group, results = dist.group.WORLD, {}
    layer = _layer()
    for name, desc in (_paper_cases if paper else _cases)(size).items():
        data = _stream(desc, seed=len(name))
        layer.zero_grad()
        x = _interleaved(data["hidden"], desc, rank).requires_grad_(True)
        out = gated_deltanet_cp(layer, x, desc=desc, group=group)
        (out * _interleaved(data["weight"], desc, rank)).sum().backward()
        params = {n: p.grad.clone() for n, p in layer.named_parameters()}
        results[f"layer/{name}"] = {"out": out.detach(), "grad": x.grad, "params": params}
        for alg in _scan_algorithms(name):
            ins = {k: _contiguous(data[k], desc, rank).requires_grad_(True) for k in _SCAN_INPUTS}
            core = gated_delta_rule_cp(*ins.values(), desc=desc, group=group, algorithm=alg, tag=1)
            (core * _contiguous(data["w_core"], desc, rank)).sum().backward()
            results[f"scan/{name}/{alg}"] = {"out": core.detach(), **{k: t.grad for k, t in ins.items()}}
        x = _contiguous(data["hidden"], desc, rank).requires_grad_(True)
        conv = causal_conv1d_cp(x, layer.conv1d.weight.detach()[:_HIDDEN, 0], None, desc=desc, group=group)
        (conv * _contiguous(data["weight"], desc, rank)).sum().backward()
        results[f"conv/{name}"] = {"out": conv.detach(), "grad": x.grad}
        shard = _interleaved(data["hidden"], desc, rank)
        there = interleaved_to_contiguous(shard, desc, group)
        results[f"relayout/{name}"] = {"there": there, "back": contiguous_to_interleaved(there, desc, group)}
    # one rank holding another descriptor: every rank's agreement check must refuse
    desc = _cases(size)["short"]
    if rank == size - 1:
        desc = _desc(size, desc.lengths, "rrrr")
    try:
        desc.check(desc.local_tokens, group, where="test", agree=True)
        results["agree"] = "accepted"
    except DescriptorError as err:
        results["agree"] = str(err)
    torch.save(results, f"{path}/rank{rank}.pt")
    dist.destroy_process_group()


def _run(size: int, tmp: Path, paper: bool = False) -> list[dict]:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.start_processes(_rank_main, args=(size, str(tmp), paper), nprocs=size, start_method="fork")
    return [torch.load(tmp / f"rank{r}.pt") for r in range(size)]


def _real_mask(desc: PackedCPDescriptor) -> torch.Tensor:
    """``[tokens]`` bool: the tokens of real samples."""
    return torch.cat([torch.full((n,), desc.real[e]) for e, n in enumerate(desc.lengths)])


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative error ``||a - b|| / ||b||`` (Frobenius, float64)."""
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-300))


def _reference_layer(layer, desc, data):
    """One rank: transformers' layer on each real sample alone; padding gives zeros."""
    layer.zero_grad()
    hidden = data["hidden"].clone().requires_grad_(True)
    outs = []
    for e, x in _entries(hidden, desc):
        outs.append(layer(x[None])[0] if desc.real[e] else torch.zeros_like(x))
    out = torch.cat(outs)
    (out * data["weight"]).sum().backward()
    return out.detach(), hidden.grad, {n: p.grad.clone() for n, p in layer.named_parameters()}


def _reference_scan(desc, data, alg):
    ins = {k: data[k].clone().requires_grad_(True) for k in _SCAN_INPUTS}
    fn = torch_chunk_gated_delta_rule if alg == "chunk" else torch_recurrent_gated_delta_rule
    outs, off = [], 0
    for e, n in enumerate(desc.lengths):
        sl = slice(off, off + n)
        off += n
        if desc.real[e]:
            o, _ = fn(*(t[sl][None] for t in ins.values()), use_qk_l2norm_in_kernel=True)
            outs.append(o[0])
        else:
            outs.append(torch.zeros(n, _HV, _DV))
    out = torch.cat(outs)
    (out * data["w_core"]).sum().backward()
    return out.detach(), {k: t.grad for k, t in ins.items()}


def _check_group(size: int, ranks: list[dict], paper: bool = False) -> None:
    layer = _layer()
    for name, desc in (_paper_cases if paper else _cases)(size).items():
        data = _stream(desc, seed=len(name))
        # the layer (transformers' own, the chunk form): exact where pieces are whole chunks
        aligned = name != "ragged"
        rtol = _TOKEN_RTOL if aligned else _MOVED_GRID_RTOL
        out, grad, params = _reference_layer(layer, desc, data)
        for r in range(size):
            got = ranks[r][f"layer/{name}"]
            want = _interleaved(out, desc, r)
            if aligned:  # same chunks on the same tokens: bit-exact
                assert torch.equal(got["out"], want), (name, r)
            else:  # the chunk grid moves with the piece boundaries: float32 rounding
                assert _rel(got["out"], want) < 1e-6, (name, r)
            assert _rel(got["grad"], _interleaved(grad, desc, r)) < rtol, (name, r)
        # float64: one rank's float32 parameter gradients are themselves 1e-6 to 1e-5 from it; the group's
        # may differ from one rank's, but must be no farther from the float64 truth
        _, _, exact = _reference_layer(_layer().double(), desc, {k: v.double() for k, v in data.items()})
        for n, g_ref in params.items():
            total = sum(ranks[r][f"layer/{name}"]["params"][n] for r in range(size))
            bound = _MOVED_GRID_RTOL if not aligned else _PARAM_RTOL * (2 if paper else 1)  # grows with T
            assert _rel(total, g_ref) < bound, (name, n)
            assert _rel(total, exact[n]) <= 1.25 * _rel(g_ref, exact[n]) + 1e-7, (name, n)
        # the scan alone, against transformers' function of the same form
        for alg in _scan_algorithms(name):
            aligned = name != "ragged" or alg == "recurrent"
            rtol = _TOKEN_RTOL if aligned else _MOVED_GRID_RTOL
            out, grads = _reference_scan(desc, data, alg)
            for r in range(size):
                got = ranks[r][f"scan/{name}/{alg}"]
                want = _contiguous(out, desc, r)
                if aligned:
                    assert torch.equal(got["out"], want), (name, alg, r)
                else:
                    assert _rel(got["out"], want) < 1e-6, (name, alg, r)
                for k, g_ref in grads.items():
                    assert _rel(got[k], _contiguous(g_ref, desc, r)) < rtol, (name, alg, r, k)
        # the short convolution alone (halos across one or several predecessors), against transformers'
        weight = layer.conv1d.weight.detach()[:_HIDDEN, 0]
        x = data["hidden"].clone().requires_grad_(True)
        conv = torch.cat(
            [
                causal_conv1d_fn(piece.T[None], weight, None, activation="silu")[0].T
                if desc.real[e]
                else torch.zeros_like(piece)  # padding rows are not compared
                for e, piece in _entries(x, desc)
            ]
        )
        (conv * data["weight"]).sum().backward()
        for r in range(size):
            got = ranks[r][f"conv/{name}"]
            real_rows = _contiguous(_real_mask(desc), desc, r)
            want = _contiguous(conv.detach(), desc, r)[real_rows]
            if name != "ragged":
                assert torch.equal(got["out"][real_rows], want), (name, r)
            else:  # torch's conv1d picks another reduction order for inputs of a few tokens
                assert _rel(got["out"][real_rows], want) < _TOKEN_RTOL, (name, r)
            assert _rel(got["grad"][real_rows], _contiguous(x.grad, desc, r)[real_rows]) < _TOKEN_RTOL
        for r in range(size):
            moved = ranks[r][f"relayout/{name}"]
            assert torch.equal(moved["there"], _contiguous(data["hidden"], desc, r))
            assert torch.equal(moved["back"], _interleaved(data["hidden"], desc, r))
    for r in range(size):
        assert "hold a different packed-sequence descriptor" in ranks[r]["agree"], ranks[r]["agree"]


def test_two_ranks_forward_bit_exact_and_gradients_match_one_rank(tmp_path: Path) -> None:
    _check_group(2, _run(2, tmp_path))


@pytest.mark.slow  # minutes: the reference runs 100k tokens sample by sample, in float32 and float64
def test_two_ranks_at_the_papers_sequence_lengths(tmp_path: Path) -> None:
    _check_group(2, _run(2, tmp_path, paper=True), paper=True)


@pytest.mark.slow
def test_four_ranks_forward_bit_exact_and_gradients_match_one_rank(tmp_path: Path) -> None:
    _check_group(4, _run(4, tmp_path))


def test_one_rank_is_transformers_layer_sample_by_sample() -> None:
    layer, desc = _layer(), _desc(1, (128, 64, 64, 192), "rplr")
    data = _stream(desc, seed=3)
    out = gated_deltanet_cp(layer, data["hidden"], desc=desc, group=None)
    assert torch.equal(out, _reference_layer(layer, desc, data)[0])


def test_missing_descriptor_is_refused_by_name() -> None:
    x = torch.zeros(8, _HIDDEN)
    for fn in (interleaved_to_contiguous, contiguous_to_interleaved):
        with pytest.raises(TypeError, match="PackedCPDescriptor is required"):
            fn(x, None, None)
    with pytest.raises(TypeError, match="gated_deltanet_cp: a PackedCPDescriptor"):
        gated_deltanet_cp(_layer(), x, desc=None, group=None)
    with pytest.raises(TypeError, match="causal_conv1d_cp"):
        causal_conv1d_cp(x, torch.zeros(_HIDDEN, _KERNEL), None, desc=None, group=None)


def test_descriptor_that_does_not_fit_the_tensor_or_group_is_refused() -> None:
    x = torch.zeros(96, _HIDDEN)
    with pytest.raises(DescriptorError, match="local stream has 96 tokens but .* give 64"):
        interleaved_to_contiguous(x, _desc(1, (32, 32), "rr"), None)
    with pytest.raises(DescriptorError, match="cp=2 but the rank group has 1 ranks"):
        gated_deltanet_cp(_layer(), x, desc=_desc(2, (96, 96), "rr"), group=None)
    q = torch.zeros(96, _HK, _DK)
    with pytest.raises(DescriptorError, match="gated_delta_rule_cp: local stream has 96"):
        gated_delta_rule_cp(q, q, q, q[..., 0], q[..., 0], desc=_desc(1, (94,), "r"), group=None)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"cp": 0, "lengths": (4,), "real": (True,), "segments": (2,)}, "cp 0 must be"),
        ({"cp": 2, "lengths": (), "real": (), "segments": ()}, "no entries"),
        ({"cp": 2, "lengths": (8, 8), "real": (True,), "segments": (4, 4)}, "2 lengths but 1 real"),
        ({"cp": 2, "lengths": (8,), "real": (True,), "segments": (2,)}, "entry 0 is a real sample with 2"),
        ({"cp": 2, "lengths": (8, 6), "real": (True, True), "segments": (4, 4)}, "entry 1 has length 6"),
        ({"cp": 2, "lengths": (8,), "real": (False,), "segments": (3,)}, "entry 0 contributes 3 segments"),
        ({"cp": 2, "lengths": (0,), "real": (True,), "segments": (4,)}, "entry 0 has length 0"),
    ],
)
def test_malformed_descriptor_names_the_entry(kwargs, match) -> None:
    with pytest.raises(DescriptorError, match=match):
        PackedCPDescriptor(**kwargs)


def test_padding_and_a_real_sample_of_equal_length_differ_only_by_the_descriptor() -> None:
    # T1 §7.1: the offsets [0, 8, 16] cannot say whether [8, 16) is a sample; the descriptor does
    real = PackedCPDescriptor.from_cu_seqlens([0, 8, 16], cp=2, real=[True, True])
    padded = PackedCPDescriptor.from_cu_seqlens([0, 8, 16], cp=2, real=[True, False])
    assert real.lengths == padded.lengths and real.segments == padded.segments == (4, 4)
    assert real.real_entries == (0, 1) and padded.real_entries == (0,)
    assert real.fingerprint() != padded.fingerprint()
    with pytest.raises(DescriptorError, match="must start at 0"):
        PackedCPDescriptor.from_cu_seqlens([0, 8, 4], cp=2, real=[True, True])


def test_stream_positions_state_each_layout_by_hand() -> None:
    # one real sample of 8 (chunks of 2) and rank-local padding of 4 (a segment of 2 per rank), cp = 2
    desc = PackedCPDescriptor(cp=2, lengths=(8, 4), real=(True, False), segments=(4, 2))
    assert stream_positions(desc, 0).tolist() == [0, 1, 6, 7, 8, 9]
    assert stream_positions(desc, 1).tolist() == [2, 3, 4, 5, 10, 11]
    assert stream_positions(desc, 1, "contiguous").tolist() == [4, 5, 6, 7, 10, 11]
    every = torch.cat([stream_positions(desc, r) for r in range(2)])
    assert sorted(every.tolist()) == list(range(12))  # each token held once
    with pytest.raises(ValueError, match="rank 2 is outside"):
        stream_positions(desc, 2)


@pytest.mark.parametrize("bad", [0.5, True, "1"])
def test_stream_positions_refuses_a_rank_that_is_not_an_integer(bad) -> None:
    desc = PackedCPDescriptor(cp=2, lengths=(8,), real=(True,), segments=(4,))
    with pytest.raises(ValueError, match="stream_positions: rank .* is not an integer"):
        stream_positions(desc, bad)
