"""Inference engines serving the behaviour policy (T1 §4, §7)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from t1_spec._base import Spec, Violation, raise_if


class SamplingSpec(Spec):
    """Decoding parameters of training rollouts.

    PPO's importance ratio assumes tokens are sampled from the policy itself, so training samples at
    temperature 1 with top-p and top-k off (chosen; the paper gives evaluation decoding only, T1 §6).
    """

    temperature: float = Field(default=1.0, gt=0)
    """Softmax temperature (dimensionless); 1.0 samples the policy's own distribution."""

    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling: keep the smallest set of tokens holding this probability mass (fraction); 1.0 = off.
    """

    top_k: int = Field(default=0, ge=0)
    """Keep only the k most likely tokens (tokens); 0 = off."""


class EmbeddedEngineSpec(Spec):
    """In-process torch engine on the trainer's own device (one machine, no GPU needed)."""

    kind: Literal["embedded"] = "embedded"
    """Discriminator: in-process engine; answers in SGLang's shapes (ids, log-probs, routed experts)."""

    device: str = Field(default="cpu", pattern=r"^(cpu|cuda(:[0-9]+)?)$")
    """torch device string: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``."""

    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    """Decoding parameters of training rollouts."""


class SGLangEngineSpec(Spec):
    """SGLang servers on the inference partition (SGLang v0.5.12.post1 in the paper, T1 §6).

    Not runnable yet: ``t1_rollout`` has an HTTP client for ``/generate``, but launching servers and
    publishing new weights to them (``update_weights``) are not built, and ``t1 train`` refuses
    ``kind: sglang``; use ``kind: embedded``.
    """

    kind: Literal["sglang"] = "sglang"
    """Discriminator: SGLang over HTTP (native ``/generate`` with ``return_logprob`` and
    ``return_routed_experts``)."""

    urls: list[str] = Field(default_factory=list)
    """Base URLs of already running servers, one per replica; empty = T1 launches ``replicas`` servers on the
    plan's inference devices."""

    replicas: int = Field(default=1, gt=0)
    """Inference replicas (replicas); throughput adds roughly linearly (4.35 groups/min per replica, T1 §7).
    """

    tp: int = Field(default=1, gt=0)
    """Tensor-parallel size of one replica (devices per replica)."""

    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    """Decoding parameters of training rollouts."""

    @model_validator(mode="after")
    def _check(self) -> SGLangEngineSpec:
        v: list[Violation] = []
        if self.urls and len(self.urls) != self.replicas:
            v.append(
                Violation(
                    "engine.urls_match_replicas",
                    "replicas",
                    f"{len(self.urls)} urls given but replicas is {self.replicas}: list one url per "
                    "replica or set replicas to the number of urls",
                )
            )
        raise_if(v)
        return self


EngineSpec = Annotated[EmbeddedEngineSpec | SGLangEngineSpec, Field(discriminator="kind")]
"""The engine section, selected by ``kind: embedded | sglang``; only ``embedded`` trains today."""
