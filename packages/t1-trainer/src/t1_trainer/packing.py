"""Packed micro-batches: several samples in one variable-length forward and backward.

With ``ppo.micro_batch_size > 1`` the update loop (`t1_trainer.update`) groups consecutive samples of the
batch (of a rank's shard, under data parallel) into micro-batches of at most ``micro_batch_size`` samples and,
when ``ppo.micro_batch_tokens`` is set, at most that many tokens (`plan_micro_batches`; a longer sample runs
alone). A group of several samples becomes one `PackedSamples`: their streams concatenated into one row of
``N = sum T_i`` tokens, run as ONE forward and ONE backward:

* the row is variable-length, not padded: positions restart per sample, full attention is block-diagonal
  causal, and the Gated DeltaNet conv and scan restart per sample (`t1_policy.varlen.varlen_forward`, which
  says how, and why on the CPU its linear-attention layers run as a right-padded batch);
* with R3 on, each sample's routing record replays on its own tokens (`t1_r3.replay_routing_packed`);
* the loss is the concatenation of the samples' per-token terms over the same denominator (the batch's loss
  tokens, T1 §4.5's token mean), so a micro-batch's loss is the sum of its samples' unpacked losses and its
  gradient their sum: packing changes the fp32 reduction order, nothing else.

Per-sample quantities (the first pass's old log-probs, the gap to the rollout, the off-policy weights, the
Eq. 25 split) are still taken per sample, from the packed forward's output split at the sample boundaries.
A group of one sample is the sample itself: with the defaults (``micro_batch_size`` 1, no token budget) the
update is today's bit for bit.

What it buys: the tiny CPU model's forward is dominated by per-call overhead (a few thousand small kernels
per forward whatever the length), which packing pays once per micro-batch instead of once per sample; on a
GPU the same holds for kernel launches, and fuller matmuls use the device better
(``tools/bench/bench_packing.py`` measures it).

A backend takes part by supplying ``packed(network, pack)``: the scope in which ``network``'s forwards run a
`PackedSamples` row as its samples (`t1_trainer.torch_backend.TorchBackend.packed`). Its other hooks see the
pack where they would see a sample (``token_ids`` and ``loss_mask`` are the concatenated streams), so a
backend that routes them through a wrapper (`t1_trainer.data_parallel`'s DDP modules) packs unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from t1_spec import PPOSpec
from t1_trainer.errors import TrainerConfigError
from t1_trainer.samples import TrainSample

__all__ = ["MicroBatch", "PackedSamples", "forward_scope", "micro_batches", "plan_micro_batches"]


def plan_micro_batches(
    lengths: Sequence[int], *, max_samples: int, max_tokens: int | None = None
) -> list[list[int]]:
    """Splits samples, in order, into micro-batches of consecutive samples (indices into ``lengths``).

    A micro-batch closes when the next sample would bring it above ``max_samples`` samples or above
    ``max_tokens`` tokens; a sample longer than ``max_tokens`` forms a micro-batch alone. Order is kept, so
    the plan depends on nothing but the lengths (every rank and every pass get the same one).

    Args:
        lengths: tokens per sample.
        max_samples: ``ppo.micro_batch_size`` (>= 1).
        max_tokens: ``ppo.micro_batch_tokens``; None = no token budget.

    Raises:
        ValueError: ``max_samples`` < 1 or ``max_tokens`` < 1.
    """
    if max_samples < 1 or (max_tokens is not None and max_tokens < 1):
        raise ValueError(
            f"plan_micro_batches: max_samples {max_samples} and max_tokens {max_tokens} must be >= 1"
        )
    plan: list[list[int]] = []
    tokens = 0
    for i, n in enumerate(lengths):
        full = bool(plan) and (
            len(plan[-1]) >= max_samples or (max_tokens is not None and tokens + int(n) > max_tokens)
        )
        if not plan or full:
            plan.append([])
            tokens = 0
        plan[-1].append(i)
        tokens += int(n)
    return plan


class PackedSamples:
    """Several samples as one row: their streams concatenated in order (T1 §4.1's streams, packed).

    Attributes:
        samples: the packed samples, in row order.
        lengths: ``T_i`` per sample (tokens).
        token_ids: int32 ``[N]``, ``N = sum T_i``; ``loss_mask`` int8 ``[N]``; ``rollout_logprobs`` float32
            ``[N]``: the samples' streams concatenated, so a hook reading a sample's streams reads the pack's.
        routing: None; a pack's routing records are per sample (``[s.routing for s in samples]``), replayed
            by `t1_r3.replay_routing_packed`.
    """

    def __init__(self, samples: Sequence[TrainSample]) -> None:
        if len(samples) < 2:
            raise ValueError(f"PackedSamples: {len(samples)} sample(s); a pack holds two or more")
        self.samples = list(samples)
        self.lengths = [len(s.token_ids) for s in self.samples]
        self.token_ids = np.concatenate([np.asarray(s.token_ids) for s in self.samples])
        self.loss_mask = np.concatenate([np.asarray(s.loss_mask) for s in self.samples])
        self.rollout_logprobs = np.concatenate([np.asarray(s.rollout_logprobs) for s in self.samples])
        self.routing = None
        self.task_id = "+".join(str(getattr(s, "task_id", "?")) for s in self.samples)
        self.trial_id = f"pack of {len(self.samples)}"
        self._loss_counts = [int(np.count_nonzero(np.asarray(s.loss_mask))) for s in self.samples]
        starts = np.cumsum([0, *self.lengths[:-1]])
        self._starts = torch.as_tensor(starts, dtype=torch.long)

    def split_loss_tokens(self, packed: torch.Tensor) -> list[torch.Tensor]:
        """A ``[n_loss]`` tensor over the pack's loss tokens -> one ``[n_loss_i]`` view per sample."""
        return list(torch.split(packed, self._loss_counts))

    def sample_values(self, packed: torch.Tensor) -> torch.Tensor:
        """Packed critic values ``[N]`` with each sample's position 0 set to 0 (the unpacked convention).

        The packed critic reads ``V(s_j)`` from position ``j - 1``; at a sample's first token that is the
        previous sample's last token, which no value of this sample may use.
        """
        start = torch.zeros(packed.shape[0], dtype=torch.bool, device=packed.device)
        start[self._starts.to(packed.device)] = True
        return torch.where(start, torch.zeros_like(packed), packed)

    def split_tokens(self, packed: torch.Tensor) -> list[torch.Tensor]:
        """A ``[N]`` per-token tensor -> one ``[T_i]`` view per sample."""
        return list(torch.split(packed, self.lengths))


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch of the update loop: which samples, and what the hooks are called with.

    Attributes:
        indices: the samples' indices in the batch, in row order.
        unit: the sample itself (one index) or their `PackedSamples`.
    """

    indices: tuple[int, ...]
    unit: Any

    @property
    def packed(self) -> bool:
        """Whether the micro-batch is a pack of several samples."""
        return len(self.indices) > 1

    def split_loss_tokens(self, logp: torch.Tensor) -> list[torch.Tensor]:
        """The unit's loss-token tensor per sample (the tensor itself for one sample)."""
        return self.unit.split_loss_tokens(logp) if self.packed else [logp]

    def values(self, values: torch.Tensor) -> torch.Tensor:
        """The unit's critic values ``[N]`` with every sample's position 0 at 0 (unchanged for one sample)."""
        return self.unit.sample_values(values) if self.packed else values

    def split_tokens(self, values: torch.Tensor) -> list[torch.Tensor]:
        """The unit's per-token tensor ``[N]`` per sample."""
        return self.unit.split_tokens(values) if self.packed else [values]

    @staticmethod
    def cat(parts: Sequence[torch.Tensor]) -> torch.Tensor:
        """``torch.cat`` of per-sample parts in row order; one part is returned as it is (no copy)."""
        return parts[0] if len(parts) == 1 else torch.cat(list(parts))


def micro_batches(samples: Sequence[TrainSample], indices: Iterable[int], ppo: PPOSpec) -> list[MicroBatch]:
    """The micro-batches of ``samples[indices]`` under ``ppo.micro_batch_size`` / ``ppo.micro_batch_tokens``.

    See `plan_micro_batches`; with the defaults every micro-batch is one sample.
    """
    chosen = list(indices)
    plan = plan_micro_batches(
        [len(samples[i].token_ids) for i in chosen],
        max_samples=ppo.micro_batch_size,
        max_tokens=ppo.micro_batch_tokens,
    )
    out = []
    for group in plan:
        idx = tuple(chosen[g] for g in group)
        unit = samples[idx[0]] if len(idx) == 1 else PackedSamples([samples[i] for i in idx])
        out.append(MicroBatch(idx, unit))
    return out


@contextmanager
def forward_scope(backend: Any, network: str, unit: Any, *, replay: bool) -> Iterator[None]:
    """The scope of one micro-batch's forwards (and backward) on ``network``.

    A `PackedSamples` unit runs inside ``backend.packed(network, unit)``; with ``replay`` the actor's routers
    replay the unit's record(s) (``backend.replayed(unit)``, T1 §4.3). A single sample needs only the
    replay.

    Raises:
        TrainerConfigError: a pack on a backend without a ``packed`` hook (packing is not built there).
    """
    with ExitStack() as stack:
        if isinstance(unit, PackedSamples):
            packed = getattr(backend, "packed", None)
            if packed is None:
                raise TrainerConfigError(
                    f"ppo.micro_batch_size > 1: {type(backend).__name__} builds no packed micro-batches; "
                    "set micro_batch_size: 1"
                )
            stack.enter_context(packed(network, unit))
        if replay:
            stack.enter_context(backend.replayed(unit))
        yield
