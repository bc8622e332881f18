"""Client of SGLang's native ``/generate`` (token in, token out, with log-probs and routed experts).

Speaks the HTTP API of an already running server started with ``--enable-return-routed-experts`` (SGLang
>= v0.5.7; the paper ran v0.5.12.post1, T1 §6). Only the standard library is used (urllib on a thread pool),
so the client adds no dependency. Weight publication to SGLang is not built yet (see `update_weights`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import torch

from t1_r3 import RoutingMismatchError, check_routing, decode_routed_experts
from t1_rollout.engine.base import EngineError, FinishReason, Generation, SamplingParams

__all__ = ["SGLangEngine"]


class SGLangEngine:
    """`Engine` over one SGLang server's native API.

    Args:
        base_url: e.g. ``"http://10.0.0.5:30000"``.
        num_layers: L of the served model, its ``num_hidden_layers`` (to shape ``routed_experts``).
        top_k: k of the served model.
        num_experts: E of the served model; when given, expert ids are range-checked on ingest and the
            record is kept compact (`t1_r3.routing_dtype`: uint8 for E <= 256), else int32.
        moe_layers: the decoder layers that are MoE (`t1_r3.moe_layers` of the served model); SGLang's
            zero-filled dense columns are dropped on ingest. None = every layer is MoE.
        timeout_s: per-request HTTP timeout, seconds.
        max_concurrency: requests in flight at once (threads of the client's pool).
        weight_version: version assumed when the server reports none (``"default"``).
        pause_mode: SGLang ``/pause_generation`` mode; "abort" (default) ends in-flight requests with
            ``finish_reason="abort"`` so none spans two weight versions.
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
        pause_mode: Literal["abort", "retract", "in_place"] = "abort",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.num_layers, self.top_k, self.num_experts = num_layers, top_k, num_experts
        self.moe_layers = None if moe_layers is None else [int(i) for i in moe_layers]
        self.timeout_s = timeout_s
        self.weight_version = weight_version
        self.pause_mode = pause_mode
        self._executor = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="t1-sglang")

    def _post(self, path: str, payload: Mapping[str, Any]) -> Any:
        url = self.base_url + path
        request = urllib.request.Request(
            url,
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode(errors="replace")
            raise EngineError(f"SGLang {url} answered HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise EngineError(f"SGLang {url} unreachable: {exc}") from exc
        if not body:
            return None
        try:
            return json.loads(body)
        except json.JSONDecodeError as exc:
            raise EngineError(f"SGLang {url} answered non-JSON: {body[:200]!r}") from exc

    @staticmethod
    def request_payload(
        input_ids: list[int],
        sampling: SamplingParams,
        *,
        return_logprob: bool,
        return_routed_experts: bool,
        routed_experts_start_len: int,
    ) -> dict[str, Any]:
        """The JSON body of ``POST /generate`` (SGLang ``GenerateReqInput``)."""
        params: dict[str, Any] = {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k if sampling.top_k > 0 else -1,  # SGLang: -1 = off
            "max_new_tokens": sampling.max_new_tokens,
            "stop_token_ids": list(sampling.stop_token_ids),
        }
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
            EngineError: HTTP failure or a malformed answer (an infrastructure failure, not the agent's).
            t1_r3.RoutingMismatchError: routing requested but absent (server lacks
                ``--enable-return-routed-experts``) or not ``prompt + output - 1 - start_len`` rows.
        """
        if not 0 <= routed_experts_start_len <= len(input_ids):
            raise ValueError(
                f"routed_experts_start_len={routed_experts_start_len} must lie in "
                f"[0, {len(input_ids)}] (the prompt)"
            )
        t0 = time.monotonic()
        payload = self.request_payload(
            input_ids,
            sampling,
            return_logprob=return_logprob,
            return_routed_experts=return_routed_experts,
            routed_experts_start_len=routed_experts_start_len,
        )
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(
            self._executor, functools.partial(self._post, "/generate", payload)
        )
        return self.parse_answer(
            answer,
            prompt_tokens=len(input_ids),
            return_logprob=return_logprob,
            return_routed_experts=return_routed_experts,
            start_len=routed_experts_start_len,
            latency_s=time.monotonic() - t0,
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
    ) -> Generation:
        """Turns SGLang's ``/generate`` JSON into a `Generation` (raises like `generate`)."""
        if not isinstance(answer, dict) or not isinstance(answer.get("meta_info"), dict):
            raise EngineError(f"SGLang answer has no meta_info: {str(answer)[:200]}")
        meta = answer["meta_info"]
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
                    "log-probs "
                    f"for {len(output_ids)} output ids"
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
            check_routing(
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
            weight_version=self._version(meta.get("weight_version")),
            finish_reason=self._finish(meta.get("finish_reason")),
            prompt_tokens=int(meta.get("prompt_tokens", prompt_tokens)),
            completion_tokens=int(meta.get("completion_tokens", len(output_ids))),
            latency_s=latency_s,
        )

    def _version(self, raw: Any) -> int:
        if raw is None or raw == "default":
            return self.weight_version
        try:
            return int(raw)
        except (TypeError, ValueError) as exc:
            raise EngineError(f"SGLang weight_version {raw!r} is not an integer version") from exc

    @staticmethod
    def _finish(raw: Any) -> FinishReason:
        kind = raw.get("type") if isinstance(raw, dict) else raw
        if kind in ("stop", "length", "abort"):
            return kind
        raise EngineError(f"SGLang finish_reason {raw!r} is not stop, length or abort")

    def pause(self) -> None:
        """``POST /pause_generation`` with ``pause_mode``."""
        self._post("/pause_generation", {"mode": self.pause_mode})

    def resume(self) -> None:
        """``POST /continue_generation``."""
        self._post("/continue_generation", {})

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], *, weight_version: int) -> None:
        """Not built yet.

        Raises:
            NotImplementedError: always. Publishing to SGLang needs ``/update_weights_from_distributed``
                (NCCL group) or ``/update_weights_from_tensor``; neither path is built.
        """
        raise NotImplementedError(
            "not built yet: SGLangEngine.update_weights (publish weights via /init_weights_update_group + "
            "/update_weights_from_distributed, or /update_weights_from_tensor, with weight_version)"
        )

    def close(self) -> None:
        """Stops the client's thread pool."""
        self._executor.shutdown(wait=False)
