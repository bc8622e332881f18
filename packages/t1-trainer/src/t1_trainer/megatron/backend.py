"""Megatron-core trainer backend: the actor with megatron's router replay, a full-size critic (T1 §4.5, §6).

The actor and critic are megatron-core ``GPTModel`` s (`t1_trainer.megatron.model`) that start from the HF
policy's weights through the name map (`t1_trainer.megatron.names`); the critic's LM head is a scalar value
head. R3 is megatron's ``RouterReplay`` (``moe_enable_routing_replay``), fed per sample from its record
(`t1_trainer.megatron.replay`): ``REPLAY_FORWARD`` in the forward, ``REPLAY_BACKWARD`` around the backward (so
activation recomputation, when configured, routes as the forward did); a sample without a usable record is
aborted, never trained with live routing. The update itself (passes, micro-batches, losses, metrics, the
gap's cadence) is the one loop of `t1_trainer.update`, which the torch backend runs too; this module supplies
its hooks (`t1_trainer.update.UpdateBackend`): forward, backward, optimizer step, offload, weight export.

Optimizer. On CUDA both networks are wrapped in megatron's ``DistributedDataParallel`` and stepped by its
``DistributedOptimizer`` (Adam, grad-norm clip), and forced offload (``plan.offload: forced``, T1 §4.5)
moves the idle network's parameters, gradients and optimizer state to host memory while the other runs. On
the CPU megatron's grad buffers cannot be built (they allocate on ``torch.cuda.current_device()`` and sync
CUDA streams), so both networks take torch's AdamW with the torch backend's parameter groups, and offload is a
no-op: there is no device memory to free.

Ranks. One process per training device (``torchrun``; `t1_trainer.megatron.parallel`). Each rank loads
its own shards of the HF weights and exports the gathered whole (`t1_trainer.megatron.sharding`). Tensor
parallelism runs with megatron's sequence parallelism on (megatron-core 0.19.2's ``MoELayer`` raises in
training when tp > 1 without it): the sample is padded to a multiple of tp (causal, so the padding reaches no
recorded position), each tp rank's routers replay that rank's block of routing rows, the hidden states are
all-gathered along the sequence and the LM head along the vocabulary before the chunked log-probs, so every
tp rank computes the same loss. Expert parallelism dispatches with megatron's ``allgather`` dispatcher on the
CPU. On the CPU the gradients are summed over megatron's groups and clipped by the global norm
(`t1_trainer.megatron.sharding.sync_grads`, `global_grad_norm`) before AdamW.

Every rank runs the whole batch (the update loop does not shard samples over data-parallel ranks, on the
CPU or on CUDA): dp > 1 adds no throughput, and the ep ranks of a data-parallel group dispatch the same
tokens in lockstep, as the ``allgather`` dispatcher needs.

Pipeline stages (pp > 1) run every pass through megatron-core's own schedule (`t1_trainer.megatron.pipeline`:
its CPU adaptation, the last stage's loss, metrics broadcast over the stages).

Context parallelism (cp > 1, `t1_trainer.megatron.cp`): the sample is padded to a multiple of ``2 * cp * tp``
and each cp rank forwards its two load-balanced chunks (megatron's rotary table sliced alike); full attention
reads the whole sample's keys and values, Gated DeltaNet layers run T1's sequence-sharded scan (T1 §7.1), each
cp rank's routers replay the rows of its own tokens, and the output is gathered over the cp group before the
head, so every rank computes the same loss.

Built: on the CPU (gloo), tp, pp, cp, dp, ep and etp (ep dividing tp * cp * dp / etp), each tested against
one rank (`tests/t1_trainer/test_megatron_parallel.py` lists the modes, on 2 and 4 ranks); on CUDA,
tp = pp = cp = etp = 1 with dp and ep from the plan. Not built, refused by `MegatronBackend.preflight`:
tp, pp, cp or etp > 1 on CUDA (never run on a GPU; cp there needs Transformer Engine's attention), pp > 1
with tied embeddings.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import nn

from t1_policy import device_problem, num_real_tokens
from t1_r3 import RoutingMismatchError
from t1_spec import ModelSpec, PlanSpec, PPOSpec, Recipe
from t1_trainer import update
from t1_trainer.base import OldLogprobs
from t1_trainer.checks import unbuilt_ppo
from t1_trainer.errors import NonFiniteUpdateError, TrainerConfigError
from t1_trainer.logprobs import lm_head_logprobs
from t1_trainer.megatron import replay as rr
from t1_trainer.megatron.names import hf_to_megatron, megatron_to_hf
from t1_trainer.megatron.optimizer import megatron_optimizer, offload_network, zero_grads
from t1_trainer.megatron.parallel import cp_rank, gathered_rows, plan_problems, tp_rank
from t1_trainer.megatron.sharding import gather_state, model_parallel_step, shard_state
from t1_trainer.mismatch import StateDict
from t1_trainer.optim import adamw, clip_and_step
from t1_trainer.samples import (
    TrainSample,
    check_sample,
    loss_mask_tensor,
    routing_array,
    sample_name,
    token_tensor,
)
from t1_trainer.update import Network

__all__ = ["MISSING_LINE", "MegatronBackend"]

MISSING_LINE = (
    "trainer.backend 'megatron': megatron-core is not installed: install the t1-trainer[megatron] extra, "
    "or use trainer.backend: torch"
)
"""The one preflight line when ``megatron.core`` cannot be imported."""


def _megatron_installed() -> bool:
    try:
        return importlib.util.find_spec("megatron.core") is not None
    except (ImportError, ValueError):  # a parent missing, or sys.modules["megatron.core"] is None
        return False


class MegatronBackend:
    """PPO backend on megatron-core models, one sample per micro-batch (``trainer.backend: megatron``).

    Args:
        model_spec: the recipe's model section (architecture of actor and critic).
        ppo_spec: the recipe's PPO section.
        plan: the recipe's plan (parallel degrees, offload).
        seed: weight seed of the HF policy built when ``actor`` is None.
        device: ``"cpu"`` or ``"cuda"``.
        actor: the HF policy whose weights both networks start from (the engine's copy); used only to read
            its weights and config, then dropped.
        temperature: the engine's sampling temperature, at which rollout log-probs were scored.
        logprob_gap_every: as `TorchBackend`: the live-routing gap every this many actor updates; 0 = never.

    Raises:
        TrainerConfigError: a setting `preflight` refuses.
        ImportError: megatron-core is not installed.
    """

    def __init__(
        self,
        *,
        model_spec: ModelSpec,
        ppo_spec: PPOSpec,
        plan: PlanSpec,
        seed: int,
        device: str = "cpu",
        actor: nn.Module | None = None,
        temperature: float = 1.0,
        logprob_gap_every: int = 0,
    ) -> None:
        problems = unbuilt_ppo(ppo_spec, "megatron") + plan_problems(plan, device, model_spec)
        if problems:
            raise TrainerConfigError(
                "the megatron trainer cannot run this recipe:\n  - " + "\n  - ".join(problems)
            )
        if logprob_gap_every < 0:
            raise TrainerConfigError(f"logprob_gap_every={logprob_gap_every} must be >= 0 (0 = never)")
        from t1_trainer.megatron.model import build_gpt, cpu_device_shim
        from t1_trainer.megatron.parallel import ensure_parallel_state, seed_rng

        self.ppo, self.plan, self.model_spec = ppo_spec, plan, model_spec
        self.cpu = not device.startswith("cuda")
        self.device = torch.device("cpu" if self.cpu else f"cuda:{torch.cuda.current_device()}")
        self._shim = cpu_device_shim
        ensure_parallel_state(plan, cpu=self.cpu)
        seed_rng(seed, cpu=self.cpu)
        if actor is None:
            from t1_policy import build_model

            actor = build_model(model_spec, seed=seed)
        self.hf_config = actor.config
        hf_state = {k: v.detach().cpu() for k, v in actor.state_dict().items()}
        del actor  # the backend trains megatron copies; the HF module is not kept
        dtype = getattr(torch, model_spec.dtype)
        common = {"seed": seed, "params_dtype": dtype, "cpu": self.cpu, "plan": plan}
        self.actor = build_gpt(model_spec, routing_replay=True, **common)
        self.critic = build_gpt(
            model_spec,
            routing_replay=False,
            value_head=True,
            value_head_init=ppo_spec.value_head_init,
            **common,
        )
        mg_state = hf_to_megatron(hf_state, self.hf_config, layer_spec="local")
        self.tp, self.cp = int(plan.tp), int(plan.cp)
        self.world = int(torch.distributed.get_world_size())
        _load(self.actor, shard_state(self.actor, mg_state), "actor")
        critic_state = {k: v for k, v in mg_state.items() if k != "output_layer.weight"}
        _load(self.critic, shard_state(self.critic, critic_state), "critic")
        self.actor.to(self.device)
        self.critic.to(self.device)
        self.instances = rr.router_replay_instances(self.actor)
        self.layer_order = rr.moe_layer_order(self.instances)
        self.temperature = float(temperature)
        self.logprob_gap_every = int(logprob_gap_every)
        self.actor_updates = 0
        self.version = 0  # actor optimizer steps taken
        self.policy_version = 0  # publications of the actor so far (set by publish_weights; T1 Appendix 12)
        self.vocab_limit = num_real_tokens(model_spec.vocab_size)
        self.behaviour_weights: tuple[int, StateDict] | None = None  # never kept here (Eq. 25)
        self._ddp: dict[str, Any] = {}
        self.actor_opt = self._optimizer("actor", ppo_spec.actor_lr)
        self.critic_opt = self._optimizer("critic", ppo_spec.critic_lr)
        self._resident = "both"
        self.pp = int(plan.pp)
        if self.pp > 1:  # the update loop's optional hook: a pass is one call of megatron's schedule
            from t1_trainer.megatron.pipeline import pipelined_pass

            self.pipelined = partial(pipelined_pass, self)

    # ---- construction ----

    @classmethod
    def from_spec(
        cls, recipe: Recipe, *, actor: nn.Module | None = None, gap_without_replay: bool = True
    ) -> MegatronBackend:
        """Builds the backend of a recipe (``trainer.backend: megatron``), as `TorchBackend.from_spec` does.

        Args:
            recipe: the validated recipe.
            actor: the HF policy whose weights actor and critic start from; None builds it from
                ``recipe.model`` with ``recipe.seed`` (the engine's initial weights).
            gap_without_replay: measure the live-routing gap every ``trainer.logprob_gap_every`` steps.

        Raises:
            TrainerConfigError: see the class.
        """
        return cls(
            model_spec=recipe.model,
            ppo_spec=recipe.ppo,
            plan=recipe.plan,
            seed=recipe.seed,
            device=recipe.trainer.device,
            actor=actor,
            temperature=recipe.engine.sampling.temperature,
            logprob_gap_every=recipe.trainer.logprob_gap_every if gap_without_replay else 0,
        )

    @classmethod
    def preflight(cls, recipe: Recipe) -> list[str]:
        """What this backend cannot run of ``recipe`` here, one line each led by the field path; cheap.

        Checks, without importing megatron-core: that it is installed (`MISSING_LINE`); a CUDA
        ``trainer.device`` torch does not see; the plan's degrees this backend does not build (tp, pp, cp
        or etp > 1 on CUDA) and a world size other than ``plan.training_devices``; Gated
        DeltaNet layers on CUDA without flash-linear-attention; the PPO settings neither this
        backend nor the torch one builds (`t1_trainer.checks.unbuilt_ppo`).
        """
        if not _megatron_installed():
            return [MISSING_LINE]
        from t1_trainer.megatron.model import gdn_problem

        device = recipe.trainer.device
        unseen = device_problem("trainer.device", device)
        lines = [unseen] if unseen else []
        lines += plan_problems(recipe.plan, device, recipe.model)
        gdn = gdn_problem(recipe.model, cuda=device.startswith("cuda"))
        return lines + ([gdn] if gdn else []) + unbuilt_ppo(recipe.ppo, "megatron")

    def _optimizer(self, name: str, lr: float) -> Any:
        model = getattr(self, name)
        if self.cpu:
            return adamw(model, lr, self.ppo)
        self._ddp[name], opt = megatron_optimizer(model, lr, self.ppo)
        return opt

    # ---- forward passes ----

    def padded_length(self, n: int) -> int:
        """Tokens of the forward: ``n`` rounded up to a multiple of tp, or of ``2 * cp * tp`` with cp > 1.

        Sequence parallelism splits a forward into tp blocks; context parallelism into each cp rank's two
        load-balanced chunks first.
        """
        multiple = self.tp if self.cp == 1 else 2 * self.cp * self.tp
        return -(-n // multiple) * multiple

    def stage_forward(self, model: nn.Module, ids: torch.Tensor, length: int | None = None) -> Any:
        """This rank's forward of ``ids [T]`` padded to ``length`` (`padded_length`, default the least).

        Returns the model's raw output: ``[m / (cp tp), 1, H]`` hidden states on a stage before the last,
        ``[1, m / (cp tp), X]`` on the last (or only) one; with cp > 1 this rank's load-balanced tokens
        (`t1_trainer.megatron.cp`).
        """
        n = int(ids.shape[0])
        m = self.padded_length(n) if length is None else int(length)
        if m > n:  # trailing padding: causal, so no real position reads it
            ids = torch.cat([ids, ids.new_zeros(m - n)])
        if self.cp > 1:  # the attention builds its causal mask from the stream positions
            from t1_trainer.megatron.cp import local_positions

            pos = local_positions(m).to(ids.device)
            with self._shim(self.cpu):
                return model(input_ids=ids[pos][None, :], position_ids=pos[None, :], attention_mask=None)
        causal = torch.triu(torch.ones(m, m, dtype=torch.bool, device=ids.device), diagonal=1)
        with self._shim(self.cpu):
            return model(
                input_ids=ids[None, :],
                position_ids=torch.arange(m, device=ids.device)[None, :],
                attention_mask=causal[None, None],  # explicit: megatron's default mask is built on "cuda"
            )

    def _finished(self, out: Any, n: int) -> torch.Tensor:
        """The last stage's output ``[1, m / (cp tp), X]`` -> ``[n, X]``, whole on every tp and cp rank."""
        from megatron.core.tensor_parallel import gather_from_sequence_parallel_region

        out = out[0]
        if self.tp > 1:  # this rank's sequence block -> all; backward: this rank's block of the grad
            with self._shim(self.cpu):
                out = gather_from_sequence_parallel_region(out, tensor_parallel_output_grad=False)
        if self.cp > 1:  # every cp rank's chunks, in stream order; backward: this rank's tokens' grad
            from t1_trainer.megatron.cp import gather_sequence

            out = gather_sequence(out, sum_grads=False)
        return out[:n]

    def _forward(self, model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
        """``ids [T]`` -> ``[T, X]`` (actor hidden states, critic values), whole on every rank; no stages."""
        return self._finished(self.stage_forward(model, ids), int(ids.shape[0]))

    def head_input(self, network: str, sample: TrainSample) -> torch.Tensor:
        """The token ids ``network`` reads: all of them (actor), all but the last (critic)."""
        ids = token_tensor(sample, self.device)
        return ids if network == "actor" else ids[:-1]

    def head_of(self, network: str, sample: TrainSample, out: Any) -> torch.Tensor:
        """The last stage's output -> log-probs ``[n_loss]`` (actor) or values ``[T]`` (critic)."""
        hidden = self._finished(out, int(self.head_input(network, sample).shape[0]))
        if network == "critic":
            return torch.cat([hidden.new_zeros(1, dtype=torch.float32), hidden[:, 0].float()])
        return self._logprobs_of(sample, hidden)

    def _head_weight(self) -> torch.Tensor:
        """The LM head ``[V, H]``, all-gathered over tp (backward: this rank's vocabulary rows)."""
        from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

        if self.model_spec.tie_word_embeddings:
            w = self.actor.embedding.word_embeddings.weight
        else:
            w = self.actor.output_layer.weight
        if self.cp > 1:  # every cp rank's loss reads all of it: sync_grads would sum cp whole gradients
            from t1_trainer.megatron.cp import replicated_in_loss

            w = replicated_in_loss(w)
        if self.tp == 1:
            return w
        with self._shim(self.cpu):
            return gather_from_tensor_model_parallel_region(w.t()).t()

    def actor_logprobs(self, sample: TrainSample) -> torch.Tensor:
        """Log-probs ``[n_loss]`` float32 of the sampled tokens under the actor, routed as the caller set.

        With pp > 1 a forward-only call of megatron's schedule (no grad: the update loop's passes with
        backward go through the ``pipelined`` hook), the same on every stage.
        """
        if self.pp > 1:  # a forward-only pass of megatron's schedule, on every stage
            from t1_trainer.megatron.pipeline import staged_head

            return staged_head(self, "actor", sample)
        return self._logprobs_of(sample, self._forward(self.actor, token_tensor(sample, self.device)))

    def _logprobs_of(self, sample: TrainSample, hidden: torch.Tensor) -> torch.Tensor:
        ids = token_tensor(sample, self.device)
        pos = torch.nonzero(loss_mask_tensor(sample, self.device)).flatten()
        return lm_head_logprobs(
            hidden[pos - 1],
            self._head_weight(),
            ids[pos],
            temperature=self.temperature,
            vocab_limit=self.vocab_limit,
        )

    def critic_values(self, sample: TrainSample) -> torch.Tensor:
        """Critic values ``[T]`` float32, ``values[0] = 0``; with grad unless the caller turned it off."""
        if self.pp > 1:
            from t1_trainer.megatron.pipeline import staged_head

            return staged_head(self, "critic", sample)
        out = self.stage_forward(self.critic, self.head_input("critic", sample))
        return self.head_of("critic", sample, out)

    @contextmanager
    def replayed(self, sample: TrainSample) -> Iterator[None]:
        """Feeds ``sample``'s record to the actor's routers for the body (forward, backward), then clears."""
        self.feed_replay(sample)
        try:
            yield
        finally:
            rr.clear_router_replay(self.instances)

    def feed_replay(self, sample: TrainSample, length: int | None = None) -> None:
        """``sample``'s record to this rank's routers (its stage's layers), ``REPLAY_FORWARD``.

        ``length``: the forward's padded length (a multiple of tp; default the least), padding rows to it.
        """
        args = self._feed_args(sample) | ({} if length is None else {"pad_to": int(length)})
        rr.feed_router_replay(self.instances, [routing_array(sample.routing)], **args)
        rr.set_replay_action(self.instances, "REPLAY_FORWARD")

    def _feed_args(self, sample: TrainSample) -> dict[str, Any]:
        s = self.model_spec
        return {
            "moe_layer_order": self.layer_order,
            "seq_lens": [len(sample.token_ids)],
            "num_moe_layers": s.num_layers,
            "top_k": s.top_k,
            "num_experts": s.num_experts,
            "layout": "sbhd",
            "pad_to": self.padded_length(1),
            "sp_rank": tp_rank(),
            "sp_size": self.tp,
            "cp_rank": cp_rank(),
            "cp_size": self.cp,
        }

    def backward(self, loss: torch.Tensor, network: Network) -> None:
        """The actor's backward under ``REPLAY_BACKWARD`` (recomputed routers route as the forward did)."""
        if network == "critic":
            loss.backward()
            return
        with rr.replay_backward(self.instances):
            loss.backward()

    def live_routing(self, sample: TrainSample) -> tuple[torch.Tensor, np.ndarray]:
        """One no-grad forward with live TopK: log-probs ``[n_loss]`` and the routed experts ``[T, L, k]``."""
        rr.set_replay_action(self.instances, "RECORD")
        try:
            with torch.no_grad():
                logp = self.actor_logprobs(sample)
            cols = {
                c: gathered_rows(inst.get_recorded_indices().detach(), self.tp, self.cp)
                for c, inst in zip(self.layer_order, self.instances, strict=True)
            }
        finally:
            rr.clear_router_replay(self.instances)
        if self.pp > 1:  # every stage's layers
            from t1_trainer.megatron.pipeline import gather_stages

            cols = gather_stages(cols)
        n = len(sample.token_ids)
        rows = np.stack([cols[c][:n] for c in range(len(cols))], axis=1)
        return logp, rows

    # ---- offload (T1 §4.5) ----

    def _resident_only(self, which: str) -> None:
        """Keeps only ``which`` (``"actor"``, ``"critic"``) on the device under forced offload; CPU: no-op."""
        if self.cpu or self.plan.offload != "forced" or self._resident == which:
            return
        other = "critic" if which == "actor" else "actor"
        offload_network(self._ddp[other], getattr(self, f"{other}_opt"), to_host=True)
        if self._resident != "both":
            offload_network(self._ddp[which], getattr(self, f"{which}_opt"), to_host=False)
        self._resident = which

    # ---- the TrainerBackend protocol ----

    def routing_errors(self, samples: Sequence[TrainSample]) -> dict[int, str]:
        """Index -> reason for each sample whose record megatron's replay cannot take (empty, replay off)."""
        if not self.ppo.routing_replay:
            return {}
        errors: dict[int, str] = {}
        for i, s in enumerate(samples):
            name = sample_name(s)
            if s.routing is None:
                errors[i] = f"sample {name}: routing record missing; R3 cannot replay it (T1 §4.3: aborted)"
                continue
            try:
                rr.replay_targets([routing_array(s.routing)], **self._feed_args(s))
            except RoutingMismatchError as e:
                errors[i] = f"sample {name}: {e} (aborted)"
        return errors

    def values(self, samples: Sequence[TrainSample]) -> list[np.ndarray]:
        """Pre-update critic values, float32 ``[T]`` per sample, live routing, ``values[0] = 0``."""
        self._resident_only("critic")
        self.critic.eval()
        out = []
        with torch.no_grad(), self._shim(self.cpu):
            for s in samples:
                check_sample(s)
                out.append(self.critic_values(s).cpu().numpy().astype(np.float32))
        return out

    def update_critic(
        self, samples: Sequence[TrainSample], returns: Sequence[np.ndarray], old_values: Sequence[np.ndarray]
    ) -> dict[str, float]:
        """Critic regression, value clip around ``old_values`` (`t1_trainer.update.update_critic`)."""
        return _staged(update.update_critic(self, samples, returns, old_values), self.pp)

    def update_actor(
        self,
        samples: Sequence[TrainSample],
        advantages: Sequence[np.ndarray],
        *,
        old_logprobs: OldLogprobs = "recomputed",
    ) -> dict[str, Any]:
        """Clipped-surrogate update with megatron's router replay (`t1_trainer.update.update_actor`).

        Eq. 25's split (`t1_trainer.mismatch`) covers the staleness-0 samples only: unlike the torch backend,
        this one keeps no copy of the behaviour version's weights (`snapshot_actor` gives None), so an older
        sample is counted as not decomposed (``actor/mismatch_decomposed_fraction``).
        """
        return _staged(update.update_actor(self, samples, advantages, old_logprobs=old_logprobs), self.pp)

    def logprob_gap(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """The train-inference gap with and without replay, no update (`t1_trainer.update.logprob_gap`)."""
        return update.logprob_gap(self, samples)

    # ---- the rest of the shared update loop's hooks (t1_trainer.update.UpdateBackend) ----

    @contextmanager
    def running(self, network: Network) -> Iterator[None]:
        """Only ``network`` resident under forced offload (CUDA), megatron's CPU device shim (CPU)."""
        self._resident_only(network)
        with self._shim(self.cpu):
            yield

    def zero_grad(self, network: Network) -> None:
        """Drops the network's gradients (and megatron's DDP grad buffers on CUDA)."""
        zero_grads(getattr(self, f"{network}_opt"))

    def optimizer_step(self, network: Network) -> float:
        """Clip and step: `t1_trainer.optim.clip_and_step` on the CPU, megatron's optimizer on CUDA.

        Raises:
            NonFiniteUpdateError: a non-finite gradient or weight (CPU), or megatron's optimizer skipped the
                step for non-finite gradients (CUDA).
        """
        model, opt = getattr(self, network), getattr(self, f"{network}_opt")
        if self.cpu and self.world == 1:
            return clip_and_step(model, opt, self.ppo.max_grad_norm, network)
        if self.cpu:
            return model_parallel_step(model, opt, self.ppo.max_grad_norm, network)
        self._ddp[network].finish_grad_sync()  # reduce-scatter the dp gradients into the optimizer's shards
        ok, norm, _ = opt.step()  # megatron: clips to OptimizerConfig.clip_grad, skips a non-finite step
        if not ok:
            raise NonFiniteUpdateError(
                f"{network}: megatron's optimizer skipped the step (non-finite gradients)"
            )
        return float(norm or 0.0)

    def snapshot_actor(self) -> StateDict | None:
        """None: this backend keeps no behaviour weights (the Eq. 25 split of stale samples is not built)."""
        return None

    def swapped_actor(self, state: StateDict) -> AbstractContextManager[None]:
        """Not reached (`snapshot_actor` keeps nothing); refuses by name."""
        raise TrainerConfigError(
            "MegatronBackend.swapped_actor: the megatron trainer keeps no behaviour weights to score with"
        )

    def export_weights(self) -> dict[str, torch.Tensor]:
        """Actor weights under the HF ``Qwen3_5MoeForCausalLM`` state_dict names (`megatron_to_hf`).

        Above one rank a collective: every rank gathers the tp shards and the ep ranks' experts into the full
        tensors (`t1_trainer.megatron.sharding.gather_state`) and returns the whole; rank 0 publishes.
        """
        state = {k: v.detach() for k, v in self.actor.state_dict().items() if not k.endswith("_extra_state")}
        if self.world > 1:  # a collective: every rank gathers the shards (rank 0 publishes)
            state = gather_state(self.actor, state)
        return megatron_to_hf(state, self.hf_config, layer_spec="local")


def _staged(metrics: dict[str, Any], pp: int) -> dict[str, Any]:
    """A pass's metrics row as the last pipeline stage computed it (the losses exist there only)."""
    if pp == 1:
        return metrics
    from t1_trainer.megatron.pipeline import broadcast_from_last_stage

    return broadcast_from_last_stage(metrics)


def _load(model: nn.Module, state: dict[str, torch.Tensor], name: str) -> None:
    """Copies mapped HF weights into ``model``; every tensor but the critic's value head must be covered."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("_extra_state") and k != "output_layer.weight"]
    if missing or unexpected:
        raise TrainerConfigError(
            f"{name}: the HF -> Megatron name map and the built model disagree: missing {missing[:3]}, "
            f"unexpected {unexpected[:3]} (model.py and names.py must build the same layer spec)"
        )
