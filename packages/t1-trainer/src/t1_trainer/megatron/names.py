"""Weight names HF <-> megatron-core for the Qwen3.5-MoE family that `t1_policy` builds (T1 §6).

Decisions the Megatron model must follow (the map is only correct for a model built this way):

* Target: megatron-core 0.19.2 ``GPTModel`` with the hybrid block of
  ``get_transformer_block_with_experimental_attention_variant_spec`` (``experimental_attention_variant =
  "gated_delta_net"``, ``linear_attention_freq`` = the HF ``full_attention_interval``), every layer an
  ``MoELayer`` with a gated shared expert (``moe_shared_expert_gate=True``), ``attention_output_gate=True``,
  ``qk_layernorm=True``. Gated DeltaNet layers are megatron-core's own ``megatron.core.ssm.gated_delta_net.
  GatedDeltaNet`` (``in_proj``, ``conv1d``, ``dt_bias``, ``A_log``, ``out_norm``, ``out_proj``); nothing here
  invents an upstream name.
* ``layer_spec="te"``: the upstream Transformer Engine spec. Input norms are fused into the first linear
  (``self_attention.linear_qkv.layer_norm_weight``, ``self_attention.in_proj.layer_norm_weight``), the
  pre-MoE norm is not (``pre_mlp_layernorm.weight``), experts are ``TEGroupedMLP``
  (``mlp.experts.linear_fc1.weight{e}``).
* ``layer_spec="local"`` (plain torch, no TE): megatron-core 0.19.2 has no local GDN spec
  (``LocalSpecProvider.column_parallel_layer_norm_linear`` is None and the hybrid builder asserts TE), so T1's
  model builds the same modules with unfused norms: ``input_layernorm.weight`` in every layer, ``in_proj`` a
  ``ColumnParallelLinear``, experts ``SequentialMLP`` (``mlp.experts.local_experts.{e}.linear_fc1.weight``).
* Norm values: HF computes every RMSNorm but the GDN output norm as ``x * (1 + w)`` (zero-centred, weights
  start at 0). Those weights copy unchanged, so the Megatron model must compute them zero-centred too:
  ``layernorm_zero_centered_gamma=True`` under TE; under the local spec a zero-centred RMSNorm module
  (megatron's ``WrappedTorchNorm`` refuses zero-centred gamma). The GDN output norm is ``x * w`` in HF
  (weights start at 1). Under TE its ``TENorm`` is built from the same config, hence zero-centred, and the map
  stores ``w - 1`` (``zero_centered_out_norm=True``, the TE default); under the local spec T1's model gives
  ``out_norm`` a plain ``x * w`` RMSNorm and the weight copies unchanged (the local default). The shift is
  exact, and the round trip bit-exact, for weights in [0.5, 2] (Sterbenz), which holds for the
  ones-initialised tiny model.
* Tensors are the full logical ones (tp = pp = ep = 1 naming, layers numbered globally from 0, experts
  0..E-1): the layouts below are the ones megatron's sharded checkpoints split per TP rank (per query group
  for ``linear_qkv``, per section for ``in_proj`` and ``conv1d``, gate/up halves for ``linear_fc1``);
  splitting for tp/ep/pp is the caller's.

Fused layouts (H hidden, F expert FFN, nh heads, ng query groups, d head dim, npg = nh / ng):

* ``linear_qkv.weight [ng * (2 npg + 2) d, H]``: per query group ``[q (npg d), gate (npg d), k (d), v (d)]``;
  HF ``q_proj [nh * 2d, H]`` holds per head ``[q (d), gate (d)]``.
* ``in_proj.weight [2 qk + 2 v + 2 nv, H]``: ``[q, k, v, z, beta, alpha]`` = HF ``in_proj_qkv``,
  ``in_proj_z``, ``in_proj_b``, ``in_proj_a`` concatenated.
* ``linear_fc1.weight [2F, H]``: ``[gate; up]``, HF's ``gate_up_proj[e]`` as is (HF chunks gate first).

Unmapped or missing keys raise `NameMapError` naming the key; TE's ``*._extra_state`` entries (FP8 metadata,
no weights) are skipped on the Megatron side.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

__all__ = ["LayerSpec", "NameMapError", "hf_to_megatron", "megatron_to_hf", "megatron_names"]

LayerSpec = Literal["local", "te"]

_EXTRA_STATE = "._extra_state"


class NameMapError(KeyError):
    """A weight name has no counterpart in the HF <-> Megatron map, or a key the map needs is missing.

    The message names the key and the side (HF or Megatron) it came from.
    """


@dataclass(frozen=True)
class _Group:
    """One mapping unit: HF keys <-> Megatron keys with the two conversion functions."""

    hf: tuple[str, ...]
    mg: tuple[str, ...]
    to_mg: Callable[[list[Tensor]], list[Tensor]]
    to_hf: Callable[[list[Tensor]], list[Tensor]]


def _same(ts: list[Tensor]) -> list[Tensor]:
    return list(ts)


def _shift(delta: float) -> Callable[[list[Tensor]], list[Tensor]]:
    def fn(ts: list[Tensor]) -> list[Tensor]:
        (t,) = ts
        return [(t.float() + delta).to(t.dtype)]

    return fn


def _qkv_to_mg(nh: int, ng: int, d: int) -> Callable[[list[Tensor]], list[Tensor]]:
    npg = nh // ng

    def fn(ts: list[Tensor]) -> list[Tensor]:
        q_proj, k, v = ts
        hidden = q_proj.shape[-1]
        qg = q_proj.reshape(nh, 2, d, hidden)  # per head [q, gate]
        q = qg[:, 0].reshape(ng, npg * d, hidden)
        gate = qg[:, 1].reshape(ng, npg * d, hidden)
        fused = torch.cat([q, gate, k.reshape(ng, d, hidden), v.reshape(ng, d, hidden)], dim=1)
        return [fused.reshape(ng * (2 * npg + 2) * d, hidden)]

    return fn


def _qkv_to_hf(nh: int, ng: int, d: int) -> Callable[[list[Tensor]], list[Tensor]]:
    npg = nh // ng

    def fn(ts: list[Tensor]) -> list[Tensor]:
        (fused,) = ts
        hidden = fused.shape[-1]
        q, gate, k, v = fused.reshape(ng, (2 * npg + 2) * d, hidden).split([npg * d, npg * d, d, d], dim=1)
        q_proj = torch.stack([q.reshape(nh, d, hidden), gate.reshape(nh, d, hidden)], dim=1)
        return [q_proj.reshape(nh * 2 * d, hidden), k.reshape(ng * d, hidden), v.reshape(ng * d, hidden)]

    return fn


def _cat_to_mg(ts: list[Tensor]) -> list[Tensor]:
    return [torch.cat(ts, dim=0)]


def _split_to_hf(sizes: list[int]) -> Callable[[list[Tensor]], list[Tensor]]:
    def fn(ts: list[Tensor]) -> list[Tensor]:
        (t,) = ts
        return [p.clone() for p in t.split(sizes, dim=0)]

    return fn


def _unstack(ts: list[Tensor]) -> list[Tensor]:
    (t,) = ts
    return [t[e].clone() for e in range(t.shape[0])]


def _stack(ts: list[Tensor]) -> list[Tensor]:
    return [torch.stack(ts, dim=0)]


def _cfg(config: Any, name: str) -> Any:
    value = getattr(config, name, None)
    if value is None:
        raise ValueError(f"HF config has no {name!r}; the name map needs a Qwen3.5-MoE text config")
    return value


def _groups(config: Any, layer_spec: LayerSpec, zero_centered_out_norm: bool | None) -> list[_Group]:
    """The mapping table of ``config``, in model order."""
    if layer_spec not in ("local", "te"):
        raise ValueError(f"layer_spec must be 'local' or 'te', got {layer_spec!r}")
    out_norm_shift = layer_spec == "te" if zero_centered_out_norm is None else zero_centered_out_norm
    nh, ng, d = (
        _cfg(config, "num_attention_heads"),
        _cfg(config, "num_key_value_heads"),
        _cfg(config, "head_dim"),
    )
    if nh % ng:
        raise ValueError(f"num_attention_heads={nh} is not a multiple of num_key_value_heads={ng}")
    qk = _cfg(config, "linear_num_key_heads") * _cfg(config, "linear_key_head_dim")
    nv = _cfg(config, "linear_num_value_heads")
    v = nv * _cfg(config, "linear_value_head_dim")
    ffn = _cfg(config, "shared_expert_intermediate_size")
    num_experts = _cfg(config, "num_experts")
    layer_types = list(_cfg(config, "layer_types"))
    if len(layer_types) != _cfg(config, "num_hidden_layers"):
        raise ValueError(f"layer_types has {len(layer_types)} entries for {config.num_hidden_layers} layers")

    def one(hf: str, mg: str, to_mg: Callable = _same, to_hf: Callable = _same) -> _Group:
        return _Group((hf,), (mg,), to_mg, to_hf)

    groups = [one("model.embed_tokens.weight", "embedding.word_embeddings.weight")]
    for i, kind in enumerate(layer_types):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        if kind == "full_attention":
            a = f"{h}self_attn."
            norm_mg = f"{m}self_attention.linear_qkv.layer_norm_weight"
            groups += [
                _Group(
                    (f"{a}q_proj.weight", f"{a}k_proj.weight", f"{a}v_proj.weight"),
                    (f"{m}self_attention.linear_qkv.weight",),
                    _qkv_to_mg(nh, ng, d),
                    _qkv_to_hf(nh, ng, d),
                ),
                one(f"{a}o_proj.weight", f"{m}self_attention.linear_proj.weight"),
                one(f"{a}q_norm.weight", f"{m}self_attention.q_layernorm.weight"),
                one(f"{a}k_norm.weight", f"{m}self_attention.k_layernorm.weight"),
            ]
        elif kind == "linear_attention":
            a = f"{h}linear_attn."
            norm_mg = f"{m}self_attention.in_proj.layer_norm_weight"
            sizes = [2 * qk + v, v, nv, nv]
            groups += [
                _Group(
                    tuple(f"{a}in_proj_{p}.weight" for p in ("qkv", "z", "b", "a")),
                    (f"{m}self_attention.in_proj.weight",),
                    _cat_to_mg,
                    _split_to_hf(sizes),
                ),
                one(f"{a}conv1d.weight", f"{m}self_attention.conv1d.weight"),
                one(f"{a}dt_bias", f"{m}self_attention.dt_bias"),
                one(f"{a}A_log", f"{m}self_attention.A_log"),
                one(
                    f"{a}norm.weight",
                    f"{m}self_attention.out_norm.weight",
                    _shift(-1.0) if out_norm_shift else _same,
                    _shift(1.0) if out_norm_shift else _same,
                ),
                one(f"{a}out_proj.weight", f"{m}self_attention.out_proj.weight"),
            ]
        else:
            raise ValueError(
                f"layer_types[{i}] = {kind!r} is neither 'full_attention' nor 'linear_attention'"
            )
        if layer_spec == "local":
            norm_mg = f"{m}input_layernorm.weight"
        e_mg = f"{m}mlp.experts."
        fc1 = [
            f"{e_mg}local_experts.{e}.linear_fc1.weight"
            if layer_spec == "local"
            else f"{e_mg}linear_fc1.weight{e}"
            for e in range(num_experts)
        ]
        fc2 = [
            f"{e_mg}local_experts.{e}.linear_fc2.weight"
            if layer_spec == "local"
            else f"{e_mg}linear_fc2.weight{e}"
            for e in range(num_experts)
        ]
        s = f"{h}mlp.shared_expert."
        groups += [
            one(f"{h}input_layernorm.weight", norm_mg),
            one(f"{h}post_attention_layernorm.weight", f"{m}pre_mlp_layernorm.weight"),
            one(f"{h}mlp.gate.weight", f"{m}mlp.router.weight"),
            _Group((f"{h}mlp.experts.gate_up_proj",), tuple(fc1), _unstack, _stack),
            _Group((f"{h}mlp.experts.down_proj",), tuple(fc2), _unstack, _stack),
            _Group(
                (f"{s}gate_proj.weight", f"{s}up_proj.weight"),
                (f"{m}mlp.shared_experts.linear_fc1.weight",),
                _cat_to_mg,
                _split_to_hf([ffn, ffn]),
            ),
            one(f"{s}down_proj.weight", f"{m}mlp.shared_experts.linear_fc2.weight"),
            one(f"{h}mlp.shared_expert_gate.weight", f"{m}mlp.shared_experts.gate_weight"),
        ]
    groups.append(one("model.norm.weight", "decoder.final_layernorm.weight"))
    if not getattr(config, "tie_word_embeddings", False):
        groups.append(one("lm_head.weight", "output_layer.weight"))
    return groups


def _convert(
    state_dict: Mapping[str, Tensor], groups: list[_Group], *, to_megatron: bool
) -> dict[str, Tensor]:
    src_side, dst_side = ("HF", "Megatron") if to_megatron else ("Megatron", "HF")
    remaining = dict(state_dict)
    if to_megatron:
        # a tied lm_head is the embedding itself: Megatron keeps one (share_embeddings_and_output_weights)
        if "lm_head.weight" in remaining and not any("lm_head.weight" in g.hf for g in groups):
            remaining.pop("lm_head.weight")
    else:
        remaining = {k: t for k, t in remaining.items() if not k.endswith(_EXTRA_STATE)}
    out: dict[str, Tensor] = {}
    for g in groups:
        src, dst = (g.hf, g.mg) if to_megatron else (g.mg, g.hf)
        fn = g.to_mg if to_megatron else g.to_hf
        for key in src:
            if key not in remaining:
                raise NameMapError(
                    f"{src_side} state dict lacks {key!r}, which maps to {dst_side} {list(dst)}; the state "
                    "dict is truncated or belongs to another architecture than the config"
                )
        converted = fn([remaining.pop(key) for key in src])
        out.update(zip(dst, converted, strict=True))
    if remaining:
        key = sorted(remaining)[0]
        raise NameMapError(
            f"{src_side} key {key!r} has no {dst_side} counterpart in the Qwen3.5-MoE name map "
            f"({len(remaining)} unmapped key(s)); it belongs to another architecture or layer spec"
        )
    if not to_megatron and "lm_head.weight" not in out:
        out["lm_head.weight"] = out["model.embed_tokens.weight"]  # tied: HF's state dict names both
    return out


def megatron_names(
    config: Any, *, layer_spec: LayerSpec = "local", zero_centered_out_norm: bool | None = None
) -> list[str]:
    """The Megatron parameter names the map produces for ``config``, in model order (no ``_extra_state``).

    Raises:
        ValueError: ``config`` is not a Qwen3.5-MoE text config, or ``layer_spec`` is unknown.
    """
    return [k for g in _groups(config, layer_spec, zero_centered_out_norm) for k in g.mg]


def hf_to_megatron(
    state_dict: Mapping[str, Tensor],
    config: Any,
    *,
    layer_spec: LayerSpec = "local",
    zero_centered_out_norm: bool | None = None,
) -> dict[str, Tensor]:
    """Renames and re-packs an HF Qwen3.5-MoE state dict into megatron-core ``GPTModel`` names (T1 §6).

    Args:
        state_dict: ``Qwen3_5MoeForCausalLM.state_dict()`` (keys ``model.embed_tokens.weight``,
            ``model.layers.{i}...``, ``model.norm.weight``, ``lm_head.weight``), full (unsharded) tensors.
        config: the HF ``Qwen3_5MoeTextConfig`` of the model (`t1_policy.hf_config_from_spec`).
        layer_spec: ``"local"`` (plain torch, unfused norms, ``SequentialMLP``) or ``"te"`` (Transformer
            Engine, fused input norms, ``TEGroupedMLP``); see the module docstring.
        zero_centered_out_norm: store the GDN output norm as ``w - 1``; None = True for ``"te"``, False for
            ``"local"``.

    Returns:
        Megatron name -> tensor; fused tensors are fresh, the others are the input tensors themselves.

    Raises:
        NameMapError: a key the map needs is missing, or a key has no Megatron counterpart (named).
        ValueError: ``config`` is not a Qwen3.5-MoE text config, or ``layer_spec`` is unknown.
    """
    return _convert(state_dict, _groups(config, layer_spec, zero_centered_out_norm), to_megatron=True)


def megatron_to_hf(
    state_dict: Mapping[str, Tensor],
    config: Any,
    *,
    layer_spec: LayerSpec = "local",
    zero_centered_out_norm: bool | None = None,
) -> dict[str, Tensor]:
    """The inverse of `hf_to_megatron`: a full Megatron state dict back to HF names (publication, export).

    ``*._extra_state`` entries (TE FP8 metadata) are skipped. With tied embeddings (``tie_word_embeddings``)
    ``lm_head.weight`` is the embedding tensor, as in HF's own state dict.

    Args:
        state_dict: Megatron name -> full tensor, names as `megatron_names` lists them.
        config: the HF ``Qwen3_5MoeTextConfig`` of the model.
        layer_spec: as in `hf_to_megatron`.
        zero_centered_out_norm: as in `hf_to_megatron`.

    Returns:
        HF name -> tensor, loadable with ``Qwen3_5MoeForCausalLM.load_state_dict(..., strict=True)``.

    Raises:
        NameMapError: a key the map needs is missing, or a key has no HF counterpart (named).
        ValueError: ``config`` is not a Qwen3.5-MoE text config, or ``layer_spec`` is unknown.
    """
    return _convert(state_dict, _groups(config, layer_spec, zero_centered_out_norm), to_megatron=False)
