"""The ``actor/*`` metrics every trainer backend's actor update reports (T1 §4.3, §4.5, Fig. 6).

Used by the one update loop (`t1_trainer.update`) that both backends run, so every backend names and
aggregates its actor metrics the same way.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["PassMetrics", "actor_summary"]


def actor_summary(
    routing_replay: bool,
    norms: Sequence[float],
    gap_sum: float,
    n_tok: float,
    errors: dict[int, str],
    t0: float,
    live: tuple[float, int, int, int, float] | None,
) -> dict[str, Any]:
    """The ``actor/*`` step metrics every actor update ends with (T1 §4.3, Fig. 6).

    Args:
        routing_replay: ``ppo.routing_replay``; names the key of the step's own gap
            (``actor/logprob_gap_replay`` with replay, else ``actor/logprob_gap_no_replay``).
        norms: the actor's gradient norm per optimizer step (dimensionless); their mean is logged.
        gap_sum: sum of ``|log p_trainer - log p_rollout|`` (nats) over the loss tokens of the first epoch.
        n_tok: loss tokens of the first epoch (tokens); the gaps and fractions are means over them.
        errors: sample index -> routing error of the samples aborted (logged in index order).
        t0: ``time.perf_counter()`` at the start of the update (seconds).
        live: on a live-routing measurement step, ``(gap_sum, flipped_tokens, flipped_token_layers,
            moe_layers, seconds)`` of the extra no-replay forward; None on other steps.

    Returns:
        The metrics; NaN for a mean over zero tokens.
    """
    nan = float("nan")
    gap_key = "actor/logprob_gap_replay" if routing_replay else "actor/logprob_gap_no_replay"
    out: dict[str, Any] = {
        "actor/grad_norm": float(np.mean(norms)) if norms else 0.0,
        gap_key: gap_sum / n_tok if n_tok else nan,
        "samples_aborted_routing": len(errors),
        "routing_errors": [errors[i] for i in sorted(errors)],
        "actor/loss_tokens": int(n_tok),
        "actor/time_s": time.perf_counter() - t0,
    }
    if live is not None:
        gap_nr, flips, flip_pairs, moe_layers, gap_time = live
        out["actor/logprob_gap_no_replay"] = gap_nr / n_tok if n_tok else nan
        out["actor/routing_flip_fraction"] = flips / n_tok if n_tok else nan
        pairs = n_tok * moe_layers
        out["actor/routing_flip_fraction_layers"] = flip_pairs / pairs if pairs else nan
        out["actor/gap_time_s"] = gap_time
    return out


class PassMetrics:
    """Token-weighted aggregation of the per-sample policy metrics of one pass over the batch.

    `add` takes each micro-batch's loss, its `t1_trainer.algorithms.ppo_policy_loss` metrics and its loss
    tokens; `result` gives ``actor/policy_loss`` (the sum: each loss is already a share of the batch's
    token mean) and the token-weighted means of the rest, ratio extremes over the pass.
    """

    def __init__(self) -> None:
        self.loss = 0.0
        self.n = 0
        self.sums: dict[str, float] = {
            "clip_fraction": 0.0,
            "approx_kl": 0.0,
            "approx_kl_k3": 0.0,
            "ratio_mean": 0.0,
        }
        self.rmin, self.rmax = float("inf"), float("-inf")

    def add(self, loss: float, met: dict[str, float], n: int) -> None:
        """Adds one micro-batch: its loss, its ``ppo_policy_loss`` metrics, its ``n`` loss tokens."""
        self.loss += loss
        self.n += n
        for k in self.sums:
            self.sums[k] += met[k] * n
        if n:
            self.rmin, self.rmax = min(self.rmin, met["ratio_min"]), max(self.rmax, met["ratio_max"])

    def result(self) -> dict[str, float]:
        """The pass's ``actor/*`` metrics; ratio extremes 1.0 for a pass over no tokens."""
        d = max(self.n, 1)
        res = {"actor/policy_loss": self.loss, **{f"actor/{k}": v / d for k, v in self.sums.items()}}
        res["actor/ratio_min"] = self.rmin if self.n else 1.0
        res["actor/ratio_max"] = self.rmax if self.n else 1.0
        return res
