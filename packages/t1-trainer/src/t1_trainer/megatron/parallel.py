"""The process group and megatron-core's parallel state of a plan (tp, pp, cp, dp, ep, etp; T1 §7).

One process per training device. Under a launcher (``torchrun``: ``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR``
set) the default group joins it; without one, the process starts a group of one on a free loopback port
(``gloo`` on the CPU, ``nccl`` on CUDA). ``parallel_state.initialize_model_parallel`` then carves the plan's
groups out of the world; dp is what remains (``world / (tp * pp * cp)``), so the world must equal
``plan.training_devices``. `plan_problems` says which of a plan's degrees the backend does not build here;
`gathered_rows` gathers a rank's routing rows over the tp and cp groups.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import numpy as np
import torch

from t1_spec import ModelSpec, PlanSpec

__all__ = [
    "cp_rank",
    "ensure_parallel_state",
    "gathered_rows",
    "launched_world_size",
    "plan_problems",
    "seed_rng",
    "tp_rank",
]


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


def plan_problems(plan: PlanSpec, device: str, model: ModelSpec) -> list[str]:
    """The plan's degrees the Megatron backend does not build here, and a world size other than the plan's.

    One line each, led by the field path: etp, cp, tp or pp above 1 on CUDA (built and tested on the CPU
    only), a vocabulary tp does not divide, Gated DeltaNet head counts tp x cp does not divide, pp with tied
    embeddings, a launch of another size. Imports nothing of megatron-core (the backend's preflight calls it).
    """
    cpu = not device.startswith("cuda")
    lines = []
    if plan.tp > 1 and model.vocab_size % plan.tp:
        lines.append(
            f"model.vocab_size {model.vocab_size}: megatron's VocabParallelEmbedding splits the vocabulary "
            f"evenly over plan.tp {plan.tp}; pad vocab_size to a multiple of {plan.tp}"
        )
    split = plan.tp * plan.cp
    for field in ("linear_num_key_heads", "linear_num_value_heads"):
        heads = getattr(model, field)
        if model.num_linear_attention_layers and heads % split:
            lines.append(
                f"model.{field} {heads}: megatron-core's TransformerConfig asserts the Gated DeltaNet heads "
                f"are a multiple of plan.tp {plan.tp} x plan.cp {plan.cp} = {split} (for its head-parallel "
                "context parallelism, which T1's sequence-sharded scan replaces but the check stays); set "
                f"tp x cp to a divisor of {heads}"
            )
    if plan.pp > 1 and model.tie_word_embeddings:
        lines.append(
            f"plan.pp {plan.pp} with model.tie_word_embeddings: the megatron trainer does not build the sum "
            "of the shared embedding's gradients over the first and last pipeline stages; set pp 1"
        )
    if plan.etp > 1 and not cpu:
        lines.append(
            f"plan.etp {plan.etp} on trainer.device {device}: the megatron trainer's expert tensor "
            "parallelism is built and tested on the CPU (gloo) only and has never run under megatron's "
            "DistributedOptimizer on a GPU; set 1"
        )
    if plan.cp > 1 and not cpu:
        lines.append(
            f"plan.cp {plan.cp} on trainer.device {device}: megatron-core's context-parallel attention on "
            "CUDA is Transformer Engine's, which the megatron trainer's layer spec does not build (its "
            "all-gather attention and T1's sequence-sharded scan are built and tested on the CPU only); set 1"
        )
    if plan.tp > 1 and not cpu:
        lines.append(
            f"plan.tp {plan.tp} on trainer.device {device}: the megatron trainer does not build the tp sum "
            "of the sequence-parallel partial gradients under megatron's DistributedOptimizer (built on the "
            "CPU only); set 1"
        )
    if plan.pp > 1 and not cpu:
        lines.append(
            f"plan.pp {plan.pp} on trainer.device {device}: the megatron trainer's pipeline stages are built "
            "and tested on the CPU (gloo) only and have never run under megatron's DistributedOptimizer on a "
            "GPU; set 1"
        )
    n = plan.training_devices
    if n != launched_world_size():
        lines.append(
            f"plan: {n} training devices, but this process belongs to a launch of {launched_world_size()}; "
            f"start the trainer under torchrun --nproc-per-node {n}"
        )
    return lines


def tp_rank() -> int:
    """This rank's index in megatron's tensor-parallel group."""
    from megatron.core import parallel_state as ps

    return int(ps.get_tensor_model_parallel_rank())


def cp_rank() -> int:
    """This rank's index in megatron's context-parallel group."""
    from megatron.core import parallel_state as ps

    return int(ps.get_context_parallel_rank())


def gathered_rows(rows: torch.Tensor, tp: int, cp: int) -> np.ndarray:
    """This rank's recorded routing rows ``[m / (cp tp), k]`` -> the whole forward's, in sequence order."""
    from megatron.core import parallel_state as ps

    if tp > 1:
        parts = [torch.empty_like(rows) for _ in range(tp)]
        torch.distributed.all_gather(parts, rows.contiguous(), group=ps.get_tensor_model_parallel_group())
        rows = torch.cat(parts)
    if cp > 1:
        from t1_trainer.megatron.cp import gather_sequence

        rows = gather_sequence(rows, sum_grads=False)
    return rows.cpu().numpy()
