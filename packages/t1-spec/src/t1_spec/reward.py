"""Reward: how a verifier report becomes a scalar (T1 §5.2, §5)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from t1_spec._base import Spec


class DenseRewardSpec(Spec):
    """Dense reward ``r = P / S``: passing assertions over a fixed global scale (T1 §5.2, Eq. 20)."""

    kind: Literal["dense"] = "dense"
    """Discriminator: the dense per-assertion reward, the paper's default."""

    scale: int = Field(default=20, ge=1)
    """S: fixed global scale (assertions). 20, near the 90th percentile of assertion counts in T1-15k (median
    4, max about 35), never changed during a run so the critic's target stays comparable across steps
    (T1 §5.2)."""

    fallback: Literal["binary"] = "binary"
    """What a trial scores when its per-assertion report is missing or unparsable: the binary task outcome,
    tagged with the cause (T1 §5.2)."""


class RatioRewardSpec(Spec):
    """Ratio reward ``r = max(b, c * P / T)`` clamped to ``[0, max(1, b)]``, kept for comparison (T1 §5)."""

    kind: Literal["ratio"] = "ratio"
    """Discriminator: the pass-ratio variant."""

    coefficient: float = Field(default=0.4, gt=0, le=1)
    """c: weight of the passing ratio P / T against the binary outcome b (fraction). 0.4 in the paper (T1 §5).
    """


class BinaryRewardSpec(Spec):
    """Binary reward: 1 when the task is solved, else 0 (TMax-15k only supports this, T1 §3.1)."""

    kind: Literal["binary"] = "binary"
    """Discriminator: the task-solved outcome."""


RewardSpec = Annotated[DenseRewardSpec | RatioRewardSpec | BinaryRewardSpec, Field(discriminator="kind")]
"""The reward section, selected by ``kind: dense | ratio | binary``."""
