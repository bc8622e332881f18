"""Batch-invariant forward for the embedded engine: a row's logits do not depend on the rest of its batch.

Continuous batching (`t1_rollout.engine.batching`) forwards ``[B, 1]`` decode steps over whatever
sequences are in flight. With torch's CPU kernels as they are, a row's float32 logits then depend on the
batch, four ways (measured on the tiny Qwen3.5-MoE, one thread, MKL on AVX-512):

* MKL's sgemm sums a row's products in one order when the call holds 1 row, another for 2 rows, and a
  third for 3 or more (a one-output projection, the shared-expert gate, also rounds the last row of an odd
  row count differently);
* each MoE expert's matmul (``torch._grouped_mm``) holds the tokens routed to it, a count the other rows
  set;
* a left-padded batched attention is called with a mask and with the query heads packed onto the key
  heads, the lone sequence without a mask and with ``enable_gqa``: two kernels;
* the elementwise kernels (exp, sigmoid, softplus, silu, ...) compute whole blocks of two vectors with
  SLEEF and the last ``numel % 32`` floats (or a strided tensor) with the scalar libm, which rounds
  differently: a row lands in the tail or not depending on the batch size.

Sampled ids mostly agree, but log-probs differ by up to about 1e-6 from one-at-a-time decoding.
`BatchInvariantMode` (a torch function mode; modes are thread-local, so the trainer's forwards on other
threads are untouched) removes the four during the engine's forwards:

* every ``F.linear`` (projections, router, shared expert and its gate, LM head) runs over its rows padded
  with zero rows to a multiple of `ROW_BUCKET`, in one call: the sgemm then always holds an even row count
  of at least 4, for which MKL reduces every row in the same order whatever the other rows hold and
  however many there are. This is a property of the BLAS, not a guarantee: ``test_invariant.py`` checks it
  on the model's shapes for 1 to 40 and 64 rows at several positions, so a BLAS without it fails there;
* ``torch._grouped_mm`` runs group by group through the same padded linear;
* ``F.scaled_dot_product_attention`` with a left-padding mask over a batch runs row by row on each row's
  own key columns, without a mask and with the lone call's head layout: exactly the lone call;
* the transcendental elementwise functions run on a flat copy padded to a multiple of 64 elements, so
  every element takes the vectorized code.

Everything else the decode forward does was measured row-invariant: RMS norms, softmax, top-k and the
Gated DeltaNet recurrence reduce within a row, the depthwise convolution is per row, and the experts'
outputs are summed per token in slot order. The sampler reads one row's logits alone. The end-to-end
property (ids and log-probs bit-identical batched at 1, 3 and 16 and one at a time) is
``tests/t1_rollout/test_engine_invariance.py``; it holds with one torch thread (the engine's default):
with more, MKL and torch's parallel loops split the work by thread count, which is not covered.

Cost, tiny model, one thread: the LM head of a lone decode step computes 4 rows instead of 1 (8.4 ms
against 11 ms for MKL's one-row path: no slower); a batch of 16 computes its 16 rows at once; attention is
one small call per row; each elementwise call copies its input once.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = [
    "ROW_BUCKET",
    "BatchInvariantMode",
    "invariant_elementwise",
    "invariant_grouped_mm",
    "invariant_linear",
    "invariant_sdpa",
]

ROW_BUCKET = 4
"""Row counts of every linear are padded to a multiple of this (>= 3 and even: see the module docstring)."""

_SDPA = F.scaled_dot_product_attention
_LINEAR = F.linear
_ELEMENT_PAD = 64
"""Elementwise inputs are padded to a multiple of this many elements (>= two AVX-512 vectors of float32)."""

_ELEMENTWISE = frozenset(
    f
    for name in ("exp", "log", "sigmoid", "rsqrt", "sin", "cos", "tanh")
    for f in (getattr(torch, name), getattr(torch.Tensor, name))
) | {F.silu, F.softplus, F.gelu, F.sigmoid}
_GROUPED_MM = tuple(f for f in (getattr(torch, "_grouped_mm", None), getattr(F, "grouped_mm", None)) if f)


def invariant_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` whose every output row is independent of the other rows of ``x``.

    Args:
        x: ``[..., in_features]``, any float dtype.
        weight: ``[out_features, in_features]``.
        bias: ``[out_features]`` or None.

    Returns:
        ``[..., out_features]``, the rows of one ``F.linear`` over ``x``'s rows padded with zero rows to a
        multiple of `ROW_BUCKET`.
    """
    rows = x.reshape(-1, x.shape[-1])
    m = rows.shape[0]
    pad = -m % ROW_BUCKET
    if m == 0 or pad:
        rows = torch.cat([rows, rows.new_zeros(pad or ROW_BUCKET, rows.shape[1])])
    out = _LINEAR(rows, weight, bias)[:m]
    return out.reshape(*x.shape[:-1], out.shape[-1])


def invariant_elementwise(func: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """``func(x, *args, **kwargs)`` for an elementwise ``func`` (exp, sigmoid, silu, ...), batch-invariant.

    Torch's CPU kernels run a contiguous tensor through the vectorized (SLEEF) code in blocks of two vectors
    and the last ``numel % (2 * vector width)`` elements, or a whole strided tensor, through the scalar
    libm code, which rounds differently: an element's value then depends on where the batch put it. Here
    ``x`` is copied flat and padded with zeros to a multiple of `_ELEMENT_PAD`, so every element takes the
    vectorized code. An in-place ``func`` (``inplace=True``) writes the result back into ``x``; a call with
    ``out=`` and a non-float ``x`` run unchanged (the model's forward makes neither).

    Args:
        func: the torch function called.
        x: float tensor of any shape.
        *args: ``func``'s further arguments (none of them a tensor of ``x``'s shape).
        **kwargs: ``func``'s keyword arguments; ``inplace`` is honoured as described.

    Returns:
        A tensor of ``x``'s shape (``x`` itself when in place).
    """
    if not x.is_floating_point() or kwargs.get("out") is not None:
        return func(x, *args, **kwargs)
    inplace = bool(kwargs.pop("inplace", False))
    flat = x.reshape(-1)
    n = flat.numel()
    padded = torch.cat([flat, flat.new_zeros(-n % _ELEMENT_PAD or _ELEMENT_PAD * (n == 0))])
    out = func(padded, *args, **kwargs)[:n].reshape(x.shape)
    return x.copy_(out) if inplace else out


def invariant_grouped_mm(
    mat_a: torch.Tensor,
    mat_b: torch.Tensor,
    offs: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``torch._grouped_mm`` of 2-D ``mat_a`` by 3-D ``mat_b``, each group through `invariant_linear`.

    The MoE experts' matmul (transformers' ``grouped_mm`` experts): group ``e`` holds the rows routed to
    expert ``e``, a count set by the whole batch, so each group is padded as any linear is.

    Args:
        mat_a: ``[S, K]``, rows sorted by group.
        mat_b: ``[E, K, N]``.
        offs: int ``[E]``, cumulative row ends of the groups (rows past ``offs[-1]`` come out zero).
        bias: ``[E, N]`` or None.
        out_dtype: result dtype (default ``mat_a``'s).

    Returns:
        ``[S, N]``.

    Raises:
        ValueError: operands of another layout (not 2-D by 3-D with ``offs``).
    """
    if mat_a.dim() != 2 or mat_b.dim() != 3 or offs is None:
        raise ValueError(
            f"batch-invariant grouped_mm takes [S, K] x [E, K, N] with offs; got {tuple(mat_a.shape)} x "
            f"{tuple(mat_b.shape)}, offs {'given' if offs is not None else 'None'}"
        )
    out = mat_a.new_zeros(mat_a.shape[0], mat_b.shape[2], dtype=out_dtype or mat_a.dtype)
    start = 0
    for e, end in enumerate(offs.tolist()):
        if end > start:
            w_nk = mat_b[e].transpose(0, 1)
            out[start:end] = invariant_linear(mat_a[start:end], w_nk, None if bias is None else bias[e])
        start = end
    return out


def _suffix_start(allowed: torch.Tensor) -> int | None:
    """First column of a row's keys when ``allowed`` ``[..., S]`` lets every query see one same suffix."""
    cols = allowed.reshape(-1, allowed.shape[-1])
    if not bool((cols == cols[:1]).all()):
        return None
    col = cols[0]
    n = int(col.sum())
    if n == 0 or not bool(col[col.shape[0] - n :].all()):
        return None
    return col.shape[0] - n


def invariant_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` whose every batch row is computed as if it were alone.

    A batch with a left-padding mask (0 / True on each row's real key columns, a suffix) is attended row
    by row on the row's unpadded keys with no mask, the call a lone sequence makes. A mask of any other
    pattern (a bias, a hole, per-query differences: never made by the engine) is passed on unchanged for
    that row.

    Args:
        query: ``[B, H, L, D]``.
        key: ``[B, H_kv, S, D]``.
        value: ``[B, H_kv, S, D]``.
        attn_mask: None, or bool / float ``[B or 1, H or 1, L, S]``.
        **kwargs: ``dropout_p``, ``is_causal``, ``scale``, ``enable_gqa`` as for SDPA.

    Returns:
        ``[B, H, L, D]``.
    """
    if attn_mask is None or query.shape[0] == 1:
        return _SDPA(query, key, value, attn_mask=attn_mask, **kwargs)
    if attn_mask.dtype == torch.bool:
        allowed = attn_mask
    elif bool(((attn_mask == 0) | (attn_mask == float("-inf"))).all()):
        allowed = attn_mask == 0
    else:
        return _SDPA(query, key, value, attn_mask=attn_mask, **kwargs)
    outs = []
    for b in range(query.shape[0]):
        mask_b = attn_mask[b : b + 1] if attn_mask.shape[0] > 1 else attn_mask
        start = _suffix_start(allowed[b] if allowed.shape[0] > 1 else allowed[0])
        if start is None:
            outs.append(_SDPA(query[b : b + 1], key[b : b + 1], value[b : b + 1], attn_mask=mask_b, **kwargs))
        else:
            outs.append(
                _alone(query[b : b + 1], key[b : b + 1, :, start:], value[b : b + 1, :, start:], kwargs)
            )
    return torch.cat(outs)


def _alone(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kwargs: dict[str, Any]) -> torch.Tensor:
    """One row attended as transformers attends a lone, unmasked sequence: grouped heads by ``enable_gqa``.

    With a mask, transformers packs a one-token query's heads onto the key heads (``[1, H_kv, H / H_kv,
    D]``); without one (the lone call) it passes ``[1, H, 1, D]`` and ``enable_gqa``. A mask shared by every
    query makes the two the same attention, so the packed form is unpacked to the lone call's.
    """
    kwargs = dict(kwargs)
    packed = (
        not kwargs.get("enable_gqa")
        and not kwargs.get("is_causal")
        and q.shape[1] == k.shape[1]
        and q.shape[2] > 1
    )
    if packed:
        heads, length = q.shape[1], q.shape[2]
        q = q.reshape(1, heads * length, 1, q.shape[3])
        kwargs["enable_gqa"] = True
        out = _SDPA(q.contiguous(), k.contiguous(), v.contiguous(), attn_mask=None, **kwargs)
        return out.reshape(1, heads, length, out.shape[3])
    return _SDPA(q.contiguous(), k.contiguous(), v.contiguous(), attn_mask=None, **kwargs)


class BatchInvariantMode(TorchFunctionMode):
    """Within ``with BatchInvariantMode():`` on this thread, linears and attention run batch-invariantly.

    Routes ``F.linear`` to `invariant_linear` and ``F.scaled_dot_product_attention`` to `invariant_sdpa`;
    every other torch call passes through unchanged. Torch function modes are thread-local: forwards on
    other threads (the trainer's) are not affected. Source: the engine's decode loop, T1 §4.2 (the sampler's
    log-probs are the rollout log-probs PPO's ratio uses).
    """

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is _LINEAR:
            return invariant_linear(*args, **kwargs)
        if func is _SDPA:
            return invariant_sdpa(*args, **kwargs)
        if func in _ELEMENTWISE and args and isinstance(args[0], torch.Tensor):
            return invariant_elementwise(func, *args, **kwargs)
        if func in _GROUPED_MM:
            return invariant_grouped_mm(*args, **kwargs)
        return func(*args, **kwargs)
