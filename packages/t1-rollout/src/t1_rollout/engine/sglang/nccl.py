"""The trainer side of ``weight_sync: distributed``: rank 0 of a ``torch.distributed`` group the servers join.

SGLang's ``/init_weights_update_group`` makes each server rank join a fresh group, outside any default
group, by a TCP rendezvous at ``master_address:master_port`` whose store keys are prefixed with the group's
name; `join_group` forms the same group from the trainer's side (rank 0), and `TorchBroadcaster.broadcast`
sends each tensor from rank 0 in the order the servers were told (``/update_weights_from_distributed``).
The backend is NCCL on GPUs; gloo on CPU, which is how the tests check the rendezvous and the broadcast
order (T1 §7: the group's deadline is ``liveness.collective_timeout_s``).
"""

from __future__ import annotations

import datetime
import inspect
import socket
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

__all__ = ["TorchBroadcaster", "free_port", "join_group"]


def free_port() -> int:
    """A TCP port free on this machine now (bound to port 0, then released)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def join_group(
    *, address: str, port: int, rank: int, world_size: int, group_name: str, backend: str, timeout_s: float
) -> Any:
    """Joins the weight-update group as ``rank`` and returns its process group.

    Rendezvous over TCP at ``address:port`` (rank 0 hosts the store), store keys prefixed with
    ``group_name``, a new process group of ``world_size`` ranks registered under ``group_name`` without
    touching the default group (torch's ``_new_process_group_helper``, as SGLang's servers do).

    Raises:
        RuntimeError: the other ranks did not join within ``timeout_s`` (torch's rendezvous error).
    """
    timeout = datetime.timedelta(seconds=timeout_s)
    store, rank, world_size = next(
        c10d.rendezvous(f"tcp://{address}:{port}", rank, world_size, timeout=timeout)
    )
    store.set_timeout(timeout)
    store = c10d.PrefixStore(group_name, store)
    options = (
        "backend_options"
        if "backend_options" in inspect.signature(c10d._new_process_group_helper).parameters
        else "pg_options"
    )
    group, _ = c10d._new_process_group_helper(
        world_size,
        rank,
        [],
        c10d.Backend(backend),
        store,
        group_name=group_name,
        timeout=timeout,
        **{options: None},
    )
    c10d._world.pg_group_ranks[group] = {i: i for i in range(world_size)}
    return group


class TorchBroadcaster:
    """`t1_rollout.engine.sglang.weights.Broadcaster` over ``torch.distributed`` (NCCL on GPUs).

    Args:
        master_address: this machine's address as the servers reach it.
        master_port: the rendezvous port; None = a free port of this machine.
        backend: ``"nccl"`` (tensors on CUDA) or ``"gloo"`` (CPU tensors; tests).
        timeout_s: deadline of the rendezvous and of each collective, seconds.
    """

    def __init__(
        self, master_address: str, master_port: int | None = None, *, backend: str = "nccl", timeout_s: float
    ) -> None:
        self.master_address = master_address
        self.master_port = master_port if master_port is not None else free_port()
        self.backend, self.timeout_s = backend, timeout_s
        self.group: Any = None

    def init_group(self, world_size: int, group_name: str) -> None:
        """Joins as rank 0 and returns when all ``world_size`` ranks have joined."""
        self.group = join_group(
            address=self.master_address,
            port=self.master_port,
            rank=0,
            world_size=world_size,
            group_name=group_name,
            backend=self.backend,
            timeout_s=self.timeout_s,
        )

    def broadcast(self, bucket: Sequence[tuple[str, torch.Tensor]], group_name: str) -> None:
        """Broadcasts each tensor from rank 0, in order (moved to CUDA first under NCCL).

        Raises:
            RuntimeError: `init_group` was not called.
        """
        if self.group is None:
            raise RuntimeError(f"weight-update group {group_name!r} not formed; call init_group first")
        for _, tensor in bucket:
            t = tensor.detach()
            if self.backend == "nccl" and not t.is_cuda:
                t = t.cuda()
            dist.broadcast(t.contiguous(), src=0, group=self.group)
