"""A trainer rank group: join a `torch.distributed` process group, shard a batch by tokens, leave cleanly.

This is the library piece a multi-rank trainer is built from (`t1_trainer.data_parallel` trains over it).
A rank joins from explicit arguments (rank, world size, rendezvous address and port, deadline), so the same
code serves a Ray actor, a ``torchrun`` worker or a test's subprocess. The collective backend is gloo on CPU
and NCCL on CUDA. Every collective carries the group's deadline: T1 §7.3 calibrates the deadline of a
(re-)created collective group to the 30-120 min regime of hour-scale steps (``liveness.collective_timeout_s``
of the recipe, 7200 s by default), not to interactive latencies; a rank that dies makes the others' next
collective fail by that deadline at the latest (sooner when the transport sees the peer's socket close),
and `RankGroup.collective` turns the failure into a `CollectiveError` that names the rank, the group, the
operation and the deadline.

Built here: the group, the token-balanced shard (`shard_by_tokens`) and the typed failure. The Ray run places
the ranks as actors, joins them here and publishes from rank 0 (`t1.run.ray.trainer_group`,
``runtime.ray.trainer_workers`` > 1).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Literal

import torch
import torch.distributed as dist

__all__ = ["CollectiveError", "RankGroup", "shard_by_tokens"]


class CollectiveError(RuntimeError):
    """A collective of the rank group failed: a peer rank died, or missed the group's deadline (T1 §7.3)."""


def shard_by_tokens(token_counts: Sequence[int], world_size: int) -> list[list[int]]:
    """Splits a batch across ranks so that each rank's token count is balanced (deterministic, pure).

    Longest first onto the least-loaded rank (ties: the lower sample index first, the lower rank first), the
    usual greedy bound of 4/3 of the optimum's largest load. Each rank's indices come back in batch order, so
    a one-rank shard is the batch itself.

    Args:
        token_counts: tokens per sample, ``>= 0`` (``len(sample.token_ids)``: a forward's cost grows with it).
        world_size: ranks in the group, ``>= 1``.

    Returns:
        ``world_size`` lists of sample indices into ``token_counts``; together a partition of
        ``range(len(token_counts))``. A rank gets no sample when the batch has fewer samples than ranks.

    Raises:
        ValueError: ``world_size < 1`` or a negative token count (naming the first).
    """
    if world_size < 1:
        raise ValueError(f"shard_by_tokens: world_size {world_size} must be >= 1")
    bad = [i for i, n in enumerate(token_counts) if n < 0]
    if bad:
        raise ValueError(
            f"shard_by_tokens: sample {bad[0]} has a negative token count {token_counts[bad[0]]}"
        )
    order = sorted(range(len(token_counts)), key=lambda i: (-int(token_counts[i]), i))
    loads = [(0, 0, r) for r in range(world_size)]  # (tokens, samples, rank): fewest tokens, then samples
    shards: list[list[int]] = [[] for _ in range(world_size)]
    for i in order:
        tokens, count, rank = heapq.heappop(loads)
        shards[rank].append(i)
        heapq.heappush(loads, (tokens + int(token_counts[i]), count + 1, rank))
    return [sorted(s) for s in shards]


class RankGroup:
    """This process's membership of a trainer rank group (the default `torch.distributed` process group).

    Use `join` (or the class as a context manager, which leaves on exit); `leave` destroys the group.

    Args:
        rank: this process's rank, ``0 <= rank < world_size``.
        world_size: ranks in the group.
        address: rendezvous host (rank 0 listens there), e.g. ``127.0.0.1``.
        port: rendezvous TCP port.
        timeout_s: deadline of the rendezvous and of every collective (seconds): the recipe's
            ``liveness.collective_timeout_s`` (T1 §7.3).
        backend: ``gloo`` (CPU tensors) or ``nccl`` (CUDA); None picks NCCL when CUDA is available, else gloo.

    Raises:
        ValueError: a rank outside ``[0, world_size)``, a world size < 1, a port outside 1-65535 or a
            deadline <= 0.
    """

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        address: str,
        port: int,
        timeout_s: float,
        backend: Literal["gloo", "nccl"] | None = None,
    ) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(
                f"RankGroup: rank {rank} of world_size {world_size}: need 0 <= rank < world_size"
            )
        if not 0 < port < 65536:
            raise ValueError(f"RankGroup: port {port} is not a TCP port (1-65535)")
        if not timeout_s > 0:
            raise ValueError(f"RankGroup: timeout_s {timeout_s} must be > 0 (liveness.collective_timeout_s)")
        self.rank, self.world_size = int(rank), int(world_size)
        self.address, self.port, self.timeout_s = address, int(port), float(timeout_s)
        self.backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        self.joined = False

    def join(self) -> RankGroup:
        """Rendezvous with the other ranks (blocks until all ``world_size`` have joined, or the deadline).

        Raises:
            CollectiveError: a group is already initialised in this process, or the rendezvous failed or
                timed out.
        """
        if dist.is_initialized():
            raise CollectiveError(
                f"rank {self.rank}: a torch.distributed process group already exists in this process; "
                "leave it before joining another"
            )
        with self.collective("the rendezvous"):
            dist.init_process_group(
                self.backend,
                init_method=f"tcp://{self.address}:{self.port}",
                rank=self.rank,
                world_size=self.world_size,
                timeout=timedelta(seconds=self.timeout_s),
            )
        self.joined = True
        return self

    def leave(self) -> None:
        """Destroys the process group (idempotent); the process may join another afterwards."""
        if self.joined and dist.is_initialized():
            dist.destroy_process_group()
        self.joined = False

    def __enter__(self) -> RankGroup:
        return self.join()

    def __exit__(self, *exc: object) -> None:
        self.leave()

    @contextmanager
    def collective(self, what: str) -> Iterator[None]:
        """Runs the body's collectives; a failure becomes a `CollectiveError` naming ``what``, the deadline.

        Raises:
            CollectiveError: from any ``RuntimeError`` of the body (torch's ``DistBackendError`` and gloo's
                transport errors are ones): a peer died or the deadline passed.
        """
        try:
            yield
        except RuntimeError as e:
            if isinstance(e, CollectiveError):
                raise
            raise self.error(what, e) from e

    def error(self, what: str, cause: BaseException) -> CollectiveError:
        """The `CollectiveError` of ``what`` failing with ``cause``: rank, group, deadline and cause named."""
        return CollectiveError(
            f"rank {self.rank} of {self.world_size} ({self.backend}, {self.address}:{self.port}): {what} "
            f"failed: a peer rank died or did not answer within the collective deadline of "
            f"{self.timeout_s:g} s (liveness.collective_timeout_s, T1 §7.3); the step is lost, resume "
            f"from the last checkpoint. Cause: {type(cause).__name__}: {cause}"
        )

    def all_sum(self, value: float, what: str) -> float:
        """The sum of ``value`` over the group's ranks (float64 on the wire; exact for token counts)."""
        t = torch.tensor([float(value)], dtype=torch.float64)
        with self.collective(what):
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return float(t.item())

    def all_gather(self, obj: object, what: str) -> list[object]:
        """Every rank's ``obj`` (picklable), in rank order."""
        out: list[object] = [None] * self.world_size
        with self.collective(what):
            dist.all_gather_object(out, obj)
        return out
