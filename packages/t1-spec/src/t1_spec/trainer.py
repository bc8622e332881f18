"""Trainer backend (T1 §4.5, §6, §7)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from t1_spec._base import Spec


class TrainerSpec(Spec):
    """Which trainer backend updates actor and critic, where, and how often it saves."""

    backend: Literal["torch", "megatron"] = "torch"
    """``torch``: plain PyTorch on CPU or one GPU; ``megatron``: megatron-core models with its router replay,
    the paper's backend (Megatron-Core v0.16.0rc0, T1 §6; here megatron-core 0.19.2, the optional
    ``t1-trainer[megatron]`` extra, refused in one line where it is absent). The ``megatron`` backend builds
    one process per training device: on the CPU tp, pp, dp and ep (each rank runs the whole batch; Gated
    DeltaNet layers on torch kernels), on CUDA dp and ep (Gated DeltaNet layers need flash-linear-attention);
    cp and etp above 1 are not built and are refused by name."""

    device: str = Field(default="cpu", pattern=r"^(cpu|cuda(:[0-9]+)?)$")
    """torch device string: ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` for ``torch``; ``"cuda"`` (each process
    on its ``LOCAL_RANK`` device) or ``"cpu"`` (gloo ranks, no offload) for ``megatron``."""

    checkpoint_every: int = Field(default=10, ge=0)
    """Save a checkpoint every this many PPO steps (steps); 0 = never. Every 10 steps in the paper (T1 §7).
    A checkpoint holds the actor and critic weights (``checkpoints/step-NNNN/weights/`` in the run directory;
    the final weights go to ``weights/``) and the rest of the run state (``state/``: step counters, weight
    version, task order position, RNG states), from which ``t1 train --resume RUN_DIR`` continues the run."""

    save_final_weights: bool = True
    """Write the final actor and critic weights to ``weights/`` in the run directory when the run ends (about
    three times the policy's size in float32: 185 MB for the tiny model). A user who trains keeps them; a
    smoke run of seeded random weights (``recipes/tiny-cpu.yaml``) turns this off, so its run directory holds
    only the records (under 1 MB a step). Checkpoints (``checkpoint_every``) are saved either way."""

    checkpoint_optimizer: bool = False
    """Also save both optimizer states in every checkpoint (``state/optimizer.pt``). Off in the paper: weights
    only, so a crash means restart rather than resume, traded for cost (T1 §7); ``t1 train --resume`` needs
    ``true`` (it refuses a checkpoint without optimizer states, since the resumed steps would differ)."""

    logprob_gap_every: int = Field(default=10, ge=0)
    """Measure the live-routing log-prob gap every this many PPO steps (steps); 0 = never. On those steps
    (the first step, then every ``logprob_gap_every``-th: 1, 11, 21, ... counting from 1) the actor runs one
    extra no-gradient forward per sample with live routing and the step's metrics gain
    ``actor/logprob_gap_no_replay`` (mask-weighted mean ``|log p_trainer - log p_rollout|`` on loss tokens,
    live TopK) and ``actor/routing_flip_fraction`` (loss tokens whose experts differ from the record in at
    least one MoE layer), the comparison of T1 §4.3, Fig. 6 (0.021 without R3, 0.013 with TITO and R3).
    The gap with replay, ``actor/logprob_gap_replay``, costs nothing extra and is logged every step. Only
    with ``ppo.routing_replay`` on (with it off, the step's one forward already routes live)."""
