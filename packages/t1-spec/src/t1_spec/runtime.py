"""Where the training loop runs (one process or Ray actors) and whether rollout overlaps training (T1 §7).

``kind: embedded`` is the one-process loop (rollout, then training, then publication, on one machine).
``kind: ray`` places engine replicas, a trainer worker and sandbox hosts as Ray actors in one placement group
(the paper's orchestrator is Ray 2.55, T1 §7), on a local cluster the run starts itself or on one it joins.
``mode: async`` is the asynchronous loop of T1 Appendix 12: with ``max_staleness: 1`` (the paper's one-step
loop) the rollout of step t+1 runs on weight version t while step t trains, so every sample after the first
step is exactly one version stale; ``max_staleness: k`` lets rollout run up to k versions ahead.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import Field, field_validator

from t1_spec._base import Spec


class RaySpec(Spec):
    """The Ray cluster of a ``runtime.kind: ray`` run and how many actors of each role it places.

    Built: liveness probes of the engine replicas and sandbox hosts (the ``liveness`` section; a lost one is
    dropped and the run goes on with the rest), checkpoints with ``t1 train --resume``, and data-parallel
    trainer ranks (``trainer_workers`` > 1, torch backend, GAE). Not built: replacing a lost actor, probing
    the trainer ranks (the loss of one fails the step and the run) and NCCL weight publication.
    """

    address: str | None = Field(default=None, min_length=1)
    """Ray cluster to join (``ray.init(address=...)``, e.g. ``"auto"`` or ``"ray://head:10001"``; not empty);
    ``null`` starts a local cluster for the run and stops it on every exit path. A joined cluster is left
    running: the run kills only the actors it created."""

    num_cpus: int | None = Field(default=None, gt=0)
    """Logical CPUs of the local cluster (CPUs); ``null`` = exactly what the placement group asks for (one
    per actor). Logical, not cores: Ray schedules by them and does not pin. Fewer than one per actor is
    refused by the preflight (the placement group could never be reserved). Ignored with ``address``."""

    engine_replicas: int = Field(default=1, gt=0)
    """Embedded engine replicas, each one Ray actor holding a copy of the policy (replicas). The paper runs
    several SGLang replicas on the inference partition (1 -> 3 cut generation 58.9 -> 19.6 min, T1 §7);
    SGLang's own count is ``engine.replicas``."""

    sandbox_hosts: int = Field(default=1, gt=0)
    """Sandbox host actors, each running whole trials on its node under ``rollout.per_node_cap`` concurrent
    trials (hosts). The paper hosts sandboxes per node under a per-node cap (T1 §7.4)."""

    trainer_workers: int = Field(default=1, gt=0)
    """Trainer rank actors (ranks). N > 1 places N actors that form one ``torch.distributed`` group (gloo on
    CPU, NCCL on CUDA) and train each step data-parallel: each rank its token-balanced shard of the batch,
    gradients summed over the group (`t1_trainer.data_parallel`); rank 0 publishes and checkpoints. Every
    collective carries ``liveness.collective_timeout_s`` (T1 §7.3). Needs the torch backend and GAE, and at
    least N samples a step."""

    trainer_address: str | None = Field(default=None, min_length=1)
    """Rendezvous host of the trainer ranks' process group (rank 0 listens there; with ``trainer_workers``
    > 1 only): an IPv4 or IPv6 address or a DNS host name, without scheme or port (``trainer_port`` is the
    port); ``null`` = the IP address of rank 0's Ray node."""

    trainer_port: int = Field(default=0, ge=0, le=65535)
    """Rendezvous TCP port of the trainer ranks' process group (port; with ``trainer_workers`` > 1 only);
    0 = a port free on rank 0's node, picked when the group forms."""

    @field_validator("trainer_address")
    @classmethod
    def _host(cls, value: str | None) -> str | None:
        if value is None or _is_host(value):
            return value
        raise ValueError(
            f"{value!r} is not an IP address or a DNS host name (no scheme, port, path or spaces: the "
            "port is trainer_port)"
        )


_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def _is_host(value: str) -> bool:
    """Whether ``value`` is an IPv4 / IPv6 address or an RFC 1123 host name.

    Host name: labels of letters, digits and inner hyphens, 63 characters each, 253 in all; a trailing dot
    allowed.
    """
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        pass
    name = value[:-1] if value.endswith(".") else value
    return 0 < len(name) <= 253 and all(_LABEL.fullmatch(label) for label in name.split("."))


class RuntimeSpec(Spec):
    """Which loop runs the recipe, and whether rollout overlaps training (T1 §7, Appendix 12)."""

    kind: Literal["embedded", "ray"] = "embedded"
    """``embedded``: one process, no Ray (`t1.run.inprocess`); ``ray``: Ray actors for engine replicas, the
    trainer worker and sandbox hosts (`t1.run.ray.runtime`, needs the ``t1[ray]`` extra); one step driver
    (`t1.run.driver`) runs the steps on either."""

    mode: Literal["sync", "async"] = "sync"
    """``sync``: rollout, then training, then publication (staleness 0); ``async``: the one-step
    asynchronous loop, rollout of step t+1 on version t while step t trains (staleness 1 after the first
    step, T1 Appendix 12). The embedded runtime runs ``sync`` only (one process cannot overlap them)."""

    max_staleness: int = Field(default=1, ge=1)
    """With ``mode: async``: how many versions rollout may run ahead of training (versions). 1 is the paper's
    one-step loop (T1 Appendix 12); k > 1 keeps up to k rollout batches queued, so step t trains the batch
    drawn by version t - k (the first k steps at 0, 1, ..., k - 1) and the trainer refuses any sample
    older than k. The paper names larger staleness as future work (T1 Appendix 12); k > 1 is chosen and
    read by the Ray runtime only; a checkpoint holds the up to k batches in flight."""

    ray: RaySpec = Field(default_factory=RaySpec)
    """The Ray cluster and actor counts (read with ``kind: ray`` only)."""
