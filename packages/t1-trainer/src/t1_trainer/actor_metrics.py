"""The ``actor/*`` metrics every trainer backend's actor update reports (T1 §4.3, §4.5, Fig. 6).

Shared by `t1_trainer.torch_backend.TorchBackend` and `t1_trainer.megatron.backend.MegatronBackend`, so the
two backends name and aggregate their actor metrics the same way.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__: list[str] = []  # private helpers of the backends; re-exported by t1_trainer.torch_backend


def _actor_summary(
    routing_replay: bool,
    norms: Sequence[float],
    gap_sum: float,
    n_tok: int,
    errors: dict[int, str],
    t0: float,
    live: tuple[float, int, int, int, float] | None,
) -> dict[str, Any]:
    """The ``actor/*`` step metrics every backend's ``update_actor`` ends with (T1 §4.3, Fig. 6).

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


class _MetricAcc:
    """Token-weighted aggregation of per-sample policy metrics over one pass."""

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
        self.loss += loss
        self.n += n
        for k in self.sums:
            self.sums[k] += met[k] * n
        if n:
            self.rmin, self.rmax = min(self.rmin, met["ratio_min"]), max(self.rmax, met["ratio_max"])

    def result(self) -> dict[str, float]:
        d = max(self.n, 1)
        res = {"actor/policy_loss": self.loss, **{f"actor/{k}": v / d for k, v in self.sums.items()}}
        res["actor/ratio_min"] = self.rmin if self.n else 1.0
        res["actor/ratio_max"] = self.rmax if self.n else 1.0
        return res
