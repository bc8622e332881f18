"""`t1_trainer.megatron.sharding.shard_state` on a hand-built module: the slice of a full tensor a rank takes.

No process group: megatron's parallel state is answered by a stand-in naming this rank's tp and ep place, so
the slicing rules (``partition_dim``, the gated ``linear_fc1``'s ``partition_stride`` 2, experts renumbered
per ep rank) are checked by hand in the fast tier; the gathers and the gradient sums run on real gloo ranks
in ``test_megatron_parallel.py``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from t1_trainer.megatron import sharding


def _param(shape, **attrs) -> nn.Parameter:
    p = nn.Parameter(torch.zeros(*shape))
    for k, v in attrs.items():
        setattr(p, k, v)
    return p


class _Layer(nn.Module):
    """Names as megatron's: a column-parallel gated fc1, a row-parallel fc2, two local experts, a norm."""

    def __init__(self, tp: int, ep: int) -> None:
        super().__init__()
        self.config = SimpleNamespace(num_moe_experts=4, expert_model_parallel_size=ep)
        self.fc1 = _param((8 // tp, 3), tensor_model_parallel=True, partition_dim=0, partition_stride=2)
        self.fc2 = _param((3, 6 // tp), tensor_model_parallel=True, partition_dim=1, partition_stride=1)
        self.norm = _param((3,))
        self.mlp = nn.Module()
        self.mlp.experts = nn.Module()
        self.mlp.experts.local_experts = nn.ModuleList()
        for _ in range(4 // ep):
            e = nn.Module()
            e.w = _param((2, 3), allreduce=False)
            self.mlp.experts.local_experts.append(e)

    def named_parameters(self, *args, **kwargs):  # "decoder." prefix: the expert pattern needs ".mlp."
        for name, p in super().named_parameters(*args, **kwargs):
            yield f"decoder.{name}", p


def _ps(tp_rank: int, ep_rank: int) -> SimpleNamespace:
    return SimpleNamespace(
        get_tensor_model_parallel_rank=lambda: tp_rank,
        get_expert_tensor_parallel_rank=lambda: 0,
        get_expert_model_parallel_rank=lambda: ep_rank,
    )


FULL = {
    "decoder.fc1": torch.arange(24.0).reshape(8, 3),  # rows 0-3 the gate half, 4-7 the up half
    "decoder.fc2": torch.arange(18.0).reshape(3, 6),
    "decoder.norm": torch.tensor([1.0, 2.0, 3.0]),
    **{f"decoder.mlp.experts.local_experts.{e}.w": torch.full((2, 3), float(e)) for e in range(4)},
}


@pytest.mark.parametrize(("tp_rank", "ep_rank"), [(0, 0), (1, 1)])
def test_each_rank_takes_its_slice_of_every_full_tensor(monkeypatch, tp_rank, ep_rank):
    monkeypatch.setattr(sharding, "_ps", lambda: _ps(tp_rank, ep_rank))
    got = sharding.shard_state(_Layer(tp=2, ep=2), FULL)
    gate, up = FULL["decoder.fc1"][:4], FULL["decoder.fc1"][4:]
    want_fc1 = torch.cat([gate[2 * tp_rank : 2 * tp_rank + 2], up[2 * tp_rank : 2 * tp_rank + 2]])
    assert torch.equal(got["decoder.fc1"], want_fc1)  # stride 2: this rank's gate rows, then its up rows
    assert torch.equal(got["decoder.fc2"], FULL["decoder.fc2"][:, 3 * tp_rank : 3 * tp_rank + 3])
    assert torch.equal(got["decoder.norm"], FULL["decoder.norm"])  # replicated: whole
    for i in range(2):  # local expert i is global expert 2 * ep_rank + i
        w = got[f"decoder.mlp.experts.local_experts.{i}.w"]
        assert torch.equal(w, torch.full((2, 3), float(2 * ep_rank + i)))
    assert len(got) == 5  # the other rank's experts are left out


def test_a_full_tensor_that_does_not_split_into_the_rank_shape_is_refused(monkeypatch):
    monkeypatch.setattr(sharding, "_ps", lambda: _ps(0, 0))
    bad = {**FULL, "decoder.fc2": torch.zeros(3, 5)}
    with pytest.raises(ValueError, match=r"decoder.fc2: the full tensor \(3, 5\) does not split"):
        sharding.shard_state(_Layer(tp=2, ep=2), bad)


def test_is_expert_reads_megatrons_allreduce_mark():
    assert sharding.is_expert(_param((1,), allreduce=False))
    assert not sharding.is_expert(_param((1,), allreduce=True)) and not sharding.is_expert(_param((1,)))
