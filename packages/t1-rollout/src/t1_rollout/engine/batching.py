"""Continuous batching for the embedded engine: one decode loop serves every concurrent request.

One worker thread owns the model. Between decode steps it admits waiting requests (up to ``max_batch_size``
in flight), prefills each one alone (batch 1, reusing the prefix cache), then merges its cache into the
batch; every step is ONE forward of ``[B, 1]`` over the active sequences, after which each sequence samples
its own token with its own seeded generator and stops on its own (stop id, ``max_new_tokens``, context
end, cancellation). A finished sequence leaves the batch at once and the next waiting request takes its
place at the next step (continuous batching, as SGLang's scheduler does; T1 §6).

KV layout: one batched transformers ``DynamicCache``, LEFT-padded. A full-attention layer holds keys and
values ``[B, H_kv, T, D]`` where row ``b`` keeps its ``n_b`` real positions in the last ``n_b`` columns;
the decode forward passes a 2-D attention mask (zeros on the pads) and each row's own position id, so a
padded column never receives attention weight and rotary positions are those of the sequence alone. Gated
DeltaNet layers hold fixed-size conv ``[B, C, K]`` and recurrent ``[B, H, d_k, d_v]`` states per row, which
stack without padding. The batch is rebuilt only when its membership changes (join or leave), not every
step; the padding then shrinks to the longest remaining sequence. A lone sequence decodes through exactly
the call the one-at-a-time engine made (its own cache, no mask, no position ids).

Equivalence: every forward runs under `t1_rollout.engine.invariant.BatchInvariantMode`, so the ids, routed
experts and log-probs of a batched answer are bit-identical to one-at-a-time decoding for the same seed
(one torch thread, the engine's default). Without it they are not: torch's CPU sgemm reduces a row in an
order set by how many rows the call holds, each MoE expert's matmul holds the tokens routed to it (a count
the other rows set), the left-padded attention shifts a row's columns, and the vectorized elementwise
kernels (exp, sigmoid, softplus, ...) round an element differently from their scalar tail; log-probs then
differ by up to about 1e-6. Prefills are not batched (a long prompt stalls the decode steps while it runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from t1_r3 import capture_routing, check_routing
from t1_rollout.engine.base import EngineStateError, FinishReason, Generation, SamplingParams
from t1_rollout.engine.invariant import BatchInvariantMode
from t1_rollout.engine.sampling import sample_token

if TYPE_CHECKING:
    from t1_rollout.engine.embedded import EmbeddedEngine

__all__ = ["DecodeLoop", "Prefix", "Request", "check_batchable"]


@dataclass
class Prefix:
    """State after forwarding ``tokens``: the batch-1 model cache and the routing rows of those tokens."""

    tokens: tuple[int, ...]
    cache: Any
    rows: np.ndarray  # [len(tokens), L, k], compact dtype of t1_r3


@dataclass
class Request:
    """One `generate` call in the loop: its arguments, the caller's future, and its decoding state.

    ``length`` counts the tokens forwarded into its cache (prefix + prompt + sampled but the last);
    ``chunks`` are the routing rows of those tokens, in order.
    """

    input_ids: list[int]
    sampling: SamplingParams
    seed: int
    return_logprob: bool
    return_routed: bool
    start_len: int
    t0: float
    cancel: threading.Event = field(default_factory=threading.Event)
    future: Future[Generation] = field(default_factory=Future)
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    chunks: list[np.ndarray] = field(default_factory=list)
    cached_tokens: int = 0
    length: int = 0
    budget: int = 0
    generator: torch.Generator | None = None


_STACKABLE = (
    "DynamicLayer",
    "LinearAttentionLayer",
)  # transformers' full-attention and Gated DeltaNet layers


def check_batchable(cache: Any) -> None:
    """Checks that every layer of a prefilled transformers cache is one `DecodeLoop` knows how to stack.

    Raises:
        ValueError: a cache layer other than the full-attention ``DynamicLayer`` or the Gated DeltaNet
            ``LinearAttentionLayer`` (e.g. sliding-window); serve that model with
            ``engine.max_batch_size: 1``.
    """
    unknown = sorted({type(layer).__name__ for layer in cache.layers} - set(_STACKABLE))
    if unknown:
        raise ValueError(
            f"continuous batching stacks full-attention and Gated DeltaNet cache layers only; this model's "
            f"cache has {unknown}: set engine.max_batch_size: 1"
        )


def _linear_state(layer: Any) -> bool:
    return hasattr(layer, "recurrent_states")


def _concat(parts: list[tuple[Any, int]], config: Any) -> Any:
    """One cache of all rows of ``parts`` (cache, width), each left-padded to the widest; tensors are new."""
    width = max(w for _, w in parts)
    out = type(parts[0][0])(config=config)  # transformers' DynamicCache, without importing transformers here
    for i, layer in enumerate(out.layers):
        src = [c.layers[i] for c, _ in parts]
        if _linear_state(layer):
            first = src[0]
            layer.conv_states[0] = torch.cat([s.conv_states[0] for s in src])
            layer.recurrent_states[0] = torch.cat([s.recurrent_states[0] for s in src])
            for name in (
                "is_conv_states_initialized",
                "is_recurrent_states_initialized",
                "has_previous_state",
                "conv_kernel_size",
            ):
                setattr(layer, name, dict(getattr(first, name)))
            layer.device, layer.dtype = first.device, first.dtype
        else:
            pads = [(0, 0, width - w, 0) for _, w in parts]
            layer.keys = torch.cat([F.pad(s.keys, pad) for s, pad in zip(src, pads, strict=True)])
            layer.values = torch.cat([F.pad(s.values, pad) for s, pad in zip(src, pads, strict=True)])
            layer.is_initialized, layer.device, layer.dtype = True, src[0].device, src[0].keys.dtype
    return out


def _select(cache: Any, rows: list[int], trim: int, config: Any) -> Any:
    """A new cache of ``rows`` of ``cache`` with the first ``trim`` (all-padding) columns dropped (copies)."""
    index = torch.tensor(rows, dtype=torch.long)
    out = type(cache)(config=config)
    for i, layer in enumerate(out.layers):
        src = cache.layers[i]
        if _linear_state(layer):
            layer.conv_states[0] = src.conv_states[0].index_select(0, index.to(src.device))
            layer.recurrent_states[0] = src.recurrent_states[0].index_select(0, index.to(src.device))
            for name in (
                "is_conv_states_initialized",
                "is_recurrent_states_initialized",
                "has_previous_state",
                "conv_kernel_size",
            ):
                setattr(layer, name, dict(getattr(src, name)))
            layer.device, layer.dtype = src.device, src.dtype
        else:
            layer.keys = src.keys.index_select(0, index.to(src.keys.device))[:, :, trim:].contiguous()
            layer.values = src.values.index_select(0, index.to(src.keys.device))[:, :, trim:].contiguous()
            layer.is_initialized, layer.device, layer.dtype = True, src.device, src.keys.dtype
    return out


def take_prefix(prefixes: OrderedDict[tuple[int, ...], Prefix], input_ids: list[int]) -> Prefix | None:
    """Removes and returns the longest cached proper prefix of ``input_ids`` (its cache is extended next)."""
    best: Prefix | None = None
    n = len(input_ids)
    for key, entry in prefixes.items():
        k = len(key)
        if k < n and (best is None or k > len(best.tokens)) and tuple(input_ids[:k]) == key:
            best = entry
    if best is not None:
        del prefixes[best.tokens]
    return best


def keep_prefix(prefixes: OrderedDict[tuple[int, ...], Prefix], entry: Prefix, size: int) -> None:
    """Stores ``entry`` as the most recently used; evicts the least recently used beyond ``size``."""
    if size <= 0:
        return
    prefixes[entry.tokens] = entry
    prefixes.move_to_end(entry.tokens)
    while len(prefixes) > size:
        prefixes.popitem(last=False)


class DecodeLoop:
    """The worker thread of `EmbeddedEngine`: admission, prefill, batched decode, quiescence.

    Args:
        engine: the engine whose model, prefix cache, stats and weight version the loop uses.
        max_batch_size: sequences decoded together at most (>= 1); 1 = one request at a time.
        batch_invariant: forward under `BatchInvariantMode` (see `t1_rollout.engine.invariant`).

    Raises:
        ValueError: ``max_batch_size < 1``. A model whose cache cannot be stacked (`check_batchable`) fails
            its requests with that error once a second sequence would join the batch.
    """

    def __init__(self, engine: EmbeddedEngine, max_batch_size: int, *, batch_invariant: bool = True) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size={max_batch_size} must be >= 1")
        # A weak reference: an engine dropped without close() is still collected (its model freed), and
        # its finalizer stops this thread; the loop holds it strongly only while it has work.
        self._engine = weakref.ref(engine)
        self.max_batch_size = max_batch_size
        self._kernels = BatchInvariantMode if batch_invariant else contextlib.nullcontext
        self.cond = threading.Condition()
        self.paused = False
        self._busy = False
        self._closing = False
        self._waiting: list[Request] = []
        self._active: list[Request] = []
        self._cache: Any = None
        self._width = 0  # columns of the batched full-attention cache
        self.peak_batch = 0  # most sequences one decode forward has served
        self._scratch: torch.Tensor | None = None  # float64 [vocab_limit]: every draw's CDF, reused
        self._thread = threading.Thread(target=self._serve, name="t1-embedded-engine", daemon=True)
        self._thread.start()

    @property
    def engine(self) -> EmbeddedEngine:
        """The engine served (alive while the loop has work: every caller of `generate` holds it)."""
        engine = self._engine()
        if engine is None:
            raise EngineStateError("the embedded engine was garbage-collected")
        return engine

    # ---- control (any thread)

    def submit(self, request: Request) -> Future[Generation]:
        """Queues ``request``; its future resolves to the `Generation` (or the error that stopped it)."""
        with self.cond:
            if self._closing:
                raise EngineStateError("the embedded engine is closed; build a new one")
            self._waiting.append(request)
            self.cond.notify_all()
        return request.future

    def pause(self) -> None:
        """Holds new admissions and blocks until every sequence in flight has finished."""
        with self.cond:
            self.paused = True
            while self._busy:
                self.cond.wait()

    def resume(self) -> None:
        """Lets held and new requests be admitted again."""
        with self.cond:
            self.paused = False
            self.cond.notify_all()

    def close(self) -> None:
        """Finishes the queued requests (unless paused: those fail), then stops the thread."""
        self.stop_soon()
        self._thread.join()

    def stop_soon(self) -> None:
        """As `close`, without waiting for the thread (the engine's finalizer calls it)."""
        with self.cond:
            self._closing = True
            self.cond.notify_all()

    # ---- the loop (worker thread)

    def _serve(self) -> None:
        while True:
            with self.cond:
                while not self._active and not self._closing and (self.paused or not self._waiting):
                    self.cond.wait()
                if not self._active and (not self._waiting or (self._closing and self.paused)):
                    for req in self._waiting:  # closing while paused: queued requests cannot run
                        if req.future.set_running_or_notify_cancel():
                            req.future.set_exception(EngineStateError("engine closed while paused"))
                    self._waiting.clear()
                    return
                admitted: list[Request] = []
                while (
                    not self.paused
                    and self._waiting
                    and len(self._active) + len(admitted) < self.max_batch_size
                ):
                    req = self._waiting.pop(0)
                    if not req.future.set_running_or_notify_cancel() or req.cancel.is_set():
                        if req.future.running():
                            req.future.set_exception(asyncio.CancelledError())
                        continue  # cancelled while waiting: no prefill at all
                    admitted.append(req)
                self._busy = bool(self._active or admitted)
            engine = self._engine()  # strong for this iteration only, dropped before the next wait
            if engine is None:
                self._fail(admitted + self._active, EngineStateError("the embedded engine was collected"))
                return
            busy_from = time.monotonic()
            with torch.inference_mode():
                for req in admitted:
                    self._admit(req)
                if self._active:
                    self._step()
            engine._stats["busy_s"] += time.monotonic() - busy_from
            del engine
            with self.cond:
                self._busy = bool(self._active)
                self.cond.notify_all()

    def _fail(self, requests: list[Request], error: BaseException) -> None:
        for req in requests:
            if not req.future.done():
                req.future.set_exception(error)

    def _admit(self, req: Request) -> None:
        """Prefills ``req`` alone, samples its first token, and joins it to the batch unless it is done."""
        eng = self.engine
        try:
            req.generator = torch.Generator().manual_seed(req.seed)
            prefix = take_prefix(eng._prefixes, req.input_ids)
            cache = prefix.cache if prefix is not None else None
            done = len(prefix.tokens) if prefix is not None else 0
            if prefix is not None:
                req.chunks.append(prefix.rows)
            req.cached_tokens = done
            req.budget = min(req.sampling.max_new_tokens, eng.max_positions - len(req.input_ids))
            step = torch.tensor([req.input_ids[done:]], device=eng.device)
            with capture_routing(eng.model) as recorder, self._kernels():
                out = eng.model(input_ids=step, cache=cache, use_cache=True, logits_to_keep=1)
            req.chunks.append(recorder.rows())
            req.length = len(req.input_ids)
            if self.max_batch_size > 1:
                check_batchable(out.cache)
            finish = self._sample(req, out.logits[0, -1])
        except Exception as exc:  # a failed prefill fails this request only
            self._fail([req], exc)
            return
        if finish is not None:
            self._finish(req, out.cache, finish)
            return
        if not self._active:
            self._cache, self._width = out.cache, req.length
        else:
            self._cache = _concat([(self._cache, self._width), (out.cache, req.length)], eng.model.config)
            self._width = max(self._width, req.length)
        self._active.append(req)

    def _sample(self, req: Request, logits_v: torch.Tensor) -> FinishReason | None:
        """Samples ``req``'s next token from its last logits; returns why it stops, None to go on."""
        if req.cancel.is_set():
            return "abort"
        assert req.generator is not None
        limit = self.engine.vocab_limit
        if self._scratch is None or self._scratch.shape[0] != limit:
            self._scratch = torch.empty(limit, dtype=torch.float64)
        token, logprob = sample_token(
            logits_v, req.sampling, req.generator, vocab_limit=limit, scratch=self._scratch
        )
        req.output_ids.append(token)
        req.logprobs.append(logprob)
        if token in req.sampling.stop_token_ids:
            return "stop"
        if len(req.output_ids) >= req.budget:
            return "length"
        return None

    def _step(self) -> None:
        """One forward of ``[B, 1]`` over the active sequences, then per-sequence sampling and stops."""
        eng, active = self.engine, self._active
        ids = torch.tensor([[req.output_ids[-1]] for req in active], device=eng.device)
        kwargs: dict[str, Any] = {}
        if len(active) > 1:  # a lone sequence decodes exactly as the one-at-a-time engine did
            mask = torch.zeros(len(active), self._width + 1, dtype=torch.long, device=eng.device)
            for row, req in enumerate(active):
                mask[row, self._width - req.length :] = 1
            kwargs["attention_mask"] = mask
            kwargs["position_ids"] = torch.tensor([[req.length] for req in active], device=eng.device)
        try:
            with capture_routing(eng.model) as recorder, self._kernels():  # a row ignores its batch
                out = eng.model(input_ids=ids, cache=self._cache, use_cache=True, logits_to_keep=1, **kwargs)
            rows = recorder.rows()
            self._width += 1
            self.engine._stats["decode_steps"] += 1
            self.peak_batch = max(self.peak_batch, len(active))
            finished: list[tuple[int, FinishReason]] = []
            for row, req in enumerate(active):
                req.chunks.append(rows[row : row + 1])
                req.length += 1
                reason = self._sample(req, out.logits[row, -1])
                if reason is not None:
                    finished.append((row, reason))
        except Exception as exc:  # the batch is lost: every sequence in it fails with the cause
            self._fail(active, exc)
            self._active, self._cache, self._width = [], None, 0
            return
        if finished:
            self._leave(finished)

    def _leave(self, finished: list[tuple[int, FinishReason]]) -> None:
        config = self.engine.model.config
        done_rows = {row for row, _ in finished}
        if len(self._active) == 1:
            self._finish(self._active[0], self._cache, finished[0][1])
            self._active, self._cache, self._width = [], None, 0
            return
        for row, reason in finished:
            req = self._active[row]
            kept = (
                None if reason == "abort" else _select(self._cache, [row], self._width - req.length, config)
            )
            self._finish(req, kept, reason)
        remaining = [row for row in range(len(self._active)) if row not in done_rows]
        if not remaining:
            self._active, self._cache, self._width = [], None, 0
            return
        width = max(self._active[row].length for row in remaining)
        self._cache = _select(self._cache, remaining, self._width - width, config)
        self._active = [self._active[row] for row in remaining]
        self._width = width

    def _finish(self, req: Request, cache: Any, finish: FinishReason) -> None:
        """Resolves ``req``'s future with its `Generation` and keeps its state for prefix reuse."""
        eng = self.engine
        if finish == "abort":
            self._fail([req], asyncio.CancelledError())
            return
        try:
            n_in, n_out = len(req.input_ids), len(req.output_ids)
            rows = req.chunks[0] if len(req.chunks) == 1 else np.concatenate(req.chunks, axis=0)
            forwarded = req.input_ids + req.output_ids[:-1]
            if rows.shape[0] != len(forwarded) or req.length != len(forwarded):
                raise RuntimeError(
                    f"captured {rows.shape[0]} routing rows for {len(forwarded)} forwarded tokens"
                )
            for key, value in (
                ("requests", 1),
                ("prompt_tokens", n_in),
                ("cached_tokens", req.cached_tokens),
                ("completion_tokens", n_out),
            ):
                eng._stats[key] += value
            keep_prefix(eng._prefixes, Prefix(tuple(forwarded), cache, rows), eng._prefix_cache_size)
            routed = rows[req.start_len : n_in + n_out - 1] if req.return_routed else None
            if routed is not None and n_in + n_out - 1 >= req.start_len:
                check_routing(  # the record leaves the engine under the same contract as SGLang's (T1 §4.2)
                    routed,
                    num_tokens=n_in + n_out,
                    start_len=req.start_len,
                    num_layers=eng.num_layers,
                    top_k=eng.top_k,
                    num_experts=eng.num_experts,
                )
            gen = Generation(
                output_ids=req.output_ids,
                output_logprobs=req.logprobs if req.return_logprob else [],
                routed_experts=np.ascontiguousarray(routed) if routed is not None else None,
                routed_experts_start_len=req.start_len,
                weight_version=eng.weight_version,
                finish_reason=finish,
                prompt_tokens=n_in,
                completion_tokens=n_out,
                latency_s=time.monotonic() - req.t0,
            )
        except Exception as exc:
            self._fail([req], exc)
            return
        req.future.set_result(gen)
