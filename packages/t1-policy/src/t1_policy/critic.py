"""The value model's trunk: the policy's decoder stack with a scalar value head (T1 §4.5).

PPO's critic in T1 is full-size: the same architecture as the actor, initialised from the same weights, with
a linear head in place of the language-model head. It lives beside the policy so that every trainer backend
builds the same critic.
"""

from __future__ import annotations

from typing import get_args

import torch
from torch import nn

from t1_spec import PPOSpec

VALUE_HEAD_INITS: tuple[str, ...] = get_args(PPOSpec.model_fields["value_head_init"].annotation)
"""The value-head initialisations `value_head_weight` draws: those ``ppo.value_head_init`` accepts."""


def value_head_weight(hidden_size: int, *, seed: int, init: str = "normal") -> torch.Tensor:
    """The critic's value-head weight ``[1, h]`` float32, as every trainer backend draws it (T1 §4.5).

    Args:
        hidden_size: the trunk's width h.
        seed: seeds the draw of ``normal``.
        init: ``normal`` (``normal(0, 1/(h+1))``, OpenRLHF's and SkyRL's value head: values near 0 with a
            per-token std of about ``1/sqrt(h)``) or ``zeros`` (every initial value exactly 0).

    Raises:
        ValueError: another ``init``.
    """
    if init == "zeros":
        return torch.zeros(1, hidden_size)
    if init != "normal":
        raise ValueError(f"value head init {init!r}: expected one of {VALUE_HEAD_INITS}")
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(1, hidden_size, generator=gen) / (hidden_size + 1)


class Critic(nn.Module):
    """Full-size critic: the policy's decoder stack plus a scalar value head (T1 §4.5).

    ``V(s_j)``, the value of the state before token j, is read from the hidden state at position j - 1 (the
    same position whose logits score token j), so ``values[0] = 0`` (position 0 never carries loss).

    Args:
        body: the decoder (`Qwen3_5MoeTextModel`, ``actor.model``), copied by the caller.
        hidden_size: its width h.
        seed: draws the value head (`value_head_weight`).
        init: ``normal`` (``normal(0, 1/(h+1))``, the value-head init of OpenRLHF and SkyRL) or ``zeros``
            (``ppo.value_head_init``).

    Raises:
        ValueError: an unknown ``init``.
    """

    def __init__(self, body: nn.Module, hidden_size: int, *, seed: int, init: str = "normal") -> None:
        super().__init__()
        self.body = body
        self.value_head = nn.Linear(hidden_size, 1, bias=False)
        with torch.no_grad():
            w = value_head_weight(hidden_size, seed=seed, init=init)
            self.value_head.weight.copy_(w.to(self.value_head.weight.dtype))

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Values ``[T]`` float32 of one sample ``token_ids [T]`` (``values[0] = 0``)."""
        hidden = self.body(input_ids=token_ids[None, :-1], use_cache=False).last_hidden_state[0]
        v = self.value_head(hidden).squeeze(-1).float()
        return torch.cat([v.new_zeros(1), v])
