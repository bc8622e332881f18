"""In-process torch engine on a small Qwen3.5-MoE: SGLang's answers without a server (DESIGN.md, embedded).

Torch work runs on one dedicated worker thread, so many async trials share one engine without blocking the
event loop. Up to ``max_batch_size`` requests decode together with continuous batching: one forward over
the active sequences per step, each with its own cache row, seeded generator and stop
(`t1_rollout.engine.batching`); ``max_batch_size: 1`` serves one request at a time in arrival order. The
forwards are batch-invariant (`t1_rollout.engine.invariant`): a request gets the same ids and log-probs,
bit for bit, whatever it is batched with, given the same prefix-cache hit (below). Routing is captured
from the MoE routers during the very forwards that produce the sampled tokens (T1 §4.2), so the record is
exactly what the sampler used.

A per-sequence prefix cache keeps the KV/recurrent state after each answer: a prompt that extends a
previous prompt + output (the next turn of the same trial, TITO strict case) only prefills its new tokens,
and the rows of the cached prefix are those recorded when it was computed (as SGLang's radix cache does).
Weight updates flush it. A hit is not bit-identical to prefilling the whole prompt (the chunked forward from a
cached state rounds differently, up to ~1e-6 in a log-prob: a strict xfail test), and which entries are kept
depends on the order answers finish, so runs that differ in that order can differ at that level.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping

import torch

from t1_policy import device_problem, num_real_tokens
from t1_r3 import moe_routers
from t1_rollout.engine.base import EngineStateError, Generation, SamplingParams
from t1_rollout.engine.batching import DecodeLoop, Prefix, Request
from t1_spec import EmbeddedEngineSpec, Recipe

__all__ = ["EmbeddedEngine"]


class EmbeddedEngine:
    """In-process engine; see the module docstring. Implements `t1_rollout.engine.base.Engine`.

    Args:
        model: a `Qwen3_5MoeForCausalLM` (e.g. from `t1_policy.build_model`); the engine owns it.
        weight_version: version of the weights ``model`` holds.
        device: torch device string.
        num_threads: torch intra-op threads, set PROCESS-WIDE (torch has no per-thread setting); None leaves
            torch's setting. Default 1: on a loaded 2-core box one thread ran a 1000-token prefill in
            ~0.09 s and decode at ~23 ms/token, two threads ~0.2-2 s and ~130 ms/token (spinning against
            the sandboxes and the trainer for the second core).
        prefix_cache_size: sequences whose state is kept for prefix reuse (least recently used evicted);
            0 = always prefill from scratch.
        seed: seeds the draws of requests that give no seed.
        max_batch_size: requests decoded together at most (continuous batching); 1 = one at a time.
        batch_invariant: run every forward under `t1_rollout.engine.invariant.BatchInvariantMode`, so a
            request's ids and log-probs are bit-identical whatever else is in its batch (and equal to one at
            a time). False uses torch's kernels as they are (batched log-probs then differ by ~1e-6); it is
            there to measure what invariance costs.

    Raises:
        ValueError: a model without a full-attention layer, or ``max_batch_size < 1``. With ``max_batch_size >
            1``, a model whose cache layers cannot be stacked fails its requests with a ValueError
            (`t1_rollout.engine.batching.check_batchable`).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        weight_version: int = 0,
        device: str = "cpu",
        num_threads: int | None = 1,
        prefix_cache_size: int = 64,
        seed: int = 0,
        max_batch_size: int = 1,
        batch_invariant: bool = True,
    ) -> None:
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        self.model = model.to(device).eval()
        self.device = torch.device(device)
        self.weight_version = weight_version
        config = model.config
        if "full_attention" not in getattr(config, "layer_types", ["full_attention"]):
            raise ValueError(
                "the embedded engine needs at least one full-attention layer (num_layers >= "
                "full_attention_interval): transformers' cache of linear-attention layers alone cannot "
                "report its length, so cached decoding fails"
            )
        self.vocab_size: int = config.vocab_size
        self.vocab_limit = num_real_tokens(config.vocab_size)
        self.max_positions: int = config.max_position_embeddings
        routers = moe_routers(model)
        self.num_layers, self.top_k = len(routers), int(routers[0].top_k)
        self.num_experts = int(routers[0].num_experts)
        self._prefix_cache_size = prefix_cache_size
        self._prefixes: OrderedDict[tuple[int, ...], Prefix] = OrderedDict()
        self._seeds = itertools.count(seed * 1_000_003 + 1)
        self._stats = dict.fromkeys(
            ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "decode_steps", "busy_s"), 0.0
        )
        self._loop = DecodeLoop(self, max_batch_size, batch_invariant=batch_invariant)
        weakref.finalize(self, self._loop.stop_soon)

    @classmethod
    def from_spec(
        cls, spec: EmbeddedEngineSpec, *, model: torch.nn.Module, seed: int, recipe: Recipe | None = None
    ) -> EmbeddedEngine:
        """The engine of the recipe's ``engine`` section, serving ``model`` at weight version 0.

        Args:
            spec: the ``engine`` section (``device``, ``max_batch_size``; ``sampling`` is read per request,
                `SamplingParams`).
            model: the policy, e.g. `t1_policy.build_model` of the recipe's ``model`` section; the engine
                owns it.
            seed: the recipe seed; seeds the draws of requests that give no seed.
            recipe: the whole recipe (the seam passes it to every engine; the embedded one needs no more).
        """
        del recipe
        return cls(model, weight_version=0, device=spec.device, seed=seed, max_batch_size=spec.max_batch_size)

    @classmethod
    def preflight(cls, recipe: Recipe) -> list[str]:
        """What stops ``recipe`` from running on this engine here, one line each (empty: runnable).

        Cheap: builds no model. Checks that a ``cuda`` device is one torch sees (the spec already keeps the
        embedded engine co-located, ``plan.inference_devices: 0``).
        """
        spec = recipe.engine
        if not isinstance(spec, EmbeddedEngineSpec):
            return [f"engine.kind '{spec.kind}': the embedded engine serves kind 'embedded' only"]
        unseen = device_problem("engine.device", spec.device)
        return [unseen] if unseen else []

    # ---- requests

    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        *,
        return_logprob: bool = True,
        return_routed_experts: bool = True,
        routed_experts_start_len: int = 0,
    ) -> Generation:
        """Samples a continuation of ``input_ids``; SGLang ``/generate`` semantics.

        Args:
            input_ids: prompt ids, ``[prompt_tokens]``, each in ``[0, vocab_size)``.
            sampling: decoding parameters.
            return_logprob: fill ``output_logprobs``.
            return_routed_experts: fill ``routed_experts`` (int32 ``[rows, L, k]``).
            routed_experts_start_len: first routing row returned, in ``[0, prompt_tokens]``.

        Returns:
            The `Generation`; ``rows = prompt_tokens + completion_tokens - 1 - routed_experts_start_len``.

        Raises:
            ValueError: empty prompt, ids out of range, a prompt that fills the context, or a start row
                outside ``[0, prompt_tokens]``.
            asyncio.CancelledError: when the caller is cancelled; the request stops at the next token.
        """
        self._validate(input_ids, routed_experts_start_len)
        request = Request(
            input_ids=list(input_ids),
            sampling=sampling,
            seed=sampling.seed if sampling.seed is not None else next(self._seeds),
            return_logprob=return_logprob,
            return_routed=return_routed_experts,
            start_len=routed_experts_start_len,
            t0=time.monotonic(),
        )
        future = asyncio.wrap_future(self._loop.submit(request))
        try:
            return await future
        except asyncio.CancelledError:
            request.cancel.set()  # stop at its next token (the straggler tail is cancelled, T1 §7)
            raise

    def _validate(self, input_ids: list[int], start_len: int) -> None:
        if not input_ids:
            raise ValueError("input_ids is empty; a generation needs at least one prompt token")
        lo, hi = min(input_ids), max(input_ids)
        if lo < 0 or hi >= self.vocab_size:
            raise ValueError(
                f"input_ids hold ids in [{lo}, {hi}], outside the vocabulary [0, {self.vocab_size})"
            )
        if len(input_ids) >= self.max_positions:
            raise ValueError(
                f"prompt of {len(input_ids)} tokens leaves no room under max_position_embeddings="
                f"{self.max_positions}; shorten the trajectory (rollout.context_tokens)"
            )
        if not 0 <= start_len <= len(input_ids):
            raise ValueError(
                f"routed_experts_start_len={start_len} must lie in [0, {len(input_ids)}] (prompt)"
            )

    # ---- weights and quiescence

    def pause(self) -> None:
        """Quiesces: blocks until every request in flight finishes; later requests wait for `resume`."""
        self._loop.pause()

    def resume(self) -> None:
        """Releases held requests."""
        self._loop.resume()

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], *, weight_version: int) -> None:
        """Copies ``state_dict`` into the model and sets ``weight_version`` (T1 Appendix 12).

        A partial state dict updates only the named tensors. The prefix cache is flushed: states computed
        under the old weights must not condition the new version's tokens.

        Args:
            state_dict: parameter/buffer name -> tensor, names as in ``model.state_dict()``.
            weight_version: the new version; must exceed the current one.

        Raises:
            EngineStateError: the engine is not paused (call `pause` first; no request may span two versions).
            ValueError: a version that does not advance, an unknown name, or a shape mismatch (nothing is
                copied then).
        """
        with self._loop.cond:
            if not self._loop.paused:
                raise EngineStateError(
                    "update_weights needs a paused engine (pause() -> update_weights() -> resume()), "
                    "so that no "
                    "request spans two weight versions"
                )
            if weight_version <= self.weight_version:
                raise ValueError(f"weight_version {weight_version} does not advance {self.weight_version}")
            own = self.model.state_dict()
            unknown = sorted(set(state_dict) - set(own))
            if unknown:
                raise ValueError(f"update_weights: unknown tensor names {unknown[:5]} (of {len(unknown)})")
            bad = [
                (n, tuple(t.shape), tuple(own[n].shape))
                for n, t in state_dict.items()
                if t.shape != own[n].shape
            ]
            if bad:
                raise ValueError(f"update_weights: shape mismatch (name, given, expected): {bad[:5]}")
            with torch.no_grad():
                for name, tensor in state_dict.items():
                    own[name].copy_(tensor.detach().to(device=own[name].device, dtype=own[name].dtype))
            self._prefixes.clear()
            self.weight_version = weight_version

    def stats(self) -> dict[str, float]:
        """Totals since start (for the run's metrics).

        Returns:
            requests, prompt_tokens, cached_tokens (reused from the prefix cache, not recomputed),
            completion_tokens, decode_steps (decode forwards; completion_tokens / decode_steps is roughly
            the mean batch), and busy_s (seconds the decode loop had work, queueing excluded; a batched
            step counts once, not once per sequence).
        """
        return dict(self._stats)

    def close(self) -> None:
        """Stops the worker thread after the queued requests (those held by a pause fail instead)."""
        self._loop.close()
