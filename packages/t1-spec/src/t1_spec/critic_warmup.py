"""Critic warm-up: regress the critic on returns before any policy step (T1 §4.5, Fig. 7)."""

from __future__ import annotations

from pydantic import Field

from t1_spec._base import Spec
from t1_spec.pool import PoolSpec


class CriticWarmupSpec(Spec):
    """Train the critic alone before the first actor update.

    In the paper the production critic comes from one epoch of warm-up over TMax-15k; the cold-started critic
    opened at explained variance -33.6 and stayed negative for 30 of 58 logged steps, the warmed one stayed in
    0.71-0.86 (T1 §4.5, Fig. 7).
    """

    enabled: bool = True
    """Run the warm-up phase before PPO. On in the paper's production run (T1 §4.5)."""

    pool: PoolSpec | None = None
    """Tasks the warm-up rolls out on; ``None`` = the recipe's own pool. TMax-15k in the paper (T1 §4.5)."""

    epochs: int = Field(default=1, gt=0)
    """Passes over the warm-up pool (epochs). 1 (T1 §4.5). The warm-up rolls out ceil(pool size x epochs /
    tasks per step) batches with the initial policy (tasks per step: ``rollout.launched /
    ppo.samples_per_task``), each in the pool's seeded per-epoch order, so every task of the pool is drawn
    ``epochs`` times; each batch takes one critic-only update (``ppo.ppo_epochs`` passes) and the actor is
    not touched until the last is done. Every warm-up row logs the explained variance per token and per
    trajectory before and after its update."""
