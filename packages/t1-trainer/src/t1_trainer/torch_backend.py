"""Torch trainer backend: the actor with R3 replay, a full-size critic, AdamW, packed micro-batches.

The actor is the policy (a `Qwen3_5MoeForCausalLM` with the engine's initial weights); the critic is a second
copy of the same architecture whose LM head is replaced by a scalar value head (T1 §4.5, full-size critic),
initialised from the same base weights. In the actor's forward, `t1_r3.replay_routing` replays the sampler's
recorded experts (T1 §4.3, R3); the critic never replays routing (T1 appendix: it runs at its own TopK).
The update (passes, micro-batches, metrics, the gap's cadence) is the shared loop of `t1_trainer.update`; this
module supplies its hooks (`t1_trainer.update.UpdateBackend`) on plain torch modules and AdamW. A micro-batch
is one sample, or with ``ppo.micro_batch_size > 1`` several packed in one variable-length row
(`t1_trainer.packing`; the hook `TorchBackend.packed`).

Memory: the vocabulary is 248,320, so fp32 logits cost about 1 MB per token. Log-probs are computed only at
loss positions, in chunks of `LOGIT_CHUNK` rows whose logits are recomputed in the backward pass
(`t1_trainer.logprobs`), so a sample's logit memory is one chunk (~250 MB), not T MB.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import torch
from torch import nn

from t1_policy import Critic, num_real_tokens
from t1_spec import ModelSpec, PPOSpec, Recipe
from t1_trainer import update
from t1_trainer.base import OldLogprobs
from t1_trainer.checks import torch_preflight, unbuilt_ppo
from t1_trainer.errors import TrainerConfigError
from t1_trainer.logprobs import lm_head_logprobs
from t1_trainer.mismatch import StateDict, snapshot, swapped_weights
from t1_trainer.optim import adamw, clip_and_step
from t1_trainer.packing import PackedSamples, forward_scope, micro_batches
from t1_trainer.samples import (
    TrainSample,
    check_sample,
    loss_mask_tensor,
    routing_array,
    token_tensor,
)
from t1_trainer.update import Network

__all__ = [
    "Critic",
    "TorchBackend",
    "loss_token_logprobs",
]  # Critic re-exported from t1_policy, where it lives


def loss_token_logprobs(
    actor: nn.Module, ids: torch.Tensor, pos: torch.Tensor, temperature: float, vocab_limit: int
) -> torch.Tensor:
    """Log-probs ``[n_loss]`` float32 of ``ids[pos]`` under ``actor``: trunk forward, then the chunked head.

    Args:
        actor: the policy (``.model`` is the trunk, ``.lm_head`` the head).
        ids: token ids ``[T]`` int64.
        pos: loss positions ``[n_loss]`` int64, each >= 1 (the state before token j scores token j).
        temperature: the engine's sampling temperature.
        vocab_limit: the real vocabulary (`t1_policy.num_real_tokens`).
    """
    hidden = actor.model(input_ids=ids[None, :], use_cache=False).last_hidden_state[0]
    return lm_head_logprobs(
        hidden[pos - 1], actor.lm_head.weight, ids[pos], temperature=temperature, vocab_limit=vocab_limit
    )


class TorchBackend:
    """PPO backend on one torch device (CPU or one GPU), micro-batches of one sample or packed rows.

    Registered as ``trainer.backend: torch`` (`t1_trainer.base.TRAINER_BACKENDS`); the run builds it with
    `from_spec` after `preflight` found nothing it cannot run.

    Args:
        model_spec: the recipe's model section (architecture of actor and critic).
        ppo_spec: the recipe's PPO section (learning rates, clips, Adam settings, replay, passes).
        seed: weight seed; the actor is ``t1_policy.build_model(model_spec, seed=seed)``, the same weights the
            embedded engine starts from.
        device: torch device string.
        actor: an already-built policy to train instead (its weights must equal the sampler's); the backend
            owns it from now on.
        temperature: the engine's sampling temperature, at which rollout log-probs were scored.
        logprob_gap_every: measure the log-prob gap with live routing and the routing flip fraction every
            this many actor updates, the first included (one extra no-grad actor forward per sample on those
            steps only; T1 §4.3, Fig. 6 compares 0.013 with replay against 0.021 without); 0 = never.

    Raises:
        TrainerConfigError: a PPO setting this backend does not build, one line per setting as `preflight`
            words it (advantage normalization, a KL or load-balancing loss).
    """

    def __init__(
        self,
        *,
        model_spec: ModelSpec,
        ppo_spec: PPOSpec,
        seed: int,
        device: str = "cpu",
        actor: nn.Module | None = None,
        temperature: float = 1.0,
        logprob_gap_every: int = 0,
    ) -> None:
        unbuilt = unbuilt_ppo(ppo_spec)
        if unbuilt:
            raise TrainerConfigError(
                "the torch trainer cannot run this PPO spec:\n  - " + "\n  - ".join(unbuilt)
            )
        self.ppo = ppo_spec
        if actor is None:
            from t1_policy import build_model

            actor = build_model(model_spec, seed=seed)
        self.device = torch.device(device)
        self.actor = actor.to(self.device)
        if float(getattr(self.actor.config, "router_aux_loss_coef", 0.0)) != 0.0:
            # The HF model only adds it when labels are passed (we never do); zero it so no path can.
            self.actor.config.router_aux_loss_coef = 0.0
        self.critic = Critic(
            copy.deepcopy(self.actor.model),
            self.actor.config.hidden_size,
            seed=seed + 1,
            init=ppo_spec.value_head_init,
        )
        self.critic.to(self.device)
        self.temperature = float(temperature)
        if logprob_gap_every < 0:
            raise TrainerConfigError(f"logprob_gap_every={logprob_gap_every} must be >= 0 (0 = never)")
        self.logprob_gap_every = int(logprob_gap_every)
        self.actor_updates = 0  # update_actor calls so far: the step counter of the gap's cadence
        self.vocab_limit = num_real_tokens(self.actor.config.vocab_size)
        self.actor_opt = adamw(self.actor, ppo_spec.actor_lr, ppo_spec)
        self.critic_opt = adamw(self.critic, ppo_spec.critic_lr, ppo_spec)
        self.version = 0  # actor optimizer steps taken
        self.policy_version = 0  # publications of the actor so far (set by publish_weights; T1 Appendix 12)
        self.behaviour_weights: tuple[int, dict[str, torch.Tensor]] | None = None  # (version, CPU copy)

    @property
    def gap_without_replay(self) -> bool:
        """Whether the live-routing gap is measured at all (``logprob_gap_every > 0``)."""
        return self.logprob_gap_every > 0

    def gap_due(self, step: int) -> bool:
        """Whether actor update ``step`` (0-based) measures the live-routing gap: steps 0, k, 2k, ...

        Never with ``ppo.routing_replay`` off: the step's one forward already routes live.
        """
        return update.gap_due(self.ppo, self.logprob_gap_every, step)

    @classmethod
    def from_spec(
        cls, recipe: Recipe, *, actor: nn.Module | None = None, gap_without_replay: bool = True
    ) -> TorchBackend:
        """Builds the backend of a recipe: its model, PPO section, seed, ``trainer.device`` and temperature.

        Args:
            recipe: the validated recipe (``trainer.backend: torch``).
            actor: the policy to train, e.g. a deep copy of the engine's model so the two hold separate
                weights (the caller copies; the backend owns what it is given). None builds it from
                ``recipe.model`` with ``recipe.seed`` in ``recipe.model.dtype``, the weights the engine
                starts from.
            gap_without_replay: also score with live routing every ``trainer.logprob_gap_every`` steps, so
                the run shows what R3 removes (T1 §4.3, Fig. 6: 0.021 -> 0.013); False = never.

        Returns:
            The backend; rollout log-probs are taken to be scored at ``engine.sampling.temperature``.

        Raises:
            TrainerConfigError: see the class.
        """
        if actor is None:
            from t1_policy import build_model

            actor = build_model(recipe.model, seed=recipe.seed, dtype=getattr(torch, recipe.model.dtype))
        return cls(
            model_spec=recipe.model,
            ppo_spec=recipe.ppo,
            seed=recipe.seed,
            device=recipe.trainer.device,
            actor=actor,
            temperature=recipe.engine.sampling.temperature,
            logprob_gap_every=recipe.trainer.logprob_gap_every if gap_without_replay else 0,
        )

    @classmethod
    def preflight(cls, recipe: Recipe) -> list[str]:
        """What this backend cannot run of ``recipe`` on this machine, one line each (empty: runnable).

        `t1_trainer.checks.torch_preflight`, which says what it checks; it lives in a module without torch so
        that the registry's light check (`TRAINER_BACKENDS`) gives these lines without importing this one.
        """
        return torch_preflight(recipe)

    # ---- routing ----

    def routing_errors(self, samples: Sequence[TrainSample]) -> dict[int, str]:
        """Checks every sample's routing record against its tokens and the actor, without a forward.

        Returns:
            ``{index: message}`` for each sample that must be aborted (missing record, rows != T - 1, layer
            count / top-k / expert ids that do not fit the model); empty when replay is off. The one check
            of `t1_trainer.shard_plan.geometry_routing_errors`, against this actor's routers.
        """
        if not self.ppo.routing_replay:
            return {}
        from t1_trainer.shard_plan import geometry_routing_errors, router_geometry

        return geometry_routing_errors(samples, router_geometry(self.actor))

    # ---- critic ----

    @torch.no_grad()
    def values(self, samples: Sequence[TrainSample]) -> list[np.ndarray]:
        """Pre-update critic values ``V_{phi_{t-1}}(s_j)``, float32 ``[T]`` per sample (T1 appendix).

        The critic runs with live routing (it never replays). ``values[0]`` is 0. Micro-batches as the
        update's (`t1_trainer.packing.micro_batches`): packed rows with ``ppo.micro_batch_size > 1``.
        """
        self.critic.eval()
        for s in samples:
            check_sample(s)
        out: list[np.ndarray] = []
        for mb in micro_batches(samples, range(len(samples)), self.ppo):
            with forward_scope(self, "critic", mb.unit, replay=False):
                values = mb.values(self.critic(token_tensor(mb.unit, self.device)))
            out.extend(v.cpu().numpy().astype(np.float32) for v in mb.split_tokens(values))
        return out

    def update_critic(
        self,
        samples: Sequence[TrainSample],
        returns: Sequence[np.ndarray],
        old_values: Sequence[np.ndarray],
    ) -> dict[str, float]:
        """Regress the critic on the returns, value clip around ``old_values`` (`t1_trainer.update`)."""
        return update.update_critic(self, samples, returns, old_values)

    # ---- actor ----

    def update_actor(
        self,
        samples: Sequence[TrainSample],
        advantages: Sequence[np.ndarray],
        *,
        old_logprobs: OldLogprobs = "recomputed",
    ) -> dict[str, Any]:
        """Clipped-surrogate update with R3 replay; `t1_trainer.update.update_actor` says what and returns.

        Of the Eq. 25 split, this backend decomposes one-version-stale samples too: on the step before a
        gap step it keeps a CPU copy of the pre-update actor (`snapshot_actor`) and scores them with it.
        """
        return update.update_actor(self, samples, advantages, old_logprobs=old_logprobs)

    def logprob_gap(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """The train-inference gap with and without replay, no update (`t1_trainer.update.logprob_gap`)."""
        return update.logprob_gap(self, samples)

    def export_weights(self) -> dict[str, torch.Tensor]:
        """Actor weights for the engine, state_dict names, detached (sharing storage with the live actor)."""
        return {k: v.detach() for k, v in self.actor.state_dict().items()}

    # ---- the hooks of the shared update loop (t1_trainer.update.UpdateBackend) ----

    def running(self, network: Network) -> AbstractContextManager[None]:
        """Nothing to arrange: both networks live on ``device`` throughout."""
        return nullcontext()

    def critic_values(self, sample: TrainSample) -> torch.Tensor:
        """Critic values ``[T]`` float32 with grad (live routing, ``values[0] = 0``)."""
        return self.critic(token_tensor(sample, self.device))

    def actor_logprobs(self, sample: TrainSample) -> torch.Tensor:
        """Log-probs of the sample's loss tokens under the current actor, ``[n_loss]`` float32, with grad.

        Scored exactly as the engine scores them (`t1_policy.token_logprobs`, same temperature, same
        vocabulary limit), through `t1_trainer.logprobs.lm_head_logprobs` (chunked, logits recomputed in the
        backward, so memory does not grow with the vocabulary x length). Routing is whatever the
        caller set: live, or replayed inside `replayed` (run ``backward`` inside it).
        """
        ids = token_tensor(sample, self.device)
        pos = torch.nonzero(loss_mask_tensor(sample, self.device)).flatten()  # loss positions j >= 1
        return loss_token_logprobs(self.actor, ids, pos, self.temperature, self.vocab_limit)

    def replayed(self, sample: TrainSample | PackedSamples) -> AbstractContextManager[Any]:
        """`t1_r3.replay_routing` of the sample's record into the actor (T1 §4.3) for the body.

        A `t1_trainer.packing.PackedSamples` replays each sample's record on its own tokens
        (`t1_r3.replay_routing_packed`).
        """
        from t1_r3 import replay_routing, replay_routing_packed

        if isinstance(sample, PackedSamples):
            return replay_routing_packed(self.actor, [routing_array(s.routing) for s in sample.samples])
        return replay_routing(self.actor, routing_array(sample.routing))

    def packed(self, network: Network, pack: PackedSamples) -> AbstractContextManager[None]:
        """``network``'s forwards in the body run ``pack``'s row as its samples (`t1_policy.varlen`).

        Positions restart per sample; full attention, the Gated DeltaNet conv and scan never cross a sample.
        The critic's forward over the row's first ``N - 1`` tokens is covered too.
        """
        from t1_policy.varlen import varlen_forward

        trunk = self.actor.model if network == "actor" else self.critic.body
        return varlen_forward(trunk, pack.lengths)

    @torch.no_grad()
    def live_routing(self, sample: TrainSample) -> tuple[torch.Tensor, np.ndarray]:
        """One no-grad forward at live TopK: log-probs ``[n_loss]``, routed experts ``[T, L, k]`` (int)."""
        from t1_r3 import capture_routing

        with capture_routing(self.actor) as rec:  # outside any replay context: live TopK
            live = self.actor_logprobs(sample)
        return live, rec.rows()

    def backward(self, loss: torch.Tensor, network: Network) -> None:
        """``loss.backward()``."""
        loss.backward()

    def zero_grad(self, network: Network) -> None:
        """Drops the network's gradients (set to None)."""
        self._opt(network).zero_grad(set_to_none=True)

    def optimizer_step(self, network: Network) -> float:
        """`t1_trainer.optim.clip_and_step` on the network's AdamW; returns the grad norm before clipping."""
        model = self.actor if network == "actor" else self.critic
        return clip_and_step(model, self._opt(network), self.ppo.max_grad_norm, network)

    def snapshot_actor(self) -> StateDict:
        """A CPU copy of the actor's weights (`t1_trainer.mismatch.snapshot`)."""
        return snapshot(self.actor)

    def swapped_actor(self, state: StateDict) -> AbstractContextManager[None]:
        """`t1_trainer.mismatch.swapped_weights` on the actor."""
        return swapped_weights(self.actor, state)

    def _opt(self, network: Network) -> torch.optim.Optimizer:
        return self.actor_opt if network == "actor" else self.critic_opt
