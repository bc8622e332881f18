"""Client of one SGLang server's native API: ``/generate`` ids in, ids out, with log-probs and routed experts.

Speaks the HTTP API of a server started with ``--enable-return-routed-experts`` (SGLang >= v0.5.7; the paper
ran v0.5.12.post1, T1 §6), through the standard library only (`t1_rollout.engine.sglang.http`, urllib on a
thread pool). Every answer is checked on arrival: the routing payload must hold ``prompt + output - 1 -
start_len`` rows of ``[L, k]`` (T1 §4.2), and its ``weight_version`` must be the version the client expects,
so no sample is attributed to weights that did not produce it (T1 Appendix 12). Weight updates go through a
`t1_rollout.engine.sglang.weights.WeightPublisher` and always end with ``/flush_cache``, so routing rows of a
cached prefix are never served from an older version.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal

from t1_r3 import RoutingMismatchError, check_routing, decode_routed_experts
from t1_rollout.engine.base import EngineError, FinishReason, Generation, SamplingParams
from t1_rollout.engine.sglang.http import call

if TYPE_CHECKING:
    import torch

    from t1_rollout.engine.sglang.weights import WeightPublisher

__all__ = ["SGLangEngine"]


class SGLangEngine:
    """`Engine` over one SGLang server (one replica). Implements `t1_rollout.engine.base.Engine`.

    Args:
        base_url: e.g. ``"http://10.0.0.5:30000"``.
        num_layers: L of the served model, its ``num_hidden_layers`` (to shape ``routed_experts``).
        top_k: k of the served model.
        num_experts: E of the served model; when given, expert ids are range-checked on ingest and the
            record is kept compact (`t1_r3.routing_dtype`: uint8 for E <= 256), else int32.
        moe_layers: the decoder layers that are MoE (`t1_r3.moe_layers` of the served model); SGLang's
            zero-filled dense columns are dropped on ingest. None = every layer is MoE.
        timeout_s: deadline of one ``/generate`` request, seconds.
        max_concurrency: requests in flight at once (threads of the client's pool).
        weight_version: the version the server serves now; every answer must carry it.
        pause_mode: SGLang ``/pause_generation`` mode; "abort" (default) ends in-flight requests with
            ``finish_reason="abort"`` so none spans two weight versions ("in_place" keeps the KV cache, so
            the flush after an update would fail, and is refused).
        probe_deadline_s: deadline of a control-plane call (probe, pause, flush), seconds (T1 §7: 120 s).
        transfer_timeout_s: deadline of a weight transfer request, seconds; bulk copies legitimately take
            minutes (T1 §7: collective deadlines of 30 to 120 min).
        publisher: how `update_weights` moves weights to the server; None = updates raise `EngineError`.
        tp: tensor-parallel ranks of the server (``--tp``); the server's ranks in a weight-update group.

    Raises:
        ValueError: ``pause_mode`` "in_place".
    """

    def __init__(
        self,
        base_url: str,
        *,
        num_layers: int,
        top_k: int,
        num_experts: int | None = None,
        moe_layers: Sequence[int] | None = None,
        timeout_s: float = 3600.0,
        max_concurrency: int = 256,
        weight_version: int = 0,
        pause_mode: Literal["abort", "retract"] = "abort",
        probe_deadline_s: float = 120.0,
        transfer_timeout_s: float = 7200.0,
        publisher: WeightPublisher | None = None,
        tp: int = 1,
    ) -> None:
        if pause_mode not in ("abort", "retract"):
            raise ValueError(
                f"pause_mode {pause_mode!r}: only 'abort' or 'retract' free the KV cache, which the flush "
                "after every weight update needs"
            )
        self.base_url = base_url.rstrip("/")
        self.num_layers, self.top_k, self.num_experts = num_layers, top_k, num_experts
        self.moe_layers = None if moe_layers is None else [int(i) for i in moe_layers]
        self.timeout_s = timeout_s
        self.weight_version = weight_version
        self.pause_mode = pause_mode
        self.probe_deadline_s = probe_deadline_s
        self.transfer_timeout_s = transfer_timeout_s
        self.publisher = publisher
        self.tp = tp
        self.paused = False
        self.in_flight = 0
        self.broken: str | None = None  # why the server's weights are unusable (a failed update)
        self._executor = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="t1-sglang")

    # ---- HTTP

    def post(self, path: str, payload: Mapping[str, Any], *, timeout_s: float | None = None) -> Any:
        """``POST`` a JSON body (deadline ``probe_deadline_s`` unless given); see `http.call`."""
        return call(self.base_url, path, payload, timeout_s=timeout_s or self.probe_deadline_s)

    def get(self, path: str, *, timeout_s: float | None = None) -> Any:
        """``GET`` an endpoint of the server (deadline ``probe_deadline_s`` unless given)."""
        return call(self.base_url, path, timeout_s=timeout_s or self.probe_deadline_s)

    def post_ok(self, path: str, payload: Mapping[str, Any], *, timeout_s: float | None = None) -> Any:
        """`post`, then require SGLang's ``{"success": true, ...}`` answer of the weight endpoints.

        Raises:
            EngineError: the call failed or the server answered ``success: false`` (its message quoted).
        """
        answer = self.post(path, payload, timeout_s=timeout_s)
        if not isinstance(answer, dict) or answer.get("success") is not True:
            message = answer.get("message") if isinstance(answer, dict) else answer
            raise EngineError(f"SGLang {self.base_url}{path} refused: {str(message)[:300]}")
        return answer

    # ---- requests

    @staticmethod
    def request_payload(
        input_ids: list[int],
        sampling: SamplingParams,
        *,
        return_logprob: bool,
        return_routed_experts: bool,
        routed_experts_start_len: int,
    ) -> dict[str, Any]:
        """The JSON body of ``POST /generate`` (SGLang ``GenerateReqInput``).

        SGLang's ``output_token_logprobs`` are ``log_softmax(logits / temperature)`` at the sampled id
        (temperature-scaled since SGLang's "original logprobs" change of mid-2025; before top-k, top-p and
        min-p, not renormalised over what they keep), so they are the sampling distribution's only when no
        cut is active. That is the one decoding a training recipe admits (``engine.sampling_truncated``,
        ``engine.sampling_greedy``); evaluation, which may truncate, does not use the log-probs.
        """
        params: dict[str, Any] = {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k if sampling.top_k > 0 else -1,  # SGLang: -1 = off
            "max_new_tokens": sampling.max_new_tokens,
            "stop_token_ids": list(sampling.stop_token_ids),
        }
        if sampling.min_p > 0:
            params["min_p"] = sampling.min_p
        if sampling.seed is not None:
            params["sampling_seed"] = sampling.seed
        payload: dict[str, Any] = {
            "input_ids": list(input_ids),
            "sampling_params": params,
            "return_logprob": return_logprob,
        }
        if return_routed_experts:
            payload["return_routed_experts"] = True
            payload["routed_experts_start_len"] = routed_experts_start_len
        return payload

    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        *,
        return_logprob: bool = True,
        return_routed_experts: bool = True,
        routed_experts_start_len: int = 0,
    ) -> Generation:
        """``POST /generate`` and parse the answer; see `Engine.generate`.

        Raises:
            ValueError: ``routed_experts_start_len`` outside ``[0, len(input_ids)]``.
            EngineError: HTTP failure, a malformed answer, an answer of another weight version than the one
                expected when the request was sent, or a server whose last weight update failed (an
                infrastructure failure, not the agent's).
            t1_r3.RoutingMismatchError: routing requested but absent (server lacks
                ``--enable-return-routed-experts``) or not ``prompt + output - 1 - start_len`` rows.
        """
        if not 0 <= routed_experts_start_len <= len(input_ids):
            raise ValueError(
                f"routed_experts_start_len={routed_experts_start_len} must lie in "
                f"[0, {len(input_ids)}] (the prompt)"
            )
        if self.broken is not None:
            raise EngineError(f"SGLang {self.base_url} serves no usable weights: {self.broken}")
        t0 = time.monotonic()
        expected = self.weight_version
        payload = self.request_payload(
            input_ids,
            sampling,
            return_logprob=return_logprob,
            return_routed_experts=return_routed_experts,
            routed_experts_start_len=routed_experts_start_len,
        )
        self.in_flight += 1
        try:
            answer = await asyncio.get_running_loop().run_in_executor(
                self._executor, functools.partial(self.post, "/generate", payload, timeout_s=self.timeout_s)
            )
        finally:
            self.in_flight -= 1
        return self.parse_answer(
            answer,
            prompt_tokens=len(input_ids),
            return_logprob=return_logprob,
            return_routed_experts=return_routed_experts,
            start_len=routed_experts_start_len,
            latency_s=time.monotonic() - t0,
            expected_version=expected,
        )

    def parse_answer(
        self,
        answer: Any,
        *,
        prompt_tokens: int,
        return_logprob: bool,
        return_routed_experts: bool,
        start_len: int,
        latency_s: float,
        expected_version: int | None = None,
    ) -> Generation:
        """Turns SGLang's ``/generate`` JSON into a `Generation` (raises like `generate`).

        Args:
            answer: the decoded JSON (``{"output_ids", "meta_info": {...}}``).
            prompt_tokens: ``len(input_ids)`` of the request.
            return_logprob: log-probs were requested (``meta_info.output_token_logprobs`` must cover every
                output id).
            return_routed_experts: routing was requested (``meta_info.routed_experts`` must be present).
            start_len: the request's ``routed_experts_start_len``.
            latency_s: wall time of the request, seconds.
            expected_version: the weight version the answer must carry; None = the client's current one.
        """
        if not isinstance(answer, dict) or not isinstance(answer.get("meta_info"), dict):
            raise EngineError(f"SGLang answer has no meta_info: {str(answer)[:200]}")
        meta = answer["meta_info"]
        version = self._version(
            meta.get("weight_version"), self.weight_version if expected_version is None else expected_version
        )
        token_logprobs = meta.get("output_token_logprobs")
        if answer.get("output_ids") is not None:
            output_ids = [int(i) for i in answer["output_ids"]]
        elif token_logprobs is not None:
            output_ids = [int(entry[1]) for entry in token_logprobs]
        else:
            raise EngineError("SGLang answer has neither output_ids nor meta_info.output_token_logprobs")
        logprobs: list[float] = []
        if return_logprob:
            if token_logprobs is None or len(token_logprobs) != len(output_ids):
                raise EngineError(
                    f"SGLang returned {0 if token_logprobs is None else len(token_logprobs)} output "
                    f"log-probs for {len(output_ids)} output ids"
                )
            logprobs = [float(entry[0]) for entry in token_logprobs]
        routed = None
        if return_routed_experts:
            payload = meta.get("routed_experts")
            if payload is None:
                raise RoutingMismatchError(
                    "SGLang answer carries no meta_info.routed_experts; start the server with "
                    "--enable-return-routed-experts"
                )
            routed = decode_routed_experts(  # compact (uint8 for E <= 256) when E is known
                payload,
                num_layers=self.num_layers,
                top_k=self.top_k,
                num_experts=self.num_experts,
                moe_layers=self.moe_layers,
            )
            check_routing(  # rows == prompt + output - 1 - start_len, checked on arrival (T1 §4.2)
                routed,
                num_tokens=prompt_tokens + len(output_ids),
                num_layers=self.num_layers if self.moe_layers is None else len(self.moe_layers),
                top_k=self.top_k,
                num_experts=self.num_experts,  # None: unknown, ids only checked to be non-negative
                start_len=int(meta.get("routed_experts_start_len", start_len)),
            )
        return Generation(
            output_ids=output_ids,
            output_logprobs=logprobs,
            routed_experts=routed,
            routed_experts_start_len=start_len,
            weight_version=version,
            finish_reason=self._finish(meta.get("finish_reason")),
            prompt_tokens=int(meta.get("prompt_tokens", prompt_tokens)),
            completion_tokens=int(meta.get("completion_tokens", len(output_ids))),
            latency_s=latency_s,
        )

    def _version(self, raw: Any, expected: int) -> int:
        if raw is None:
            raise EngineError(
                f"SGLang {self.base_url} answer carries no meta_info.weight_version (expected {expected}); "
                "T1 needs a server that reports its weight version (SGLang >= v0.5.7)"
            )
        if str(raw) != str(expected):
            raise EngineError(
                f"SGLang {self.base_url} answered with weight_version {raw!r} but T1 expects version "
                f"{expected}: the server's weights are not the ones the trainer published"
            )
        return expected

    @staticmethod
    def _finish(raw: Any) -> FinishReason:
        kind = raw.get("type") if isinstance(raw, dict) else raw
        if kind in ("stop", "length", "abort"):
            return kind
        raise EngineError(f"SGLang finish_reason {raw!r} is not stop, length or abort")

    # ---- control plane

    def probe(self) -> None:
        """Liveness probe: ``GET /health`` within ``probe_deadline_s`` (T1 §7: 120 s).

        Raises:
            EngineError: no answer within the deadline, or a non-2xx status.
        """
        self.get("/health")

    def declare_version(self, weight_version: int) -> None:
        """Labels the weights the server holds now as ``weight_version`` (``/update_weight_version``).

        Used when T1 joins a running server: its answers then carry T1's version from the first request.
        """
        self.post("/update_weight_version", {"new_version": str(weight_version), "abort_all_requests": False})
        self.weight_version = weight_version

    def pause(self) -> None:
        """``POST /pause_generation`` with ``pause_mode``; in-flight requests end (abort) or are held."""
        self.post("/pause_generation", {"mode": self.pause_mode})
        self.paused = True

    def resume(self) -> None:
        """``POST /continue_generation``."""
        self.post("/continue_generation", {})
        self.paused = False

    def flush_cache(self) -> None:
        """``POST /flush_cache``: drops the radix (prefix) cache and the routing rows recorded with it.

        Raises:
            EngineError: the server refused (it does while requests are still running).
        """
        self.post("/flush_cache", {}, timeout_s=self.probe_deadline_s)

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], *, weight_version: int) -> None:
        """Publishes ``state_dict`` as ``weight_version``, then flushes the prefix cache; only while paused.

        The transfer is the ``publisher``'s (distributed, tensor or disk). After it the cache is flushed, so
        no prefix computed by the old weights (and no routing row recorded with it) is served again. A
        failure leaves the server unusable (`generate` raises) until an update succeeds.

        Args:
            state_dict: HF parameter names -> tensors (the actor's ``export_weights``).
            weight_version: the version the server serves afterwards (every answer must carry it).

        Raises:
            EngineStateError: generation is not paused.
            EngineError: no publisher, or the transfer or the flush failed.
        """
        from t1_rollout.engine.sglang.weights import apply_update

        apply_update([self], self.publisher, state_dict, weight_version=weight_version)

    def close(self) -> None:
        """Stops the client's thread pool (a launched server is stopped by its `ServerProcess`)."""
        self._executor.shutdown(wait=False)
