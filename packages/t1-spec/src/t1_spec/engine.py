"""Inference engines serving the behaviour policy (T1 §4, §7)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from t1_spec._base import Spec, Violation, raise_if


class SamplingSpec(Spec):
    """Decoding parameters of training rollouts.

    PPO's importance ratio divides the trainer's probability of each sampled token by the behaviour
    policy's, and the trainer scores ``log_softmax(logits / temperature)`` over the whole vocabulary. So a
    training recipe samples that very distribution: temperature > 0 and no truncation (top-k, top-p and
    min-p off). Greedy decoding (``engine.sampling_greedy``) and truncated decoding
    (``engine.sampling_truncated``) are refused; evaluation keeps its own decoding
    (``evaluation.temperature``, ``top_p``, ``top_k``), which may truncate (T1 §6).
    """

    temperature: float = Field(default=1.0, ge=0)
    """Softmax temperature (dimensionless); 1.0 samples the policy's own distribution; 0 (greedy) is refused
    for training."""

    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling: keep the smallest set of tokens holding this probability mass (fraction); 1.0 = off,
    the only value training admits."""

    top_k: int = Field(default=0, ge=0)
    """Keep only the k most likely tokens (tokens); 0 = off, the only value training admits."""

    min_p: float = Field(default=0.0, ge=0, lt=1)
    """Keep tokens whose probability is at least this fraction of the most likely token's (fraction);
    0.0 = off, the only value training admits."""

    @model_validator(mode="after")
    def _check(self) -> SamplingSpec:
        raise_if(sampling_violations(self))
        return self


def sampling_violations(s: SamplingSpec) -> list[Violation]:
    """Rules of ``SamplingSpec`` (field paths relative to the sampling section).

    Greedy decoding in any statically visible form (temperature 0, ``top_k: 1``) gets one rule and one
    message; a ``top_p`` so small that it is greedy in practice depends on the logits and is caught as
    truncation.
    """
    v: list[Violation] = []
    greedy = "temperature" if s.temperature == 0 else "top_k" if s.top_k == 1 else None
    if greedy is not None:
        v.append(
            Violation(
                "engine.sampling_greedy",
                greedy,
                "greedy decoding (temperature: 0 or top_k: 1) makes every sampled token the argmax, so "
                "the behaviour policy is a point mass that the trainer's softmax never matches and PPO's "
                "ratio is meaningless; train with temperature > 0 and top_k: 0 (evaluation.temperature "
                "and evaluation.top_k may decode greedily for greedy evaluation)",
            )
        )
        return v
    cuts = [f for f, on in (("top_k", s.top_k > 1), ("top_p", s.top_p < 1), ("min_p", s.min_p > 0)) if on]
    if cuts:
        v.append(
            Violation(
                "engine.sampling_truncated",
                cuts[0],
                f"{', '.join(f'{f} = {getattr(s, f)}' for f in cuts)} truncates the sampling "
                "distribution, but the trainer scores tokens under the untruncated one, so PPO's ratio "
                "would compare against a policy that never sampled (a trainer-side truncation is not "
                "built); set top_k: 0, top_p: 1.0, min_p: 0.0 (evaluation.top_p / top_k may truncate)",
            )
        )
    return v


class EmbeddedEngineSpec(Spec):
    """In-process torch engine on the trainer's own device (one machine, no GPU needed)."""

    kind: Literal["embedded"] = "embedded"
    """Discriminator: in-process engine; answers in SGLang's shapes (ids, log-probs, routed experts)."""

    device: str = Field(default="cpu", pattern=r"^(cpu|cuda(:[0-9]+)?)$")
    """torch device string: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``."""

    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    """Decoding parameters of training rollouts."""

    max_batch_size: int = Field(default=1, ge=1)
    """Requests decoded together at most, sequences (continuous batching: one forward over the active
    sequences per step, new requests join between steps, as SGLang's scheduler does, T1 §6). Default 1: one
    request at a time. The engine's forwards are batch-invariant (one torch thread), so a larger value
    returns the same ids, routing and log-probs, bit for bit, for the same seeds; ``recipes/tiny-cpu.yaml``
    decodes every trial in flight together."""


class SGLangEngineSpec(Spec):
    """SGLang servers on the inference partition (SGLang v0.5.12.post1 in the paper, T1 §6).

    T1 either joins running servers (``urls``, one per replica; needs only HTTP) or launches one
    ``python -m sglang.launch_server`` per replica with ``--enable-return-routed-experts`` and ``--tp`` on the
    inference partition (needs the ``sglang`` package and CUDA devices here). Requests use the native
    ``/generate`` with ``input_ids``, ``return_logprob`` and ``return_routed_experts``; new weights reach the
    servers by ``weight_sync`` with generation paused, and the prefix cache is flushed after every update so
    no routing row of an older version is served again (T1 §4.2, §7).
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
    """Tensor-parallel size of one replica (devices per replica), SGLang's ``--tp``."""

    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    """Decoding parameters of training rollouts."""

    weight_sync: Literal["distributed", "tensor", "disk"] = "distributed"
    """How new weights reach the servers: ``distributed`` broadcasts them from the trainer over a
    ``torch.distributed`` group that the replicas join (``/init_weights_update_group``, then
    ``/update_weights_from_distributed`` per bucket; NCCL); ``tensor`` hands co-located servers the tensors
    (``/update_weights_from_tensor``); ``disk`` writes HF safetensors to ``weights_dir`` and the servers load
    them (``/update_weights_from_disk``). Default ``distributed`` (chosen; the paper does not name the
    transport)."""

    bucket_mib: float = Field(default=512.0, gt=0)
    """Bucket size of ``distributed`` and ``tensor`` updates (MiB): tensors are sent in groups of at most
    this many bytes (a single larger tensor forms its own bucket). 512 MiB, chosen."""

    weights_dir: str | None = None
    """Directory, readable by every server, where T1 writes the weights it launches the servers on and the
    versions that ``disk`` updates publish (HF safetensors, one sub-directory per version); None = a fresh
    temporary directory on this machine."""

    host: str = "127.0.0.1"
    """Address the launched servers listen on (``--host``); unused with ``urls``."""

    base_port: int = Field(default=30000, gt=0, lt=65536)
    """Port of the first launched server (``--port``); replica i listens on ``base_port + i``. 30000 is
    SGLang's default port."""

    server_args: list[str] = Field(default_factory=list)
    """Further ``sglang.launch_server`` arguments passed through verbatim to every launched server, e.g.
    ``["--mem-fraction-static", "0.8"]``; unused with ``urls``."""

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
"""The engine section, selected by ``kind: embedded | sglang``."""
