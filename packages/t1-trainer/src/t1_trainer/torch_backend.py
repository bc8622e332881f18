"""Torch trainer backend: the actor with R3 replay, a full-size critic, AdamW, micro-batches of one sample.

The actor is the policy (a `Qwen3_5MoeForCausalLM` with the engine's initial weights); the critic is a second
copy of the same architecture whose LM head is replaced by a scalar value head (T1 §4.5, full-size critic),
initialised from the same base weights. In the actor's forward, `t1_r3.replay_routing` replays the sampler's
recorded experts (T1 §4.3, R3); the critic never replays routing (T1 appendix: it runs at its own TopK).

Memory: the vocabulary is 248,320, so fp32 logits cost about 1 MB per token. Log-probs are computed only at
loss positions, in chunks of `LOGIT_CHUNK` rows whose logits are recomputed in the backward pass
(`t1_trainer.logprobs`), so a sample's logit memory is one chunk (~250 MB), not T MB.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import numpy as np
import torch
from torch import nn

from t1_policy import Critic
from t1_spec import ModelSpec, PPOSpec, Recipe
from t1_trainer.actor_metrics import _actor_summary, _MetricAcc
from t1_trainer.algorithms import explained_variances, ppo_policy_loss, value_loss
from t1_trainer.base import OldLogprobs
from t1_trainer.checks import torch_preflight
from t1_trainer.checks import unbuilt_ppo as _unbuilt_ppo
from t1_trainer.errors import NonFiniteUpdateError, TrainerConfigError
from t1_trainer.logprobs import lm_head_logprobs
from t1_trainer.mismatch import mismatch_terms, snapshot, swapped_weights
from t1_trainer.off_policy import OFF_POLICY_CORRECTIONS
from t1_trainer.samples import TrainSample, check_sample, sample_name

__all__ = ["Critic", "TorchBackend"]  # Critic re-exported from t1_policy, where it lives


class TorchBackend:
    """PPO backend on one torch device (CPU or one GPU), micro-batches of one sample.

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
            words it (advantage normalization, a KL or load-balancing loss, ``micro_batch_size > 1``).
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
        unbuilt = _unbuilt_ppo(ppo_spec)
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
        self.vocab_limit = _vocab_limit(self.actor.config.vocab_size)
        self.actor_opt = _adamw(self.actor, ppo_spec.actor_lr, ppo_spec)
        self.critic_opt = _adamw(self.critic, ppo_spec.critic_lr, ppo_spec)
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
        k = self.logprob_gap_every
        return bool(self.ppo.routing_replay and k and step % k == 0)

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
            count / top-k / expert ids that do not fit the model); empty when replay is off.
        """
        if not self.ppo.routing_replay:
            return {}
        from t1_r3 import RoutingMismatchError, check_routing, replay_routing

        errors: dict[int, str] = {}
        for i, s in enumerate(samples):
            name = sample_name(s)
            if s.routing is None:
                errors[i] = f"sample {name}: routing record missing; R3 cannot replay it (T1 §4.3: aborted)"
                continue
            try:
                routing = _as_routing(s.routing)
                check_routing(routing, num_tokens=len(s.token_ids))
                with replay_routing(self.actor, routing):
                    pass  # entering validates layers, top-k and expert ids against the model
            except RoutingMismatchError as e:
                errors[i] = f"sample {name}: {e} (aborted)"
        return errors

    # ---- critic ----

    @torch.no_grad()
    def values(self, samples: Sequence[TrainSample]) -> list[np.ndarray]:
        """Pre-update critic values ``V_{phi_{t-1}}(s_j)``, float32 ``[T]`` per sample (T1 appendix).

        The critic runs with live routing (it never replays). ``values[0]`` is 0.
        """
        self.critic.eval()
        out = []
        for s in samples:
            check_sample(s)
            out.append(self.critic(_ids(s, self.device)).cpu().numpy().astype(np.float32))
        return out

    def update_critic(
        self,
        samples: Sequence[TrainSample],
        returns: Sequence[np.ndarray],
        old_values: Sequence[np.ndarray],
    ) -> dict[str, float]:
        """Regress the critic on the returns with the value clip around the pre-update values (T1 §4.5).

        ``ppo_epochs`` passes; each accumulates every sample's gradient (token-mean over the batch's loss
        tokens) and takes one AdamW step after clipping the global grad norm.

        Args:
            samples: the batch.
            returns: float ``[T]`` per sample (GAE returns; 0 at masked positions).
            old_values: float ``[T]`` per sample, from `values` before any update this step.

        Returns:
            ``critic/value_loss`` (first pass, i.e. at the pre-update critic), ``critic/value_loss_last``
            (last pass), ``critic/value_clip_fraction``, ``critic/grad_norm`` (mean over passes, before
            clipping), ``critic/ev_token_post`` and ``critic/ev_trajectory_post`` (explained variance, T1
            Eq. 19, of the updated critic against the same returns, per loss token and per trial,
            `t1_trainer.algorithms.explained_variances`; one extra no-grad critic forward per sample, timed in
            ``critic/ev_post_time_s``), ``critic/time_s`` (all of it).
        """
        t0 = time.perf_counter()
        self.critic.train()
        masks = [_mask(s, self.device) for s in samples]
        n_tok = float(sum(int(m.sum()) for m in masks))
        first: dict[str, float] = {}
        last_loss, norms = 0.0, []
        for epoch in range(self.ppo.ppo_epochs):
            self.critic_opt.zero_grad(set_to_none=True)
            total, clipped = 0.0, 0.0
            for s, m, ret, old in zip(samples, masks, returns, old_values, strict=True):
                v = self.critic(_ids(s, self.device))
                loss, met = value_loss(
                    v,
                    torch.as_tensor(old, device=self.device),
                    torch.as_tensor(ret, device=self.device),
                    m,
                    value_clip=self.ppo.value_clip,
                    num_tokens=n_tok,
                )
                loss.backward()
                total += loss.item()
                clipped += met["value_clip_fraction"] * float(m.sum())
            norms.append(_step(self.critic, self.critic_opt, self.ppo.max_grad_norm, "critic"))
            if epoch == 0:
                first = {"critic/value_loss": total, "critic/value_clip_fraction": clipped / max(n_tok, 1.0)}
            last_loss = total
        t_post = time.perf_counter()
        ev_token_post, ev_trajectory_post = explained_variances(samples, self.values(samples), returns)
        return {
            **first,
            "critic/value_loss_last": last_loss,
            "critic/grad_norm": float(np.mean(norms)),
            "critic/ev_token_post": ev_token_post,
            "critic/ev_trajectory_post": ev_trajectory_post,
            "critic/ev_post_time_s": time.perf_counter() - t_post,
            "critic/time_s": time.perf_counter() - t0,
        }

    # ---- actor ----

    def actor_logprobs(self, sample: TrainSample) -> torch.Tensor:
        """Log-probs of the sample's loss tokens under the current actor, ``[n_loss]`` float32, with grad.

        Scored exactly as the engine scores them (`t1_policy.token_logprobs`, same temperature, same
        vocabulary limit), through `t1_trainer.logprobs.lm_head_logprobs` (chunked, logits recomputed in the
        backward, so memory does not grow with the vocabulary x length). Routing is whatever the
        caller set: live, or replayed when called inside `t1_r3.replay_routing` (run ``backward`` inside it).
        """
        ids = _ids(sample, self.device)
        pos = torch.nonzero(_mask(sample, self.device)).flatten()  # loss positions j >= 1
        hidden = self.actor.model(input_ids=ids[None, :], use_cache=False).last_hidden_state[0]
        # the state before token j scores token j
        return lm_head_logprobs(
            hidden[pos - 1],
            self.actor.lm_head.weight,
            ids[pos],
            temperature=self.temperature,
            vocab_limit=self.vocab_limit,
        )

    def _replay(self, sample: TrainSample) -> Any:
        if not self.ppo.routing_replay:
            return nullcontext()
        from t1_r3 import replay_routing

        return replay_routing(self.actor, _as_routing(sample.routing))

    @torch.no_grad()
    def _live_gap(self, sample: TrainSample) -> tuple[float, int, int, int]:
        """One no-grad actor forward with live routing, compared with the rollout and its routing record.

        Returns:
            ``(sum |log p_live - log p_rollout| over loss tokens, loss tokens whose scoring position routes
            to another expert set than recorded in at least one MoE layer, such (token, layer) pairs, MoE
            layers)``; the flip counts are 0 when the sample has no routing record.
        """
        from t1_r3 import capture_routing

        mask = _mask(sample, self.device)
        pos = torch.nonzero(mask).flatten()
        rollout = torch.as_tensor(np.asarray(sample.rollout_logprobs), device=self.device)[pos].float()
        with capture_routing(self.actor) as rec:  # outside any replay context: live TopK
            live = self.actor_logprobs(sample)
        live_rows = rec.rows()
        gap = float((live - rollout).abs().sum())
        if sample.routing is None:
            return gap, 0, 0, live_rows.shape[1]
        rows = (pos - 1).cpu().numpy()  # token j is scored by the forward at position j - 1
        recorded = np.sort(_as_routing(sample.routing)[rows].astype(np.int64), axis=2)
        differ = (np.sort(live_rows[rows].astype(np.int64), axis=2) != recorded).any(axis=2)  # [n, L]
        return gap, int(differ.any(axis=1).sum()), int(differ.sum()), live_rows.shape[1]

    def logprob_gap(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """The train-inference gap of the current actor on ``samples``, with and without replay; no update.

        Mask-weighted means over loss tokens (T1 §4.3, Fig. 6): ``actor/logprob_gap_replay`` (recorded
        routing replayed), ``actor/logprob_gap_no_replay`` (live routing), ``actor/routing_flip_fraction``
        (loss tokens whose scoring position routes live to another expert set than the record in at least
        one MoE layer) and ``actor/routing_flip_fraction_layers`` (the same over (token, MoE layer) pairs).
        Two no-grad forwards per sample. Samples whose record cannot be replayed are skipped.

        Raises:
            SampleError: a sample's streams are inconsistent (`check_sample`).
        """
        from t1_r3 import replay_routing

        errors = self.routing_errors(samples) if self.ppo.routing_replay else {}
        n_tok = gap_r = gap_l = 0.0
        flips = pairs = layers = 0
        for i, s in enumerate(samples):
            if i in errors or s.routing is None:
                continue
            check_sample(s)
            pos = torch.nonzero(_mask(s, self.device)).flatten()
            rollout = torch.as_tensor(np.asarray(s.rollout_logprobs), device=self.device)[pos].float()
            with torch.no_grad(), replay_routing(self.actor, _as_routing(s.routing)):
                gap_r += float((self.actor_logprobs(s) - rollout).abs().sum())
            g, f, p, layers = self._live_gap(s)
            gap_l, flips, pairs, n_tok = gap_l + g, flips + f, pairs + p, n_tok + int(pos.numel())
        nan = float("nan")
        return {
            "actor/logprob_gap_replay": gap_r / n_tok if n_tok else nan,
            "actor/logprob_gap_no_replay": gap_l / n_tok if n_tok else nan,
            "actor/routing_flip_fraction": flips / n_tok if n_tok else nan,
            "actor/routing_flip_fraction_layers": pairs / (n_tok * layers) if n_tok and layers else nan,
            "actor/loss_tokens": int(n_tok),
        }

    def update_actor(
        self,
        samples: Sequence[TrainSample],
        advantages: Sequence[np.ndarray],
        *,
        old_logprobs: OldLogprobs = "recomputed",
    ) -> dict[str, Any]:
        """Clipped-surrogate update of the actor, R3 replaying each sample's routing (T1 §4.3, §4.5).

        No KL, no load-balancing loss, no advantage normalization (T1 §4.5, §5.2). A sample whose routing
        record is missing or misaligned is aborted (not trained with live routing) and reported. The ratio's
        old log-probs are those of the policy that drew the sample (T1 Appendix 12, `t1_trainer.step`):
        ``recomputed`` (staleness 0) takes the actor's own pre-update log-probs from the first pass's forward
        (same weights, same replayed routing), so pass 1 has ratio exactly 1; ``rollout`` (staleness >= 1)
        takes ``sample.rollout_logprobs``, the behaviour policy ``pi^r_{t-1}``, so pass 1 has ratio
        ``exp(log p_trainer - log p_rollout)``. The gap to the rollout log-probs is measured on the first
        pass's forward either way (at staleness 1 it includes the one update between the two versions).
        With ``ppo.off_policy`` on (`t1_trainer.off_policy`), the ratio's old log-probs are ``recomputed``
        for every sample and each loss token's term is weighted by the correction of
        ``log p_trainer - log p_rollout`` from that same first forward; the weights stay fixed over passes.

        Args:
            samples: the batch.
            advantages: float ``[T]`` per sample (0 at masked positions).
            old_logprobs: ``recomputed`` or ``rollout``, as above, for the whole batch, or one of them per
                sample (a batch whose continued samples are older than the rest, `t1_trainer.step`).

        Returns:
            ``actor/policy_loss``, ``actor/clip_fraction``, ``actor/approx_kl``, ``actor/approx_kl_k3``,
            ``actor/ratio_mean``, ``actor/ratio_min``, ``actor/ratio_max`` (last pass; token-weighted over
            the batch), ``actor/policy_loss_first``, ``actor/grad_norm`` (mean over passes, before clipping),
            ``actor/logprob_gap_replay`` (mask-weighted mean ``|log p_trainer - log p_rollout|`` on loss
            tokens, measured on the first, pre-update forward with replay on), ``actor/logprob_gap_no_replay``
            (the same with live routing: with replay on, an extra no-grad forward per sample on the steps
            `gap_due` names, absent on the others; with replay off, the step's own forward, every step),
            ``actor/routing_flip_fraction`` and ``actor/routing_flip_fraction_layers`` (loss tokens, and
            (loss token, MoE layer) pairs, whose live experts differ from the record; gap steps only),
            ``actor/gap_time_s`` (seconds of those extra forwards; gap steps only),
            ``samples_aborted_routing``, ``routing_errors`` (list of str), ``actor/loss_tokens``,
            ``actor/time_s``. With a correction on: ``actor/off_policy_weight_mean`` (mean weight over loss
            tokens) and ``actor/off_policy_truncated_fraction`` (``tis``) or
            ``actor/off_policy_masked_fraction`` (``icepop``), shares of the loss tokens.
            Eq. 25 (`t1_trainer.mismatch`): ``actor/mismatch_kernel``, ``actor/mismatch_version`` and
            ``actor/mismatch_decomposed_fraction`` (one-version-stale samples only on gap steps).

        Raises:
            TrainerConfigError: ``old_logprobs`` (or one of its entries) is neither ``recomputed`` nor
                ``rollout``, or a per-sample list of another length than ``samples``, or asks for
                ``rollout`` while ``ppo.off_policy`` is on (the correction's weight would count the
                mismatch twice).
        """
        t0 = time.perf_counter()
        from_rollout = _from_rollout(old_logprobs, len(samples))
        correction = OFF_POLICY_CORRECTIONS.load(self.ppo.off_policy.kind)
        if correction.active and any(from_rollout):
            raise TrainerConfigError(
                f"update_actor old_logprobs 'rollout' with ppo.off_policy.kind {self.ppo.off_policy.kind!r}: "
                "the correction already weights by pi_trainer / pi_rollout over the recomputed log-probs; "
                "pass old_logprobs 'recomputed' (t1_trainer.step does when the step's spec has it on)"
            )
        weights: dict[int, torch.Tensor] = {}
        affected, weight_sum = 0, 0.0
        errors = self.routing_errors(samples)
        keep = [i for i in range(len(samples)) if i not in errors]
        masks = {i: _mask(samples[i], self.device) for i in keep}
        n_tok = float(sum(int(masks[i].sum()) for i in keep))
        old: dict[int, torch.Tensor] = {}
        gap_sum, gap_nr_sum, flips, flip_pairs, moe_layers, gap_time = 0.0, 0.0, 0, 0, 0, 0.0
        measure_gap = self.gap_due(self.actor_updates)
        self.actor_updates += 1
        version = int(self.policy_version)
        # the next gap step decomposes its stale samples' mismatch with these pre-update weights (Eq. 25)
        pre_state = snapshot(self.actor) if self.gap_due(self.actor_updates) else None
        pre: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        norms: list[float] = []
        out: dict[str, Any] = {}
        self.actor.train()
        for epoch in range(self.ppo.ppo_epochs):
            self.actor_opt.zero_grad(set_to_none=True)
            acc = _MetricAcc()
            for i in keep:
                s, m = samples[i], masks[i]
                pos = torch.nonzero(m).flatten()
                adv = torch.as_tensor(advantages[i], device=self.device, dtype=torch.float32)[pos]
                with self._replay(s):
                    logp = self.actor_logprobs(s)
                    if epoch == 0:
                        rollout = torch.as_tensor(np.asarray(s.rollout_logprobs), device=self.device)[pos]
                        gap_sum += float((logp.detach() - rollout.float()).abs().sum())
                        pre[i] = (logp.detach(), rollout.float())
                        old[i] = rollout.float() if from_rollout[i] else logp.detach()
                        if correction.active:
                            log_ratio = logp.detach().float() - rollout.float()
                            weights[i], hit = correction.weights(
                                log_ratio, torch.ones_like(adv), self.ppo.off_policy
                            )
                            affected, weight_sum = (
                                affected + int(hit.sum()),
                                weight_sum + float(weights[i].sum()),
                            )
                    loss, met = ppo_policy_loss(
                        logp,
                        old[i],
                        adv,
                        torch.ones_like(adv),
                        clip_eps=self.ppo.clip_eps,
                        num_tokens=n_tok,
                        is_weights=weights.get(i),
                    )
                    loss.backward()
                acc.add(loss.item(), met, int(pos.numel()))
                if epoch == 0 and measure_gap:
                    tg = time.perf_counter()
                    g, f, p, moe_layers = self._live_gap(s)  # pre-update weights: the step ends after
                    gap_nr_sum, flips, flip_pairs = gap_nr_sum + g, flips + f, flip_pairs + p
                    gap_time += time.perf_counter() - tg
            norms.append(_step(self.actor, self.actor_opt, self.ppo.max_grad_norm, "actor"))
            self.version += 1
            if epoch == 0:
                out["actor/policy_loss_first"] = acc.loss
            out.update(acc.result())
        live = (gap_nr_sum, flips, flip_pairs, moe_layers, gap_time) if measure_gap else None
        out.update(_actor_summary(self.ppo.routing_replay, norms, gap_sum, n_tok, errors, t0, live))
        out.update(self._mismatch(samples, pre, version, measure_gap))
        self.behaviour_weights = None if pre_state is None else (version, pre_state)
        if correction.active:
            out[correction.metric] = affected / n_tok if n_tok else float("nan")
            out["actor/off_policy_weight_mean"] = weight_sum / n_tok if n_tok else float("nan")
        return out

    @torch.no_grad()
    def _mismatch(
        self,
        samples: Sequence[TrainSample],
        pre: dict[int, tuple[torch.Tensor, torch.Tensor]],
        version: int,
        due: bool,
    ) -> dict[str, float]:
        """Eq. 25's terms (`t1_trainer.mismatch`); one-version-stale samples scored with the kept copy."""
        held = self.behaviour_weights if due else None
        behaviour: dict[int, torch.Tensor] = {}
        stale = [i for i in pre if version - int(samples[i].policy_version) == 1]
        stale = [i for i in stale if not getattr(samples[i], "policy_versions_mixed", False)]
        if held is not None and held[0] == version - 1 and stale:
            with swapped_weights(self.actor, held[1]):
                for i in stale:
                    with self._replay(samples[i]):
                        behaviour[i] = self.actor_logprobs(samples[i])
        ages = {i: version - int(samples[i].policy_version) for i in pre}
        return mismatch_terms([(t, behaviour.get(i), r, ages[i]) for i, (t, r) in pre.items()])

    def export_weights(self) -> dict[str, torch.Tensor]:
        """Actor weights for the engine, state_dict names, detached (sharing storage with the live actor)."""
        return {k: v.detach() for k, v in self.actor.state_dict().items()}


def _from_rollout(old_logprobs: OldLogprobs, n: int) -> list[bool]:
    """Per sample, whether ``update_actor``'s ratio takes the rollout's log-probs (T1 Appendix 12).

    Args:
        old_logprobs: ``recomputed`` or ``rollout`` for every sample, or one of them per sample.
        n: the batch's sample count.

    Raises:
        TrainerConfigError: a value that is neither ``recomputed`` nor ``rollout``, or a list of another
            length than ``n``.
    """
    choices = [old_logprobs] * n if isinstance(old_logprobs, str) else list(old_logprobs)
    if len(choices) != n:
        raise TrainerConfigError(
            f"update_actor old_logprobs: {len(choices)} per-sample choices for {n} samples; give one each"
        )
    bad = sorted({repr(c) for c in choices if c not in ("recomputed", "rollout")})
    if bad:
        raise TrainerConfigError(
            f"update_actor old_logprobs={', '.join(bad)}: use 'recomputed' (staleness 0) or 'rollout' "
            "(staleness >= 1, or a continued sample)"
        )
    return [c == "rollout" for c in choices]


def _vocab_limit(vocab_size: int) -> int:
    from t1_policy import num_real_tokens

    return num_real_tokens(vocab_size)


def _adamw(model: nn.Module, lr: float, ppo: PPOSpec) -> torch.optim.AdamW:
    # Decay matrices only; norms, biases and 1-D gates are not decayed (the usual Megatron/HF split).
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": ppo.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=ppo.adam_betas)


def _step(model: nn.Module, opt: torch.optim.Optimizer, max_norm: float, name: str) -> float:
    """Clip the global grad norm, take one optimizer step; refuse to leave non-finite weights behind.

    Raises:
        NonFiniteUpdateError: the grad norm is inf/NaN (no step taken), or a parameter is inf/NaN after it.
    """
    norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], max_norm)
    if not torch.isfinite(norm):
        opt.zero_grad(set_to_none=True)
        raise NonFiniteUpdateError(
            f"{name}: the gradient norm is {float(norm)}, so the loss or a sample's streams are not finite; "
            "the update was not applied"
        )
    opt.step()
    opt.zero_grad(set_to_none=True)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    finite = torch.stack([torch.isfinite(p.detach()).all() for _, p in named])
    if not bool(finite.all()):  # one device sync for the whole model
        bad = [n for (n, _), ok in zip(named, finite.tolist(), strict=True) if not ok]
        raise NonFiniteUpdateError(
            f"{name}: the optimizer step left {len(bad)} of {len(named)} parameter tensors inf or NaN "
            f"(first: {', '.join(bad[:3])}); lower ppo.{name}_lr (now {opt.param_groups[0]['lr']:g}) "
            "or ppo.max_grad_norm"
        )
    return float(norm)


def _ids(sample: TrainSample, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(np.asarray(sample.token_ids), dtype=torch.long, device=device)


def _mask(sample: TrainSample, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(np.asarray(sample.loss_mask), device=device).to(torch.float32)


def _as_routing(routing: Any) -> np.ndarray:
    return routing.detach().cpu().numpy() if isinstance(routing, torch.Tensor) else np.asarray(routing)
