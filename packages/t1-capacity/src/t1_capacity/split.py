"""Device split between inference and training: T_step(n) = max(R / n, C / (G - n)) (T1 §7).

Rollout and training run on disjoint partitions pipelined one step deep, so a step lasts as long as the slower
partition. R is the generation work and C the training work, both in device-minutes (per-replica throughput is
taken as additive, T1 §7). The slack is what the faster partition waits; T1 §7 keeps some generation slack on
purpose to absorb the straggler tail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

GENERATION = "generation"
TRAINING = "training"


@dataclass(frozen=True)
class StepSplit:
    """Step time at one split.

    Attributes:
        inference_devices: n.
        training_devices: G - n.
        generation_min: R / n, minutes.
        training_min: C / (G - n), minutes.
    """

    inference_devices: int
    training_devices: int
    generation_min: float
    training_min: float

    @property
    def step_min(self) -> float:
        """T_step = max(generation, training), minutes."""
        return max(self.generation_min, self.training_min)

    @property
    def slack_min(self) -> float:
        """How long the faster partition idles per step, minutes."""
        return abs(self.generation_min - self.training_min)

    @property
    def bound(self) -> str:
        """Which partition sets the step: ``"generation"`` or ``"training"``."""
        return GENERATION if self.generation_min >= self.training_min else TRAINING


def step_time(n: int, generation_work: float, training_work: float, devices: int) -> StepSplit:
    """T_step(n) = max(R / n, C / (G - n)) (T1 §7).

    Args:
        n: inference devices, 0 < n < G.
        generation_work: R, device-minutes of generation per step.
        training_work: C, device-minutes of training per step.
        devices: G.

    Returns:
        The split with both partition times and the step.

    Raises:
        ValueError: when n is not in (0, G) or a work figure is negative.
    """
    if not 0 < n < devices:
        raise ValueError(f"inference devices n={n} must be in (0, G={devices})")
    if generation_work < 0 or training_work < 0:
        raise ValueError("generation and training work must be >= 0 device-minutes")
    return StepSplit(n, devices - n, generation_work / n, training_work / (devices - n))


def balance_point(generation_work: float, training_work: float, devices: int) -> float:
    """Continuous optimum n* = G R / (R + C), where R / n = C / (G - n); T* = (R + C) / G."""
    return devices * generation_work / (generation_work + training_work)


def optimal_split(
    generation_work: float,
    training_work: float,
    devices: int,
    granularity: int = 1,
    min_training: int = 1,
    training_fits: Callable[[int], bool] | None = None,
) -> StepSplit:
    """The feasible n minimising T_step (T1 §7).

    Args:
        generation_work: R, device-minutes.
        training_work: C, device-minutes.
        devices: G.
        granularity: n must be a multiple of this (one inference replica's devices).
        min_training: G - n must be at least this.
        training_fits: optional test that G - n training devices admit a plan that fits in memory (e.g. a
            ``t1_capacity.search_plans`` call); splits it rejects are skipped.

    Returns:
        The best split; ties go to the smaller n (more training devices, more slack on generation).

    Raises:
        ValueError: when no multiple of ``granularity`` leaves ``min_training`` devices (that fit).
    """
    feasible = [n for n in range(granularity, devices - min_training + 1, granularity)]
    if training_fits is not None:
        feasible = [n for n in feasible if training_fits(devices - n)]
    if not feasible:
        raise ValueError(
            f"no inference size that is a multiple of {granularity} leaves {min_training} of {devices} "
            "devices" + (" with a training plan that fits" if training_fits is not None else "")
        )
    return min(
        (step_time(n, generation_work, training_work, devices) for n in feasible), key=lambda s: s.step_min
    )


def generation_work_from_rate(
    groups: float, groups_per_min_per_replica: float, replica_devices: int
) -> float:
    """R from a measured replica rate: groups / rate * devices per replica, device-minutes.

    T1 §7: one replica at 4.35 groups/min takes 58.9 min for a batch of 256 groups.
    """
    if groups_per_min_per_replica <= 0:
        raise ValueError("groups_per_min_per_replica must be > 0")
    return groups / groups_per_min_per_replica * replica_devices


def training_work_from_time(training_min: float, training_devices: int) -> float:
    """C from one measured training time on ``training_devices``: C = t * (G - n), device-minutes."""
    return training_min * training_devices
