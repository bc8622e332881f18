"""The whole run: one ``Recipe`` with every section, and the rules that tie sections together."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from t1_spec._base import Spec, Violation, raise_if
from t1_spec.critic_warmup import CriticWarmupSpec
from t1_spec.engine import EmbeddedEngineSpec, EngineSpec, SGLangEngineSpec
from t1_spec.evaluation import EvaluationSpec
from t1_spec.liveness import LivenessSpec
from t1_spec.logging_spec import LoggingSpec
from t1_spec.model import ModelSpec
from t1_spec.plan import HEAD_FIELDS, PlanSpec, model_layout_violations
from t1_spec.pool import PoolSpec
from t1_spec.ppo import GAEAdvantageSpec, GRPOAdvantageSpec, PPOSpec
from t1_spec.reward import DenseRewardSpec, RewardSpec
from t1_spec.rollout import RolloutSpec
from t1_spec.runtime import RuntimeSpec
from t1_spec.sandbox import SandboxSpec
from t1_spec.sft import SftSpec
from t1_spec.tito import TitoSpec
from t1_spec.trainer import TrainerSpec

BINARY_ONLY_POOLS = frozenset({"TMax-15k"})
"""Named pools whose verifiers emit only a binary outcome, so a dense reward always falls back (T1 §3.1)."""


RUN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
"""What ``Recipe.name`` must match: a safe single path component (no separators, no ``..``, no leading dot),
1 to 100 characters."""


class Recipe(Spec):
    """A complete, validated T1 run: what to train, on which tasks, how, and where (``schema: t1/v1``)."""

    schema_: Literal["t1/v1"] = Field(alias="schema")
    """Spec version of this recipe (YAML key ``schema``). Only ``t1/v1`` exists; other values are refused by
    name (see ``t1_spec.versioning``)."""

    name: str = Field(pattern=RUN_NAME_PATTERN)
    """Run name, used for the run folder (``<logging.run_root>/<name>-<digest>``) and logs. A slug: a letter
    or digit, then up to 99 letters, digits, ``.``, ``_`` or ``-`` (no ``/``, no leading ``.``), so the run
    folder always stays inside ``logging.run_root``."""

    description: str = ""
    """Free text: what this run is for."""

    seed: int = Field(ge=0, lt=2**63)
    """Global seed: model initialisation, sampling and every derived random stream. In [0, 2**63): torch's
    generators take a 64-bit seed."""

    model: ModelSpec
    """Policy (and critic) architecture and starting weights."""

    pool: PoolSpec
    """Training task pool and its ordering."""

    plan: PlanSpec
    """Device split and parallelism plan."""

    reward: RewardSpec
    """Verifier report to scalar reward."""

    ppo: PPOSpec
    """PPO (or GRPO) hyperparameters and batch geometry."""

    critic_warmup: CriticWarmupSpec
    """Critic-only phase before the first policy step."""

    sft: SftSpec | None = None
    """Supervised warm start of the actor that ``t1 sft`` runs before PPO (T1 §6); ``None`` = no SFT phase."""

    rollout: RolloutSpec
    """Oversampling, admission control, deadlines and context budget."""

    tito: TitoSpec = Field(default_factory=TitoSpec)
    """Token-in-token-out stitching of multi-turn trajectories."""

    sandbox: SandboxSpec
    """Where commands and verifiers execute."""

    engine: EngineSpec
    """Inference engine serving the behaviour policy."""

    trainer: TrainerSpec
    """Trainer backend."""

    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)
    """Held-out evaluation during training."""

    liveness: LivenessSpec = Field(default_factory=LivenessSpec)
    """Probe and collective deadlines of cluster runs."""

    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)
    """Where the loop runs (one process or Ray actors) and whether rollout overlaps training; the default is
    the embedded synchronous loop."""

    logging: LoggingSpec = Field(default_factory=LoggingSpec)
    """Where run outputs go and how progress is reported."""

    @model_validator(mode="after")
    def _check(self) -> Recipe:
        raise_if(cross_violations(self))
        return self

    def advisories(self) -> list[Violation]:
        """Departures from the paper that are allowed but worth a line in ``t1 recipe validate``.

        Returns:
            non-fatal notes (same shape as rule violations, field paths from the recipe root).
        """
        return recipe_advisories(self)


def cross_violations(r: Recipe) -> list[Violation]:
    """Rules that span sections (field paths from the recipe root)."""
    m, p = r.model, r.plan
    # Parallelism against the architecture (rules shared with t1_capacity's plan search).
    v = list(
        model_layout_violations(
            p.tp, p.pp, p.ep, m.num_layers, m.num_experts, {h: getattr(m, h) for h in HEAD_FIELDS}
        )
    )
    v += _batch_violations(r)
    v += continuation_violations(r)
    v += _context_violations(r)
    if isinstance(r.ppo.advantage, GRPOAdvantageSpec) and r.critic_warmup.enabled:
        v.append(
            Violation(
                "critic_warmup.grpo_has_no_critic",
                "critic_warmup.enabled",
                "ppo.advantage.estimator is grpo, which uses no critic, but critic_warmup is enabled: "
                "set critic_warmup.enabled: false",
            )
        )
    v += _engine_violations(r)
    return v


def _batch_violations(r: Recipe) -> list[Violation]:
    """The batch's geometry: admitted trials, dp ranks, micro-batches, whole groups."""
    v: list[Violation] = []
    p, ppo, ro = r.plan, r.ppo, r.rollout
    samples = ppo.batch_size * ppo.samples_per_task
    if ro.admitted != samples:
        v.append(
            Violation(
                "rollout.admitted_is_batch",
                "rollout.admitted",
                f"rollout.admitted {ro.admitted} != ppo.batch_size * ppo.samples_per_task = "
                f"{ppo.batch_size} * {ppo.samples_per_task} = {samples}: every admitted trial is one "
                f"sample of the step's batch; set rollout.admitted to {samples}",
            )
        )
    if samples % p.dp:
        v.append(
            Violation(
                "ppo.batch_splits_dp",
                "ppo.batch_size",
                f"the batch of {samples} samples does not split evenly over dp {p.dp} ranks: make "
                "batch_size * samples_per_task a multiple of plan.dp",
            )
        )
    if not samples % p.dp and (samples // p.dp) % ppo.micro_batch_size:
        per_rank = samples // p.dp
        v.append(
            Violation(
                "ppo.micro_batch_divides",
                "ppo.micro_batch_size",
                f"each of the dp {p.dp} ranks takes {per_rank} samples of the batch of {samples}, which "
                f"ppo.micro_batch_size {ppo.micro_batch_size} does not split into whole micro-batches "
                f"(T1 §7: 512 samples at dp 2 are 256 micro-batches of 1 per rank): pick a divisor of "
                f"{per_rank}",
            )
        )
    g = ppo.samples_per_task
    if ro.launched % g:
        v.append(
            Violation(
                "rollout.launched_whole_groups",
                "rollout.launched",
                f"rollout.launched {ro.launched}: not a multiple of ppo.samples_per_task {g}; the scheduler "
                f"launches whole groups of {g} trials per task (launched / {g} tasks a step), so set it to "
                f"{max(g, ro.launched // g * g)} or {(ro.launched // g + 1) * g}",
            )
        )
    return v


def _context_violations(r: Recipe) -> list[Violation]:
    """The rollout's and evaluation's context against the token wall and the model's positions."""
    v: list[Violation] = []
    m, p, ro = r.model, r.plan, r.rollout
    if ro.context_tokens > p.token_wall:
        v.append(
            Violation(
                "rollout.context_fits_wall",
                "rollout.context_tokens",
                f"rollout.context_tokens {ro.context_tokens} exceeds plan.token_wall {p.token_wall}: "
                "a chunk as long as the context would not fit one training micro-batch; lower "
                "context_tokens or raise the token wall",
            )
        )
    if ro.context_tokens > m.max_position_embeddings:
        v.append(
            Violation(
                "rollout.context_fits_model",
                "rollout.context_tokens",
                f"rollout.context_tokens {ro.context_tokens} exceeds model.max_position_embeddings "
                f"{m.max_position_embeddings}: lower context_tokens",
            )
        )

    ev = r.evaluation
    if ev.enabled and ev.context_tokens > m.max_position_embeddings:
        v.append(
            Violation(
                "evaluation.context_fits_model",
                "evaluation.context_tokens",
                f"evaluation.context_tokens {ev.context_tokens} exceeds model.max_position_embeddings "
                f"{m.max_position_embeddings}: lower evaluation.context_tokens",
            )
        )
    return v


def _engine_violations(r: Recipe) -> list[Violation]:
    """The engine, the trainer backend and the device split between them."""
    v: list[Violation] = []
    p, eng = r.plan, r.engine
    if isinstance(eng, EmbeddedEngineSpec):
        if p.inference_devices != 0:
            v.append(
                Violation(
                    "engine.embedded_colocated",
                    "plan.inference_devices",
                    f"the embedded engine runs inside the trainer process, but plan.inference_devices "
                    f"is {p.inference_devices}: set it to 0 (co-located) or use engine.kind: sglang",
                )
            )
        if r.trainer.backend != "torch":
            v.append(
                Violation(
                    "engine.embedded_needs_torch",
                    "trainer.backend",
                    f"the embedded engine shares weights in memory with a torch trainer, but "
                    f"trainer.backend is {r.trainer.backend!r}: set trainer.backend: torch or "
                    "engine.kind: sglang",
                )
            )
    elif isinstance(eng, SGLangEngineSpec):
        if p.inference_devices > 0 and eng.replicas * eng.tp != p.inference_devices:
            fix = (
                f"set engine.replicas to {p.inference_devices // eng.tp}"
                if p.inference_devices % eng.tp == 0
                else f"pick engine.tp dividing {p.inference_devices}"
            )
            v.append(
                Violation(
                    "engine.replicas_fill_partition",
                    "engine.replicas",
                    f"engine.replicas * engine.tp = {eng.replicas} * {eng.tp} = "
                    f"{eng.replicas * eng.tp} but plan.inference_devices is {p.inference_devices}: "
                    f"the replicas must fill the inference partition exactly; {fix}",
                )
            )
        if r.runtime.kind == "ray" and eng.replicas != r.runtime.ray.engine_replicas:
            v.append(
                Violation(
                    "engine.sglang_ray_replicas",
                    "runtime.ray.engine_replicas",
                    f"on Ray each engine replica actor is the client of one SGLang server (engine.urls[i]), "
                    f"but runtime.ray.engine_replicas is {r.runtime.ray.engine_replicas} and engine.replicas "
                    f"is {eng.replicas}: set both to the number of servers",
                )
            )
        if p.inference_devices == 0 and not eng.urls:
            v.append(
                Violation(
                    "engine.sglang_needs_devices",
                    "plan.inference_devices",
                    "engine.kind is sglang with no urls, so T1 must launch the servers, but "
                    "plan.inference_devices is 0: give the servers devices, or list running "
                    "servers in engine.urls",
                )
            )
    if r.trainer.backend == "megatron" and not r.trainer.device.startswith("cuda"):
        v.append(
            Violation(
                "trainer.megatron_needs_cuda",
                "trainer.device",
                f"the megatron backend runs on CUDA devices, but trainer.device is "
                f"{r.trainer.device!r}: set trainer.device: cuda or trainer.backend: torch",
            )
        )
    return v


def continuation_violations(r: Recipe) -> list[Violation]:
    """What partial-rollout continuation (``rollout.continuation``, T1 §10) is not built with, on any machine.

    Built on both runtimes (in process, and on Ray, where the sandbox hosts hold the parked trials across
    the publication barrier), one trial per task. Not built: groups (``ppo.samples_per_task > 1``: a group
    would straddle two steps, its members drawn under different versions and normalised under one GRPO
    baseline), and checkpoints (``trainer.checkpoint_every > 0``: a checkpoint does not save parked trials,
    so a resumed run would lose them silently).
    """
    if not r.rollout.continuation.enabled:
        return []
    field, v = "rollout.continuation.enabled", []
    g = r.ppo.samples_per_task
    if g > 1:
        v.append(
            Violation(
                "rollout.continuation_not_with_groups",
                field,
                f"partial-rollout continuation parks single trials, and groups of ppo.samples_per_task {g} "
                "are not built with it (a group would straddle two steps and two weight versions under one "
                "group baseline); set ppo.samples_per_task to 1 or the continuation off",
            )
        )
    return v


def recipe_advisories(r: Recipe) -> list[Violation]:
    """Allowed departures from the paper (see ``Recipe.advisories``)."""
    a: list[Violation] = []
    if isinstance(r.ppo.advantage, GAEAdvantageSpec) and r.ppo.normalize_advantages:
        a.append(
            Violation(
                "ppo.gae_normalized",
                "ppo.normalize_advantages",
                "GAE advantages are whitened per batch; the paper keeps them raw so the critic is "
                "the only baseline (T1 §4.5)",
            )
        )
    if isinstance(r.reward, DenseRewardSpec) and r.pool.source in BINARY_ONLY_POOLS:
        a.append(
            Violation(
                "reward.dense_on_binary_pool",
                "reward.kind",
                f"pool {r.pool.source} has binary-only verifiers (T1 §3.1): the dense reward will "
                "fall back to the binary outcome on every trial",
            )
        )
    if not r.ppo.routing_replay:
        a.append(
            Violation(
                "ppo.r3_off",
                "ppo.routing_replay",
                "routing replay (R3) is off: the train-inference log-prob gap on the MoE grows "
                "(T1 §4.3, Fig. 6: 0.021 without TITO and R3, 0.013 with both)",
            )
        )
    if isinstance(r.ppo.advantage, GAEAdvantageSpec) and not r.critic_warmup.enabled:
        a.append(
            Violation(
                "critic_warmup.cold",
                "critic_warmup.enabled",
                "the critic starts cold: the paper's cold critic opened at explained variance -33.6 "
                "(T1 §4.5, Fig. 7)",
            )
        )
    return a


__all__ = ["BINARY_ONLY_POOLS", "Recipe", "continuation_violations", "cross_violations", "recipe_advisories"]
