"""Pipeline stages of the Megatron backend through megatron-core's own schedule (T1 §7, the paper's rho).

With ``plan.pp > 1`` each rank holds one stage of the actor and of the critic (`t1_trainer.megatron.model`:
megatron's ``pre_process`` / ``post_process``, the embedding on the first stage, the LM head or value head on
the last) and a pass over the micro-batches is one call of megatron-core's
``get_forward_backward_func()`` (``forward_backward_pipelining_without_interleaving``, 1F1B), with
``num_microbatches`` = the update loop's micro-batches (one sample each), every stage iterating the same
samples. Each micro-batch's forward feeds that sample's routing record to the routers of the layers this
stage owns (R3 through ``RouterReplay``; the whole record is checked first, so a missing row fails closed on
every stage alike); the last stage turns its output into log-probs (or values), the update loop's loss, and
hands the schedule that loss, which megatron back-propagates through the stages. The loss, metrics and
no-grad results exist on the last stage only and are broadcast to the other stages of its pipeline group, so
every rank returns the one-rank figures.

CPU adaptation (`cpu_schedule`, the one place). megatron-core 0.19.2's schedule assumes CUDA in three spots:
``forward_backward_pipelining_without_interleaving`` allocates its token counter with ``device="cuda"``
(``schedules.py``), ``P2PCommunicator`` allocates its shape and receive buffers on
``torch.cuda.current_device()`` and calls ``torch.cuda.synchronize()`` after a batched exchange
(``p2p_communication.py``). On the CPU only, and only while the schedule runs, a torch function mode places
factory calls that name a CUDA device on the CPU, ``torch.cuda.current_device()`` answers the CPU
(`t1_trainer.megatron.model.cpu_device_shim`) and ``torch.cuda.synchronize()`` is a no-op (gloo's
``wait()`` already completes the exchange). On CUDA nothing is patched: megatron's path is its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

__all__ = [
    "broadcast_from_last_stage",
    "cpu_schedule",
    "gather_stages",
    "pass_length",
    "pipelined_pass",
    "run_schedule",
    "staged_head",
]

LossOf = Callable[[int, torch.Tensor], tuple[torch.Tensor, dict[str, float]]]
"""The update loop's loss of micro-batch ``j`` from its head output (log-probs or values)."""


class _CudaFactoriesOnCpu(TorchFunctionMode):
    """Redirects a ``device=`` argument naming CUDA to the CPU (megatron's ``torch.zeros(..., "cuda")``)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        dev = kwargs.get("device")
        # an int is a CUDA ordinal (torch.device(0) is cuda:0)
        if dev is not None and (isinstance(dev, int) or torch.device(dev).type == "cuda"):
            kwargs = {**kwargs, "device": "cpu"}
        return func(*args, **kwargs)


@contextlib.contextmanager
def cpu_schedule(cpu: bool) -> Iterator[None]:
    """megatron-core's pipeline schedule made CPU-safe for the body (see the module docstring); CUDA: nothing.

    Why here and not in megatron: its schedule and p2p communicator hard-code the CUDA device and a CUDA
    synchronisation that gloo on the CPU neither has nor needs; nothing else of the schedule is changed.
    """
    if not cpu:
        yield
        return
    from t1_trainer.megatron.model import cpu_device_shim

    synchronize = torch.cuda.synchronize
    torch.cuda.synchronize = lambda device=None: None  # type: ignore[assignment]
    try:
        with cpu_device_shim(True), _CudaFactoriesOnCpu():
            yield
    finally:
        torch.cuda.synchronize = synchronize  # type: ignore[assignment]


def _ps() -> Any:
    from megatron.core import parallel_state as ps

    return ps


def broadcast_from_last_stage(obj: Any) -> Any:
    """``obj`` as the last stage of this rank's pipeline group holds it (a collective over that group).

    Picklable objects only (metrics, lists of CPU tensors or arrays); without stages ``obj`` unchanged.
    """
    ps = _ps()
    if ps.get_pipeline_model_parallel_world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(
        box, src=ps.get_pipeline_model_parallel_last_rank(), group=ps.get_pipeline_model_parallel_group()
    )
    return box[0]


def run_schedule(
    model: Any,
    units: Sequence[Any],
    forward: Callable[[Any, Any], Any],
    head: Callable[[int, Any], tuple[torch.Tensor, Any]],
    *,
    length: int,
    cpu: bool,
    forward_only: bool,
) -> list[Any]:
    """One call of megatron's pipeline schedule over ``units`` (one micro-batch each); a collective.

    Args:
        model: this rank's stage (a megatron ``GPTModel`` built with ``pre_process`` / ``post_process``).
        units: the micro-batches' samples, the same on every stage, in the update loop's order.
        forward: ``(unit, model) -> stage output`` (this stage's forward of one sample; replay fed by it).
        head: on the last stage, ``(j, stage output) -> (loss scalar, kept)``: the loss megatron
            back-propagates (ignored with ``forward_only``) and what is kept of micro-batch ``j``.
        length: the tokens of every micro-batch's forward (`pass_length`; megatron's ``seq_length``).
        cpu: run under `cpu_schedule`.
        forward_only: no backward (the no-grad forwards: values, live routing, scoring).

    Returns:
        The ``kept`` of every micro-batch in order on the last stage; an empty list on the others.
    """
    from megatron.core.pipeline_parallel import get_forward_backward_func

    it = iter(enumerate(units))

    def step(data_iterator: Iterator[tuple[int, Any]], stage: Any) -> tuple[Any, Any]:
        j, unit = next(data_iterator)

        def loss_func(out: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
            loss, kept = head(j, out)
            # 3 terms, calculate_per_token_loss: megatron divides by nothing (the loss is T1's token mean)
            return loss, torch.ones((), dtype=torch.int), kept

        return forward(unit, stage), loss_func

    with cpu_schedule(cpu):
        return list(
            get_forward_backward_func()(
                forward_step_func=step,
                data_iterator=it,
                model=[model],
                num_microbatches=len(units),
                seq_length=length,
                micro_batch_size=1,
                forward_only=forward_only,
            )
        )


def pass_length(be: Any, network: str, units: Sequence[Any]) -> int:
    """The common padded length of a schedule call: the longest forward, padded as the backend pads one.

    megatron's stages exchange one fixed shape per call (its ``variable_seq_lengths`` is refused with the
    ``allgather`` token dispatcher the CPU runs), so every sample is padded at its end to this length;
    attention is causal, so no real position reads the padding, and its routing rows are `t1_r3.pad_rows`.
    """
    longest = max(int(be.head_input(network, u).shape[0]) for u in units)
    return be.padded_length(longest)


def gather_stages(parts: dict[int, Any]) -> dict[int, Any]:
    """Every stage's ``{MoE layer column: rows}`` merged (a collective over the pipeline group)."""
    ps = _ps()
    if ps.get_pipeline_model_parallel_world_size() == 1:
        return parts
    stages: list[Any] = [None] * ps.get_pipeline_model_parallel_world_size()
    dist.all_gather_object(stages, parts, group=ps.get_pipeline_model_parallel_group())
    return {k: v for stage in stages for k, v in stage.items()}


def pipelined_pass(
    be: Any, network: str, units: Sequence[Any], loss_of: LossOf, *, replay: bool
) -> list[tuple[float, dict[str, float]]]:
    """One pass of the update loop over ``units`` through the schedule, with backward (``pipelined``).

    Args:
        be: the `t1_trainer.megatron.backend.MegatronBackend` (pp > 1).
        network: ``actor`` or ``critic``.
        units: one sample per micro-batch.
        loss_of: the update loop's loss of micro-batch ``j`` from its log-probs ``[n_loss]`` (actor) or
            values ``[T]`` (critic); called on the last stage only.
        replay: feed each sample's routing record to this stage's routers before its forward (R3).

    Returns:
        ``(loss, metrics)`` of every micro-batch, the last stage's, on every stage.
    """
    length = pass_length(be, network, units)

    def forward(unit: Any, stage: Any) -> Any:
        if replay:
            be.feed_replay(unit, length)
        return be.stage_forward(stage, be.head_input(network, unit), length)

    def head(j: int, out: Any) -> tuple[torch.Tensor, Any]:
        loss, met = loss_of(j, be.head_of(network, units[j], out))
        return loss, (loss.item(), met)

    try:
        kept = run_schedule(
            getattr(be, network), units, forward, head, length=length, cpu=be.cpu, forward_only=False
        )
    finally:
        if replay:
            from t1_trainer.megatron.replay import clear_router_replay

            clear_router_replay(be.instances)
    return broadcast_from_last_stage(kept)


def staged_head(be: Any, network: str, unit: Any) -> torch.Tensor:
    """A forward-only pass of one sample: log-probs ``[n_loss]`` or values ``[T]``, on every stage.

    The routers route as the caller set (replay fed, ``RECORD``, or live), as in the one-stage forward.
    """

    def head(j: int, out: Any) -> tuple[torch.Tensor, Any]:
        return torch.zeros(()), be.head_of(network, unit, out).detach().cpu()

    length = pass_length(be, network, [unit])
    kept = run_schedule(
        getattr(be, network),
        [unit],
        lambda u, stage: be.stage_forward(stage, be.head_input(network, u), length),
        head,
        length=length,
        cpu=be.cpu,
        forward_only=True,
    )
    return broadcast_from_last_stage(kept[0] if kept else None).to(be.device)
