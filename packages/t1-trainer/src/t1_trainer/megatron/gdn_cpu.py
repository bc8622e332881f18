"""Megatron-core's ``GatedDeltaNet`` on the CPU: its three flash-linear-attention kernels answered in torch.

megatron-core 0.19.2's ``GatedDeltaNet`` (``megatron.core.ssm.gated_delta_net``) raises ``ImportError`` in its
constructor without flash-linear-attention (``fla``), whose kernels are Triton (CUDA only). Its forward calls
exactly three of them: ``fla.modules.l2norm.l2norm`` on the concatenated queries and keys (from
``_prepare_input_for_gated_delta_rule``), ``fla.modules.convolution.causal_conv1d`` on the q/k/v channels, and
``fla.ops.gated_delta_rule.chunk_gated_delta_rule`` (the layer's ``gated_delta_rule``). `CpuGatedDeltaNet` is
megatron's own layer, projections, gates, norm and parameters unchanged, with those three answered by torch
functions of the same signature while it is built and while it runs forward:

* `torch_l2norm`: ``x / sqrt(sum(x^2) + eps)`` over the last axis, written as transformers' Qwen3.5 ``l2norm``
  writes it (``x * rsqrt(...)``, eps 1e-6), so that q and k are those the torch backend's model computes.
* `torch_causal_conv1d`: the depthwise causal convolution of each sequence with ``kernel - 1`` zeros of left
  padding, then the activation (transformers' torch ``causal_conv1d_fn``).
* `torch_gated_delta_rule`: the gated delta rule (Yang, Kautz and Hatamizadeh, Gated Delta Networks, ICLR
  2025, §3: ``S_t = S_{t-1} exp(g_t) (I - beta_t k_t k_t^T) + beta_t v_t k_t^T``, ``o_t = S_t q_t /
  sqrt(d_k)``) in its chunked form, by transformers' torch reference ``torch_chunk_gated_delta_rule``
  (``qwen3_5_moe``), called as the plain torch function: the same pinned per-piece arithmetic as
  `t1_trainer.context_parallel.scan`, and the function the torch backend's Qwen3.5 model runs on the CPU,
  so the two backends compute the same layer. At cp = 1 `t1_trainer.context_parallel.gated_delta_rule_cp`
  is not called: its descriptor requires every real sample to be split ``2 * cp`` ways (an even length),
  and the backend's samples have any length.

Context parallelism (cp > 1): megatron's forward would move each head's whole sequence onto one rank
(an all-to-all); `CpuGatedDeltaNet` instead runs T1's sequence-sharded scan, state carried from rank to rank
(T1 §7.1, `t1_trainer.context_parallel`), on one unpacked sample.

Only on the CPU (`t1_trainer.megatron.model.build_gpt` picks this layer when ``cpu``); on CUDA
megatron's ``GatedDeltaNet`` and fla's kernels run unchanged. The kernels are swapped into megatron's modules
only for the duration of the constructor and of each forward (the backward reuses the autograd graph the
forward built); megatron's ``torch.compile``-decorated helpers (``jit_fuser``) run eagerly meanwhile, as a
CPU has no compiler toolchain to count on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from transformers.activations import ACT2FN
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as hf_qwen35

# CpuGatedDeltaNet is defined on first access (module __getattr__): it subclasses megatron-core's layer.
__all__ = ["CpuGatedDeltaNet", "torch_causal_conv1d", "torch_gated_delta_rule", "torch_l2norm"]  # noqa: F822

# The plain torch function behind transformers' kernel-hub wrapper (pinned, as in context_parallel.scan).
_CHUNK = getattr(
    hf_qwen35.torch_chunk_gated_delta_rule, "__wrapped__", hf_qwen35.torch_chunk_gated_delta_rule
)


def torch_l2norm(x: torch.Tensor, dim: int = -1, eps: float = 1e-6, output_dtype: Any = None) -> torch.Tensor:
    """``x`` divided by its L2 norm along ``dim`` (``x * rsqrt(sum(x^2) + eps)``), any shape, ``x``'s dtype.

    The signature of ``fla.modules.l2norm.l2norm``; the arithmetic of transformers' Qwen3.5 ``l2norm``.
    """
    out = x * torch.rsqrt((x * x).sum(dim=dim, keepdim=True) + eps)
    return out if output_dtype is None else out.to(output_dtype)


def _segments(length: int, cu_seqlens: torch.Tensor | None, where: str) -> list[tuple[int, int]]:
    if cu_seqlens is None:
        return [(0, length)]
    cu = [int(c) for c in cu_seqlens.tolist()]
    if cu[0] != 0 or cu[-1] != length or any(b < a for a, b in zip(cu, cu[1:], strict=False)):
        raise ValueError(
            f"{where}: cu_seqlens {cu[:8]} must run from 0 to the {length} tokens, non-decreasing"
        )
    return [(a, b) for a, b in zip(cu, cu[1:], strict=False) if b > a]


def _refuse_state(where: str, initial_state: Any, output_final_state: bool) -> None:
    if initial_state is not None or output_final_state:
        raise NotImplementedError(
            f"{where}: carried recurrent or convolution state (inference) is not built on the CPU; "
            "megatron's GatedDeltaNet passes none in training"
        )


def _check_batch(batch: int, cu_seqlens: torch.Tensor | None, where: str) -> None:
    if cu_seqlens is not None and batch != 1:
        raise ValueError(f"{where}: packed sequences (cu_seqlens) take a batch of 1, got {batch}")


def torch_causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    **_: Any,
) -> tuple[torch.Tensor, None]:
    """Depthwise causal convolution of every sequence, then ``activation`` (``fla``'s ``causal_conv1d``).

    Args:
        x: ``[batch, tokens, channels]``.
        weight: ``[channels, kernel]``.
        bias: ``[channels]`` or None.
        activation: a transformers activation name (megatron passes ``silu``), or None.
        initial_state: must be None (no carried convolution state in training).
        output_final_state: must be False.
        cu_seqlens: ``[n + 1]`` offsets of packed sequences (batch 1), each convolved from zeros; or None.

    Returns:
        ``(y [batch, tokens, channels] in x's dtype, None)``.

    Raises:
        NotImplementedError: a carried state is asked for.
        ValueError: ``cu_seqlens`` with a batch above 1, or offsets that do not cover the tokens.
    """
    where = "torch_causal_conv1d"
    _refuse_state(where, initial_state, output_final_state)
    _check_batch(x.shape[0], cu_seqlens, where)
    halo = weight.shape[-1] - 1
    outs = []
    for a, b in _segments(x.shape[1], cu_seqlens, where):
        seg = x[:, a:b].transpose(1, 2).to(weight.dtype)  # [batch, channels, n]
        y = F.conv1d(seg, weight[:, None, :], bias, padding=halo, groups=weight.shape[0])[..., : b - a]
        outs.append(ACT2FN[activation](y) if activation is not None else y)
    return torch.cat(outs, dim=-1).transpose(1, 2).to(x.dtype), None


def torch_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    **_: Any,
) -> tuple[torch.Tensor, None]:
    """The chunked gated delta rule of each sequence from a zero state (fla's ``chunk_gated_delta_rule``).

    Gated Delta Networks (Yang, Kautz and Hatamizadeh, ICLR 2025) §3, the recurrence in its chunkwise form, by
    transformers' torch reference (64-token chunks, float32 inside); the scale is ``1 / sqrt(key_dim)``.

    Args:
        q: ``[batch, tokens, heads, key_dim]``.
        k: ``[batch, tokens, heads, key_dim]``.
        v: ``[batch, tokens, heads, value_dim]``.
        g: ``[batch, tokens, heads]``, log decay (``<= 0``).
        beta: ``[batch, tokens, heads]``, write strength in ``(0, 1)``.
        scale: None or ``key_dim ** -0.5`` (the reference's only scale).
        initial_state: must be None (no carried recurrent state in training).
        output_final_state: must be False.
        use_qk_l2norm_in_kernel: L2-normalise q and k first (megatron normalises them itself: False).
        cu_seqlens: ``[n + 1]`` offsets of packed sequences (batch 1), each from a zero state; or None.

    Returns:
        ``(o [batch, tokens, heads, value_dim] in q's dtype, None)``.

    Raises:
        NotImplementedError: a carried state, or another scale, is asked for.
        ValueError: ``cu_seqlens`` with a batch above 1, or offsets that do not cover the tokens.
    """
    where = "torch_gated_delta_rule"
    _refuse_state(where, initial_state, output_final_state)
    _check_batch(q.shape[0], cu_seqlens, where)
    if scale is not None and abs(scale - q.shape[-1] ** -0.5) > 1e-12:
        raise NotImplementedError(f"{where}: scale {scale} is not 1/sqrt({q.shape[-1]}), the reference's")
    outs = []
    for a, b in _segments(q.shape[1], cu_seqlens, where):
        o, _ = _CHUNK(
            q[:, a:b],
            k[:, a:b],
            v[:, a:b],
            g[:, a:b],
            beta[:, a:b],
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        )
        outs.append(o)
    return torch.cat(outs, dim=1), None


@contextlib.contextmanager
def _torch_kernels() -> Iterator[None]:
    """Megatron's GDN modules see T1's torch kernels (and fla as present) for the body's duration only."""
    from megatron.core.ssm.gated_delta_net import common, gdn

    saved = (common.HAVE_FLA, common.l2norm, gdn.causal_conv1d)
    common.HAVE_FLA, common.l2norm, gdn.causal_conv1d = True, torch_l2norm, torch_causal_conv1d
    try:
        with torch.compiler.set_stance("force_eager"):
            yield
    finally:
        common.HAVE_FLA, common.l2norm, gdn.causal_conv1d = saved


def _cpu_gdn_class() -> type:
    from megatron.core.ssm.gated_delta_net import GatedDeltaNet

    class CpuGatedDeltaNet(GatedDeltaNet):
        """Megatron-core's ``GatedDeltaNet`` with its fla kernels answered in torch (module docstring)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            with _torch_kernels():
                super().__init__(*args, **kwargs)

        def _setup_variant_attrs(self) -> None:
            super()._setup_variant_attrs()
            self.gated_delta_rule = torch_gated_delta_rule

        def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            """Megatron's forward (``hidden [s, b, H]`` -> ``(out [s, b, H], bias)``) on the torch kernels.

            Above one context-parallel rank, `_forward_cp` instead.
            """
            with _torch_kernels():
                if self.cp_size > 1:
                    return self._forward_cp(hidden_states, kwargs.get("packed_seq_params"))
                return super().forward(hidden_states, *args, **kwargs)

        def _forward_cp(self, hidden_states: torch.Tensor, packed_seq_params: Any) -> Any:
            """The layer on this rank's load-balanced tokens with T1's sequence-sharded scan (T1 §7.1).

            megatron's own cp path moves every head's whole sequence onto one rank (an all-to-all); T1's
            keeps the sequence sharded: the fused projection per token, then the re-layout to contiguous
            pieces, the convolution with the predecessor's halo and the gated delta rule with its carried
            state (`t1_trainer.context_parallel`), the gated norm per token, the re-layout back and the
            output projection. The projections, gates and norm are megatron's own modules and parameters.
            """
            from t1_trainer.context_parallel import (
                causal_conv1d_cp,
                contiguous_to_interleaved,
                gated_delta_rule_cp,
                interleaved_to_contiguous,
            )
            from t1_trainer.megatron.cp import sample_descriptor

            if packed_seq_params is not None or hidden_states.shape[1] != 1:
                raise NotImplementedError(
                    "CpuGatedDeltaNet: context parallelism is built for one unpacked sample (batch 1)"
                )
            group = self.pg_collection.cp
            mixed, _ = self.in_proj(hidden_states)  # [n, 1, D]: sequence-parallel blocks gathered over tp
            n = mixed.shape[0]
            desc = sample_descriptor(n * self.cp_size, self.cp_size)
            x = interleaved_to_contiguous(mixed[:, 0], desc, group)
            q, k, v, z, beta, alpha = torch.split(x, list(self.in_proj_split_sections), dim=-1)
            conv = causal_conv1d_cp(
                torch.cat([q, k, v], dim=-1),
                self.conv1d.weight.squeeze(1),
                self.conv1d.bias if self.conv_bias else None,
                desc=desc,
                group=group,
                activation=self.activation,
            )
            q, k, v = torch.split(conv, [self.qk_dim_local_tp, self.qk_dim_local_tp, self.v_dim_local_tp], -1)
            q = q.reshape(n, -1, self.key_head_dim)
            k = k.reshape(n, -1, self.key_head_dim)
            if self.use_qk_l2norm:
                q, k = torch_l2norm(q), torch_l2norm(k)
            repeat = self.num_value_heads // self.num_key_heads
            if repeat > 1:  # value head h reads key head h // repeat, as megatron's GQA expansion
                q, k = q.repeat_interleave(repeat, dim=1), k.repeat_interleave(repeat, dim=1)
            g, beta = self._compute_g_and_beta(self.A_log, self.dt_bias, alpha, beta)
            core = gated_delta_rule_cp(
                q,
                k,
                v.reshape(n, -1, self.value_head_dim),
                g,
                beta,
                desc=desc,
                group=group,
                use_qk_l2norm=False,
            )
            normed = self._apply_gated_norm(core, z.reshape(n, -1, self.value_head_dim)).reshape(n, -1)
            return self.out_proj(contiguous_to_interleaved(normed, desc, group)[:, None])

    return CpuGatedDeltaNet


def __getattr__(name: str) -> Any:
    # The class subclasses megatron-core's, an optional extra: built on first use, not at import.
    if name == "CpuGatedDeltaNet":
        cls = _cpu_gdn_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
