"""Liveness under hour-scale steps: bounded control-plane deadlines and two-stage probes (T1 §7)."""

from __future__ import annotations

from pydantic import Field, model_validator

from t1_spec._base import Spec, Violation, raise_if

COLLECTIVE_TIMEOUT_RANGE_S = (1800.0, 7200.0)
"""The 30 to 120 min regime re-created collective groups' deadlines are calibrated to (seconds, T1 §7.3)."""


class LivenessSpec(Spec):
    """Deadlines that tell a dead participant from a slow one (cluster runs).

    A ``runtime.kind: ray`` run probes its engine replicas and sandbox hosts on this schedule
    (`t1.run.ray.liveness`); a lost one is killed at the next barrier and its trials are re-queued, never
    scored. The trainer worker is not probed, and the embedded run has no remote participants to probe.

    Every control-plane operation carries a bounded deadline; bulk transfers (weight copies) do not (T1 §7).
    """

    probe_grace_s: float = Field(default=600.0, gt=0)
    """Initial grace before a participant is probed at all (seconds): first-step kernel compilation and cold
    caches are slow by construction. 600 s (T1 §7)."""

    probe_period_s: float = Field(default=30.0, gt=0)
    """Steady-state probe period after the grace (seconds). 30 s (T1 §7)."""

    probe_deadline_s: float = Field(default=120.0, gt=0)
    """A probe not answered within this time marks the participant dead (seconds). 120 s (T1 §7)."""

    collective_timeout_s: float = Field(default=7200.0, gt=0)
    """Deadline of a re-created collective group (seconds), calibrated to the 30-120 min regime of hour-scale
    steps rather than to interactive latencies (T1 §7.3), so it must lie in [1800, 7200]; 7200 s, the upper
    end, chosen."""

    @model_validator(mode="after")
    def _check(self) -> LivenessSpec:
        v: list[Violation] = []
        if not self.probe_period_s < self.probe_deadline_s <= self.probe_grace_s:
            v.append(
                Violation(
                    "liveness.probes_nest",
                    "probe_deadline_s",
                    f"probe timings must nest period < deadline <= grace (T1 §7: 30 < 120 <= 600 s); "
                    f"got period {self.probe_period_s}, deadline {self.probe_deadline_s}, grace "
                    f"{self.probe_grace_s}: reorder them",
                )
            )
        lo, hi = COLLECTIVE_TIMEOUT_RANGE_S
        if not lo <= self.collective_timeout_s <= hi:
            v.append(
                Violation(
                    "liveness.collective_timeout_range",
                    "collective_timeout_s",
                    f"collective_timeout_s {self.collective_timeout_s:g} s lies outside the 30-120 min "
                    "regime of re-created collective groups (T1 §7.3: a multi-minute collective copy is "
                    "legitimate, an interactive-latency deadline misreads it as a failure): set it within "
                    f"[{lo:g}, {hi:g}] s",
                )
            )
        raise_if(v)
        return self
