"""The `Engine` seam: SGLang's native ``/generate`` shapes, shared by the embedded and the SGLang engine.

A generation returns the sampled ids, their log-probs, the routed experts of every position that went
through a forward (the prompt and every sampled token except the last; T1 §4.2, SGLang ``routed_experts``)
and the weight version that produced them (T1 Appendix 12: no request spans two versions).

`ENGINES` maps the recipe's ``engine.kind`` to the engine a training run builds (``from_spec``) and checks
(``preflight``): the embedded engine and the SGLang replicas (`t1_rollout.engine.sglang.SGLangReplicas`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from t1_spec import Registry

if TYPE_CHECKING:
    import numpy as np
    import torch

    from t1_spec import SamplingSpec

__all__ = [
    "ENGINES",
    "Engine",
    "EngineError",
    "EngineStateError",
    "FinishReason",
    "Generation",
    "SamplingParams",
]

ENGINES = Registry(
    "engine.kind",
    {
        "embedded": "t1_rollout.engine.embedded:EmbeddedEngine",
        "sglang": "t1_rollout.engine.sglang:SGLangReplicas",
    },
    checks={"embedded": "t1_rollout.engine.checks:embedded_preflight"},
)
"""``engine.kind`` -> the engine class (``from_spec(spec, *, model, seed, recipe)``, ``preflight``); the
embedded engine's preflight also as a light check that imports no torch (`t1_rollout.engine.checks`)."""

FinishReason = Literal["stop", "length", "abort"]


class EngineError(RuntimeError):
    """The engine failed to answer (server unreachable, HTTP error, malformed response).

    An infrastructure failure: the trial is recorded with this cause, never scored as the agent's 0.
    """


class EngineStateError(RuntimeError):
    """A call in the wrong engine state, e.g. `update_weights` while generation is not paused."""


@dataclass(frozen=True)
class SamplingParams:
    """Decoding parameters of one request (SGLang ``sampling_params``).

    Attributes:
        temperature: softmax temperature; 0 = greedy.
        top_p: nucleus mass; 1.0 = off.
        top_k: keep the k most likely ids; 0 = off.
        min_p: keep ids with probability >= min_p x the most likely one's; 0.0 = off.
        max_new_tokens: generation budget, tokens (>= 1).
        stop_token_ids: ids that end generation (kept as the last output id), e.g. Qwen ``<|im_end|>`` 248046
            and ``<|endoftext|>`` 248044.
        seed: per-request sampling seed (reproducible output for equal weights and input); None = drawn from
            the engine.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    max_new_tokens: int = 128
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature} must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p} must be in (0, 1]")
        if self.top_k < 0:
            raise ValueError(f"top_k={self.top_k} must be >= 0 (0 = off)")
        if not 0 <= self.min_p < 1:
            raise ValueError(f"min_p={self.min_p} must be in [0, 1) (0 = off)")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens} must be >= 1")

    @classmethod
    def from_spec(cls, sampling: SamplingSpec, *, max_new_tokens: int, seed: int | None) -> SamplingParams:
        """A request's decoding parameters from the recipe's ``engine.sampling`` section.

        Args:
            sampling: temperature, top-p, top-k and min-p of training rollouts.
            max_new_tokens: the per-turn budget, tokens (``rollout.max_new_tokens``).
            seed: the request's sampling seed; None = drawn from the engine.

        Returns:
            The `SamplingParams`, without stop ids (the harness adds the tokenizer's).
        """
        return cls(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            min_p=sampling.min_p,
            max_new_tokens=max_new_tokens,
            seed=seed,
        )


@dataclass(frozen=True)
class Generation:
    """One answer of `Engine.generate`, in SGLang's shapes.

    Attributes:
        output_ids: sampled ids, ``[completion_tokens]`` (a stop id, when hit, is the last one).
        output_logprobs: log-prob of each sampled id, ``[completion_tokens]``; empty when not requested.
            The embedded engine reports it under the distribution it drew from (temperature, top-k, top-p,
            min-p, renormalised: `t1_rollout.engine.sampling.sampling_logprobs`); SGLang reports
            ``log_softmax(logits / temperature)``, untruncated. The two agree when no cut is active, the
            only decoding a training recipe admits.
        routed_experts: int32 ``[rows, L, k]`` with
            ``rows = len(input_ids) + len(output_ids) - 1 - start_len``; None when not requested.
        routed_experts_start_len: first row covered (SGLang ``routed_experts_start_len``).
        weight_version: version of the weights that produced every token of this answer.
        finish_reason: "stop" (a stop id), "length" (budget) or "abort" (cancelled).
        prompt_tokens: ``len(input_ids)``.
        completion_tokens: ``len(output_ids)``.
        latency_s: wall time from the call to the answer, seconds (queueing included, like SGLang's
            ``e2e_latency``).
    """

    output_ids: list[int]
    output_logprobs: list[float]
    routed_experts: np.ndarray | None
    routed_experts_start_len: int
    weight_version: int
    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    latency_s: float


@runtime_checkable
class Engine(Protocol):
    """An inference engine serving the behaviour policy (DESIGN.md "Interfaces")."""

    weight_version: int

    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        *,
        return_logprob: bool = True,
        return_routed_experts: bool = True,
        routed_experts_start_len: int = 0,
    ) -> Generation:
        """Samples a continuation of ``input_ids`` (token in, token out; no text)."""
        ...

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], *, weight_version: int) -> None:
        """Loads new weights; only while paused (raises `EngineStateError` otherwise)."""
        ...

    def pause(self) -> None:
        """Quiesces generation: waits for in-flight requests, holds new ones until `resume`."""
        ...

    def resume(self) -> None:
        """Lets held and new requests run again."""
        ...
