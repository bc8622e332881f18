"""The HF MoE router families R3 captures and replays: one registry entry per family (T1 §4.2).

Every registered router is a module that maps hidden states ``[N, H]`` to ``(router_logits [N, E],
weights [N, k], indices [N, k])`` and carries ``top_k`` and ``num_experts``; families differ in how the
weights follow from the logits. Capture reads ``indices``; replay keeps the recorded indices and recomputes
the weights from the live logits with the family's own formula restricted to the recorded experts, so the
router still gets gradients (T1 §4.2: ``g_e = exp(s_e) / sum_{e' in I^r} exp(s_e')`` for the softmax
families; the sigmoid family gathers its live sigmoid scores, as Megatron's ``compute_topk`` replay does).
Given the live selection, each formula repeats the router's own operations in the same order, so the
weights are bit-identical to the live router's.

Adding a family is one `RouterFamily` entry in `ROUTER_FAMILIES`. Dense layers (DeepSeek-V3's
``first_k_dense_replace``, Qwen2/3-MoE's ``mlp_only_layers`` and ``decoder_sparse_step``) have no router,
hence no column in a record; `moe_layers` gives the model-layer index of each record column.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["ROUTER_FAMILIES", "MoeRouter", "RouterFamily", "find_routers"]

WeightsFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class RouterFamily:
    """One HF MoE family's router, as R3 sees it.

    Attributes:
        name: the family (the ``transformers`` model folder, e.g. ``"qwen3_5_moe"``).
        router_class: class name of its router module in ``transformers`` (e.g. ``"Qwen3_5MoeTopKRouter"``).
        weights: ``(router, router_logits [N, E], indices [N, k] int64) -> weights [N, k]``: the routing
            weights the router gives those experts, computed as the router computes them.
        scores: one line on the family's score function, for docs and error messages.
    """

    name: str
    router_class: str
    weights: WeightsFn
    scores: str


def _softmax_renormalised(router: nn.Module, logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    # Qwen3_5MoeTopKRouter: float softmax over all E, top-k, always renormalised over the k, back to dtype.
    top = torch.softmax(logits, dtype=torch.float, dim=-1).gather(1, idx)
    return (top / top.sum(dim=-1, keepdim=True)).to(logits.dtype)


def _softmax_norm_topk(router: nn.Module, logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    # Qwen3Moe / Qwen2Moe / Olmoe TopKRouter: renormalised only when config.norm_topk_prob.
    top = torch.softmax(logits, dtype=torch.float, dim=-1).gather(1, idx)
    if router.norm_topk_prob:
        top = top / top.sum(dim=-1, keepdim=True)
    return top.to(logits.dtype)


def _mixtral(router: nn.Module, logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    # MixtralTopKRouter: softmax of float logits, renormalised, kept in float32 (no cast back).
    top = torch.softmax(logits.float(), dim=-1).gather(1, idx)
    return top / top.sum(dim=-1, keepdim=True)


def _sigmoid_scaled(router: nn.Module, logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    # DeepseekV3TopkRouter: selection used sigmoid + e_score_correction_bias within the top groups; the
    # weights are the UNbiased sigmoid scores of the chosen experts, renormalised, times the scaling factor.
    top = logits.sigmoid().gather(1, idx)
    if router.norm_topk_prob:
        top = top / (top.sum(dim=-1, keepdim=True) + 1e-20)
    return top * router.routed_scaling_factor


ROUTER_FAMILIES: dict[str, RouterFamily] = {
    f.name: f
    for f in (
        RouterFamily(
            "qwen3_5_moe", "Qwen3_5MoeTopKRouter", _softmax_renormalised, "softmax, top-k renormalised"
        ),
        RouterFamily(
            "qwen3_moe", "Qwen3MoeTopKRouter", _softmax_norm_topk, "softmax, renormalised if norm_topk_prob"
        ),
        RouterFamily(
            "qwen2_moe",
            "Qwen2MoeTopKRouter",
            _softmax_norm_topk,
            "softmax, renormalised if norm_topk_prob; a gated shared expert beside the routed ones",
        ),
        RouterFamily("mixtral", "MixtralTopKRouter", _mixtral, "softmax, top-k renormalised, float32"),
        RouterFamily(
            "olmoe", "OlmoeTopKRouter", _softmax_norm_topk, "softmax, renormalised if norm_topk_prob"
        ),
        RouterFamily(
            "deepseek_v3",
            "DeepseekV3TopkRouter",
            _sigmoid_scaled,
            "sigmoid, expert score-correction bias for selection, grouped top-k, scaled",
        ),
    )
}
"""Family name -> `RouterFamily`; `find_routers` matches router modules by ``router_class``."""

_BY_CLASS = {f.router_class: f for f in ROUTER_FAMILIES.values()}
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass(frozen=True)
class MoeRouter:
    """A router found in a model: its module, its family and the decoder layer it sits in."""

    module: nn.Module
    family: RouterFamily
    layer: int
    """Index of its decoder layer among ``num_hidden_layers`` (the SGLang wire column)."""


def find_routers(model: nn.Module) -> list[MoeRouter]:
    """The MoE routers of ``model`` in layer order, one per MoE layer; dense layers have none.

    Raises:
        ValueError: no registered router in the model (not an HF MoE model, or an unregistered family: a
            module whose class name ends in ``Router`` but has no `ROUTER_FAMILIES` entry is named), routers
            of two families in one model, routers disagreeing on top-k or E, or a router outside a
            ``layers.<i>`` decoder layer.
    """
    found: list[MoeRouter] = []
    stray: list[str] = []
    for name, module in model.named_modules():
        cls = type(module).__name__
        family = _BY_CLASS.get(cls)
        if family is None:
            if cls.lower().endswith("router") and hasattr(module, "top_k"):
                stray.append(cls)
            continue
        match = _LAYER.search(name)
        if match is None:
            raise ValueError(f"router {name} ({cls}) is not inside a decoder layer 'layers.<i>'")
        found.append(MoeRouter(module, family, int(match.group(1))))
    if not found:
        hint = (
            f"its router classes {sorted(set(stray))} have no entry in t1_r3.ROUTER_FAMILIES (add one)"
            if stray
            else f"registered families: {', '.join(ROUTER_FAMILIES)}"
        )
        raise ValueError(
            f"{type(model).__name__} has no MoE router R3 can capture or replay; {hint}. Routing capture "
            "and replay need an HF MoE model such as Qwen3_5MoeForCausalLM"
        )
    families = {r.family.name for r in found}
    shapes = {(int(r.module.top_k), int(r.module.num_experts)) for r in found}
    if len(families) > 1 or len(shapes) > 1:
        raise ValueError(
            f"{type(model).__name__}: its routers mix families {sorted(families)} or (top_k, E) "
            f"{sorted(shapes)}; a routing record has one [L, k] shape"
        )
    found.sort(key=lambda r: r.layer)
    return found
