"""The train/rollout mismatch split into its kernel and version terms (T1 Appendix 12, Eq. 25).

For a loss token ``y_j`` of a sample drawn by version ``b`` and trained by the trainer at version ``v``::

    log pi^t_v(y_j) - log pi^r_b(y_j)
        = [log pi^t_v(y_j) - log pi^t_b(y_j)]      version term: the weights that moved since b
        + [log pi^t_b(y_j) - log pi^r_b(y_j)]      kernel term: trainer vs engine numerics at b (R3 replayed)

``pi^t`` is the trainer's log-prob (its kernels, routing replayed), ``pi^r`` the engine's. At staleness 0
(``b = v``) the version term is 0 and the kernel term is the trainer's pre-update recomputation against the
rollout. At staleness 1 the kernel term needs the trainer's log-probs under ``theta_b``, weights the trainer
no longer holds: the torch backend keeps a CPU copy of its pre-update actor from the previous step
(`snapshot`) when it measures the live-routing gap (``trainer.logprob_gap_every > 0``) and scores the stale
samples with it (`swapped_weights`); a sample older than that copy, or mixing versions, is not decomposed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

__all__ = ["mismatch_terms", "snapshot", "swapped_weights"]

StateDict = dict[str, torch.Tensor]


def snapshot(model: nn.Module) -> StateDict:
    """A CPU copy of ``model``'s weights (detached, independent of later updates)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


@contextmanager
def swapped_weights(model: nn.Module, state: StateDict) -> Iterator[None]:
    """Runs the body with ``state`` loaded into ``model``, then puts the model's own weights back.

    Weights are copied in place (`load_state_dict`), so parameters keep their identity and an optimizer
    holding them is unaffected.
    """
    own = snapshot(model)
    model.load_state_dict(state)
    try:
        yield
    finally:
        model.load_state_dict(own)


def mismatch_terms(
    entries: Sequence[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, int]],
) -> dict[str, float]:
    """Mean absolute kernel and version terms of Eq. 25 over the loss tokens that can be decomposed.

    Args:
        entries: per sample ``(trainer, behaviour, rollout, staleness)``: float ``[n]`` log-probs of its loss
            tokens under the trainer's weights before this update (``pi^t_v``), under the trainer's copy of
            the behaviour version's weights (``pi^t_b``; None when not available), and the engine's
            (``pi^r_b``); ``staleness = v - b``.

    Returns:
        ``actor/mismatch_kernel`` (mean ``|log pi^t_b - log pi^r_b|``, nats), ``actor/mismatch_version``
        (mean ``|log pi^t_v - log pi^t_b|``, nats), both over the decomposed tokens (NaN when none), and
        ``actor/mismatch_decomposed_fraction`` (share of the loss tokens decomposed): a staleness-0 sample
        always is (version term 0, kernel term ``|pi^t_v - pi^r_v|``), an older one only with ``behaviour``.
    """
    kernel = version = 0.0
    done = total = 0
    for trainer, behaviour, rollout, staleness in entries:
        n = int(trainer.numel())
        total += n
        if staleness == 0:
            kernel += float((trainer.float() - rollout.float()).abs().sum())
        elif behaviour is not None:
            kernel += float((behaviour.float() - rollout.float()).abs().sum())
            version += float((trainer.float() - behaviour.float()).abs().sum())
        else:
            continue
        done += n
    nan = float("nan")
    return {
        "actor/mismatch_kernel": kernel / done if done else nan,
        "actor/mismatch_version": version / done if done else nan,
        "actor/mismatch_decomposed_fraction": done / total if total else nan,
    }
