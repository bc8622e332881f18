"""PPO with a full-size critic, or the GRPO baseline (T1 §4.5, §5, §9; hyperparameters in T1 §4.5)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from t1_spec._base import Spec, Violation, raise_if


class GAEAdvantageSpec(Spec):
    """Generalised advantage estimation against the pre-update critic (T1 §4.5)."""

    estimator: Literal["gae"] = "gae"
    """Discriminator: GAE with a learned critic, the paper's estimator."""

    gamma: float = Field(default=1.0, ge=0, le=1)
    """gamma: discount per token (fraction). 1.0: the terminal reward reaches every token undiscounted
    (T1 §4.5)."""

    lam: float = Field(default=1.0, ge=0, le=1)
    """lambda: GAE trace parameter (fraction). 1.0 (T1 §4.5)."""


class GRPOAdvantageSpec(Spec):
    """Group-relative advantages (no critic), the baseline the paper rejected (T1 §9)."""

    estimator: Literal["grpo"] = "grpo"
    """Discriminator: group-relative policy optimisation."""

    group_size: int = Field(gt=1)
    """Samples per task whose rewards form one group baseline (samples); must equal ``ppo.samples_per_task``.
    """


AdvantageSpec = Annotated[GAEAdvantageSpec | GRPOAdvantageSpec, Field(discriminator="estimator")]
"""The advantage estimator, selected by ``estimator: gae | grpo``."""


class NoOffPolicySpec(Spec):
    """No train/rollout importance correction: the PPO loss as T1 runs it (T1 §4.5)."""

    kind: Literal["none"] = "none"
    """Discriminator: no correction; the ratio's denominator is chosen by staleness (`t1_trainer.step`)."""


class TISSpec(Spec):
    """Truncated importance sampling (TIS) of the train/rollout mismatch.

    Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training"; the T1 paper's
    related work names it among the remedies and its outlook plans it for staleness (T1 Appendix 12).

    Each loss token's clipped surrogate is multiplied by ``w = min(pi_old^train / pi^rollout, cap)``, with
    ``pi_old^train`` the trainer's pre-update log-prob (replayed routing) and ``pi^rollout`` the engine's;
    the PPO ratio's denominator is then always the trainer's pre-update log-prob (decoupled PPO: the weight
    carries the behaviour correction, the clip the trust region). ``w`` carries no gradient.
    """

    kind: Literal["tis"] = "tis"
    """Discriminator: truncated importance sampling."""

    level: Literal["token", "sequence"] = "token"
    """``token``: one weight per loss token. ``sequence``: one weight per sample (TITO chunk), the
    GEOMETRIC mean of its loss tokens' ratios, ``exp(mean_j log r_j)``, given to each of its tokens. The
    geometric mean, not the product: over the thousands of loss tokens of an agent trajectory a product of
    ratios near 1 drifts by ``exp(sum_j log r_j)`` and ends pinned at the cap or near 0 for reasons of length
    alone; the length-normalised mean keeps one cap meaningful for short and long samples (GSPO's sequence
    ratio is the same mean)."""

    cap: float = Field(default=2.0, ge=1)
    """C: the weight's upper bound (ratio). 2.0, chosen: verl's default ``rollout_is_threshold`` and SkyRL's
    TIS cap in its Harbor recipe (`reference/ppo_frameworks.md`); the paper gives none."""


class IcePopSpec(Spec):
    """Masked importance sampling, IcePop (Ling team 2025, Ring-1T).

    The T1 paper's related work: IcePop "drops gradients outside a fixed two-sided band".

    A loss token whose ratio ``pi_old^train / pi^rollout`` (as `TISSpec`) lies outside ``[low, high]`` is
    removed from the policy loss (its gradient is exactly 0); the others keep weight 1. The token-mean's
    denominator stays the step's loss-token count, so the masked tokens lower the loss scale rather than
    reweighting the rest. The ratio's denominator is the trainer's pre-update log-prob, as with TIS.
    """

    kind: Literal["icepop"] = "icepop"
    """Discriminator: masked importance sampling with a two-sided band."""

    level: Literal["token", "sequence"] = "token"
    """``token``: mask each token by its own ratio. ``sequence``: mask a whole sample (TITO chunk) by the
    geometric mean of its loss tokens' ratios (see `TISSpec.level` for why not the product)."""

    low: float = Field(default=0.5, gt=0, le=1)
    """Lower edge of the kept band (ratio). 0.5, chosen (symmetric to ``high`` in log space)."""

    high: float = Field(default=2.0, ge=1)
    """Upper edge of the kept band (ratio). 2.0, chosen."""


OffPolicySpec = Annotated[NoOffPolicySpec | TISSpec | IcePopSpec, Field(discriminator="kind")]
"""The train/rollout importance correction, selected by ``kind: none | tis | icepop`` (T1 Appendix 12,
Eq. 25: the mismatch it corrects is the kernel term plus, at staleness >= 1, the version term)."""


class PPOSpec(Spec):
    """Policy optimisation hyperparameters and batch geometry (T1 §4.5 unless stated)."""

    advantage: AdvantageSpec = Field(default_factory=GAEAdvantageSpec)
    """Advantage estimator: ``gae`` (paper) or ``grpo`` (ablation, T1 §9)."""

    clip_eps: float = Field(default=0.2, gt=0, lt=1)
    """epsilon: PPO clip of the actor's importance ratio (ratio), clipping to [1 - eps, 1 + eps], (T1 §4.5).
    """

    value_clip: float = Field(default=0.2, gt=0)
    """Value clip around the pre-update critic's prediction (return units) (T1 §4.5)."""

    actor_lr: float = Field(default=1.0e-6, gt=0)
    """Actor Adam learning rate. 1.0e-6 (T1 §4.5)."""

    critic_lr: float = Field(default=1.5e-5, gt=0)
    """Critic Adam learning rate. 1.5e-5, 15x the actor's so the critic calibrates fast (T1 §4.5)."""

    value_head_init: Literal["normal", "zeros"] = "normal"
    """How the critic's scalar value head is drawn (its trunk is the actor's, T1 §4.5). ``normal``: weights
    ``normal(0, 1/(h+1))`` (OpenRLHF, SkyRL), so initial values scatter with std about ``1/sqrt(h)`` per
    token: 0.02 at the paper's h = 3072, but 0.12 at the tiny model's h = 64 (0.19-0.20 measured on its
    SFT'd trunk), as large as the dense rewards themselves, which then enters every token's GAE advantage as
    noise until the critic has learned.
    ``zeros``: every initial value is 0 (a constant baseline), and the head learns from there. The paper gives
    no init; ``normal``, as the frameworks it builds on."""

    adam_betas: tuple[float, float] = (0.9, 0.98)
    """Adam (beta1, beta2) for actor and critic. (0.9, 0.98) (T1 §4.5)."""

    weight_decay: float = Field(default=0.1, ge=0)
    """Decoupled weight decay (AdamW) for actor and critic. 0.1 (T1 §4.5)."""

    kl_coef: float = Field(default=0.0, ge=0)
    """Coefficient of a KL penalty to the reference policy. 0: KL off (T1 §4.5); must be 0 with routing
    replay."""

    load_balancing_coef: float = Field(default=0.0, ge=0)
    """MoE auxiliary load-balancing loss coefficient. 0 (T1 §4.3, §4.5); must be 0 with routing replay, since
    the replayed routing is not the router's own choice."""

    normalize_advantages: bool = False
    """Whiten advantages per batch. Off in the paper: the critic is the only baseline (T1 §4.5)."""

    routing_replay: bool = True
    """R3: replay the sampler's recorded top-k experts in the actor's training forward (T1 §4.3)."""

    off_policy: OffPolicySpec = Field(default_factory=NoOffPolicySpec)
    """Importance correction of the train/rollout mismatch in the actor's loss: ``none`` (T1 as run),
    ``tis`` (truncated IS) or ``icepop`` (masked IS), at token or sequence level. With a correction on, the
    PPO ratio's denominator is the trainer's pre-update log-prob at every staleness and the correction's
    weight ``pi_old^train / pi^rollout`` carries the mismatch (T1 Appendix 12, Eq. 25)."""

    batch_size: int = Field(gt=0)
    """Tasks admitted per PPO step (tasks). 512 in the production run (T1 §4.5, §7.4)."""

    samples_per_task: int = Field(default=1, gt=0)
    """Trajectories sampled per task per step (samples), one group: the scheduler launches this many trials on
    each drawn task and admits only whole groups, each closing when its slowest member ends; a group with a
    failed member is dropped whole (`t1_rollout.scheduler.collect_batch`). 1 in the paper (no group
    baseline, T1 §5); GRPO needs > 1 (= ``advantage.group_size``, T1 §9)."""

    steps: int | None = Field(default=None, gt=0)
    """PPO steps to run (steps); ``None`` = until ``epochs`` passes over the pool. When both bound the run,
    whichever is reached first ends it."""

    epochs: int = Field(default=3, gt=0)
    """Passes over the task pool (epochs), each with a fresh seeded permutation. 3 in the paper (T1 §1). With
    ``steps`` null the run takes floor(pool size x epochs / rollout.launched) steps: whole steps only, never
    reaching into a further pass."""

    ppo_epochs: int = Field(default=1, gt=0)
    """Optimizer passes over each step's batch (epochs); one update per batch in the paper)."""

    micro_batch_size: int = Field(default=1, gt=0)
    """Sequences per micro-batch per data-parallel rank (samples); gradients accumulate over micro-batches, so
    it must divide each rank's ``batch_size * samples_per_task / plan.dp`` samples. 1 in the paper: batch 512
    at dp = 2 is 256 serially accumulated micro-batches per rank (T1 §7). Above 1 the torch trainer packs
    consecutive samples into one variable-length forward (positions restart per sample; attention, the Gated
    DeltaNet scan and R3 replay never cross a sample), with the same loss and gradients as one at a time."""

    micro_batch_tokens: int | None = Field(default=None, gt=0)
    """Token budget of a packed micro-batch (tokens): a micro-batch also closes before the sample that would
    take it above this many tokens; a longer sample trains alone. ``None``: no budget, ``micro_batch_size``
    samples per micro-batch whatever their total. Only matters with ``micro_batch_size`` above 1. The
    capacity model prices a micro-batch of ``plan.token_wall`` tokens, so a budget at most that keeps packed
    micro-batches inside the priced memory. Chosen (the paper trains one sample per micro-batch, T1 §7)."""

    max_grad_norm: float = Field(default=1.0, gt=0)
    """Global gradient-norm clip for actor and critic. 1.0, chosen (the paper is silent)."""

    @model_validator(mode="after")
    def _check(self) -> PPOSpec:
        raise_if(ppo_violations(self))
        return self


def ppo_violations(p: PPOSpec) -> list[Violation]:
    """Rules of ``PPOSpec`` alone (field paths relative to the ppo section)."""
    v: list[Violation] = []
    if p.routing_replay and p.kl_coef != 0:
        v.append(
            Violation(
                "ppo.r3_no_kl",
                "kl_coef",
                f"kl_coef is {p.kl_coef} but routing_replay (R3) is on: the KL term would compare "
                "against routing the sampler never used (T1 §4.3); set kl_coef: 0 or "
                "routing_replay: false",
            )
        )
    if p.routing_replay and p.load_balancing_coef != 0:
        v.append(
            Violation(
                "ppo.r3_no_load_balancing",
                "load_balancing_coef",
                f"load_balancing_coef is {p.load_balancing_coef} but routing_replay (R3) is on: "
                "replayed routing is not the router's choice, so balancing it trains the router "
                "toward nothing (T1 §4.3); set load_balancing_coef: 0 or routing_replay: false",
            )
        )
    if isinstance(p.advantage, GRPOAdvantageSpec) and p.samples_per_task != p.advantage.group_size:
        v.append(
            Violation(
                "ppo.grpo_group",
                "samples_per_task",
                f"grpo forms groups of advantage.group_size = {p.advantage.group_size} samples per "
                f"task but samples_per_task is {p.samples_per_task}: set samples_per_task to "
                f"{p.advantage.group_size}",
            )
        )
    if not 0 < p.adam_betas[0] < 1 or not 0 < p.adam_betas[1] < 1:
        v.append(
            Violation("ppo.adam_betas", "adam_betas", f"adam_betas {p.adam_betas} must both lie in (0, 1)")
        )
    return v
