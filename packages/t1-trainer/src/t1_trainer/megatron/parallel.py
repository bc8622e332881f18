"""The process group and megatron-core's parallel state of a plan (tp, pp, cp, dp, ep, etp; T1 §7).

One process per training device. Under a launcher (``torchrun``: ``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR``
set) the default group joins it; without one, the process starts a group of one on a free loopback port
(``gloo`` on the CPU, ``nccl`` on CUDA). ``parallel_state.initialize_model_parallel`` then carves the plan's
groups out of the world; dp is what remains (``world / (tp * pp * cp)``), so the world must equal
``plan.training_devices``.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import torch

__all__ = ["ensure_parallel_state", "launched_world_size", "seed_rng"]


def launched_world_size() -> int:
    """Processes of the launch this one belongs to (``WORLD_SIZE``; 1 without a launcher)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_parallel_state(plan: Any, *, cpu: bool) -> None:
    """Initialises the default process group and megatron's model-parallel groups of ``plan`` once.

    Idempotent: a second backend in the same process (actor and critic, or a test) reuses the groups, which
    must then be of the same degrees.

    Raises:
        RuntimeError: the world size differs from ``plan.training_devices``, or megatron's groups already
            exist with other degrees.
    """
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    if not dist.is_initialized():
        backend = "gloo" if cpu else "nccl"
        if "MASTER_ADDR" in os.environ and "WORLD_SIZE" in os.environ:
            dist.init_process_group(backend)
        else:
            dist.init_process_group(
                backend, world_size=1, rank=0, init_method=f"tcp://127.0.0.1:{_free_port()}"
            )
        if not cpu:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    world = dist.get_world_size()
    if world != plan.training_devices:
        raise RuntimeError(
            f"plan: {plan.training_devices} training devices, but this process group has {world} "
            "process(es); launch one process per training device (torchrun --nproc-per-node)"
        )
    want = {"tp": plan.tp, "pp": plan.pp, "cp": plan.cp, "ep": plan.ep, "etp": plan.etp}
    if ps.model_parallel_is_initialized():
        have = {
            "tp": ps.get_tensor_model_parallel_world_size(),
            "pp": ps.get_pipeline_model_parallel_world_size(),
            "cp": ps.get_context_parallel_world_size(),
            "ep": ps.get_expert_model_parallel_world_size(),
            "etp": ps.get_expert_tensor_parallel_world_size(),
        }
        if have != want:
            raise RuntimeError(f"megatron's parallel state is already {have}; this plan asks for {want}")
        return
    ps.initialize_model_parallel(
        tensor_model_parallel_size=plan.tp,
        pipeline_model_parallel_size=plan.pp,
        context_parallel_size=plan.cp,
        expert_model_parallel_size=plan.ep,
        expert_tensor_parallel_size=plan.etp,
    )


def seed_rng(seed: int, *, cpu: bool) -> None:
    """Sets megatron's RNG tracker: per-rank CUDA streams on a GPU; on the CPU its no-op tracker.

    megatron's CUDA tracker reads and writes CUDA RNG states in every attention forward (``fork``), which the
    CPU has none of; its inference tracker forks to a ``nullcontext``. T1 trains with dropout 0, so no draw
    depends on the tracker; weight draws use ``torch.manual_seed`` (`t1_trainer.megatron.model.build_gpt`).
    """
    from megatron.core.tensor_parallel import random as mrandom

    if cpu:
        mrandom.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
    else:
        mrandom.initialize_rng_tracker(force_reset=True)
        mrandom.model_parallel_cuda_manual_seed(seed)
