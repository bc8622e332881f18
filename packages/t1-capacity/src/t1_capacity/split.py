"""Device split between inference and training: T_step(n) = max(R / n, C / (G - n)) (T1 §7).

Rollout and training run on disjoint partitions pipelined one step deep, so a step lasts as long as the slower
partition. R is the generation work and C the training work, both in device-minutes (per-replica throughput is
taken as additive, T1 §7). The slack is what the faster partition waits; T1 §7 keeps some generation slack on
purpose to absorb the straggler tail.
"""

from __future__ import annotations

import math
import numbers
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


def _real(value: object) -> bool:
    """A finite real number (not a bool)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _work(name: str, value: float) -> float:
    """``value`` as a finite, non-negative number of device-minutes, or ValueError naming ``name``."""
    if not _real(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of device-minutes >= 0, got {value!r}")
    return float(value)


def _count(name: str, value: int, least: int) -> int:
    """``value`` as an integer >= ``least``, or ValueError naming ``name``."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    return int(value)


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
        ValueError: when n is not in (0, G), or a work figure is negative or not finite (naming it).
    """
    _count("devices", devices, 2)
    _work("generation_work", generation_work)
    _work("training_work", training_work)
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or not 0 < n < devices:
        raise ValueError(f"inference devices n={n!r} must be in (0, G={devices}), an integer")
    return StepSplit(n, devices - n, generation_work / n, training_work / (devices - n))


def balance_point(generation_work: float, training_work: float, devices: int) -> float:
    """Continuous optimum n* = G R / (R + C), where R / n = C / (G - n); T* = (R + C) / G (T1 §7).

    Args:
        generation_work: R, device-minutes, finite and >= 0.
        training_work: C, device-minutes, finite and >= 0; R + C > 0.
        devices: G, an integer >= 2.

    Returns:
        n*, devices (a real number in [0, G]).

    Raises:
        ValueError: naming the argument that is negative, not finite, or (R and C) both zero.
    """
    _work("generation_work", generation_work)
    _work("training_work", training_work)
    _count("devices", devices, 2)
    if generation_work + training_work == 0:
        raise ValueError(
            "generation_work and training_work are both 0: with no work there is no balance point; "
            "give at least one positive number of device-minutes"
        )
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
        ValueError: a bad argument (negative or non-finite work, ``devices`` < 2, ``granularity`` or
            ``min_training`` < 1), naming it; or no multiple of ``granularity`` leaves ``min_training``
            devices (that fit).
    """
    _work("generation_work", generation_work)
    _work("training_work", training_work)
    _count("devices", devices, 2)
    _count("granularity", granularity, 1)
    _count("min_training", min_training, 1)
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

    Raises:
        ValueError: ``groups`` negative or not finite, ``groups_per_min_per_replica`` not a finite number
            > 0, or ``replica_devices`` < 1, naming the argument.
    """
    if not _real(groups) or groups < 0:
        raise ValueError(f"groups must be a finite number >= 0, got {groups!r}")
    rate = groups_per_min_per_replica
    if not _real(rate) or rate <= 0:
        raise ValueError(f"groups_per_min_per_replica must be a finite number > 0, got {rate!r}")
    _count("replica_devices", replica_devices, 1)
    return groups / groups_per_min_per_replica * replica_devices


def training_work_from_time(training_min: float, training_devices: int) -> float:
    """C from one measured training time on ``training_devices``: C = t * (G - n), device-minutes."""
    return training_min * training_devices
