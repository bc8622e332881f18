"""The catalogue of validation rules and advisories, for ``t1 recipe validate`` users and the docs site.

Each entry names a rule id exactly as the validators raise it (``Violation.rule``), the field a failing
recipe is told to change, what the rule requires, and why (the paper's section or the library constraint).
A test keeps this catalogue and the validators in step.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """One documented rule.

    Attributes:
        id: rule id, e.g. ``"plan.device_product"``.
        field: dotted field the error points at.
        requires: what a valid recipe satisfies.
        why: the reason, with its source.
    """

    id: str
    field: str
    requires: str
    why: str


RULES: tuple[Rule, ...] = (
    # model
    Rule(
        "model.checkpoint_required",
        "model.checkpoint",
        "`init: checkpoint` has a checkpoint directory",
        "nothing to load otherwise",
    ),
    Rule(
        "model.checkpoint_unused",
        "model.checkpoint",
        "`init: random` has no checkpoint",
        "a checkpoint that is silently ignored is a mistake",
    ),
    Rule(
        "model.layer_pattern",
        "model.full_attention_interval",
        "`num_layers` is a multiple of `full_attention_interval`",
        "Qwen3.5 hybrid pattern (3 GDN : 1 attention)",
    ),
    Rule(
        "model.vocab_covers_tokenizer",
        "model.vocab_size",
        "`vocab_size` >= the tokenizer's real id count (248,077 for `qwen3.5`)",
        "every id the tokenizer emits needs an embedding row (Qwen3.5 pads to 248,320, T1 §7.1)",
    ),
    Rule("model.top_k", "model.top_k", "`top_k <= num_experts`", "the router picks k of E experts"),
    Rule(
        "model.gqa",
        "model.num_key_value_heads",
        "`num_key_value_heads` divides `num_attention_heads`",
        "grouped-query attention",
    ),
    Rule(
        "model.gdn_heads",
        "model.linear_num_value_heads",
        "`linear_num_key_heads` divides `linear_num_value_heads`",
        "Gated DeltaNet repeats key heads",
    ),
    Rule(
        "model.declared_expert_params",
        "model.declared_expert_params",
        "declared expert count within 1% of `3*h*moe_ffn*E*L`",
        "T1 §7.1: P_e = 116.0B",
    ),
    Rule(
        "model.declared_dense_params",
        "model.declared_dense_params",
        "declared dense count within 1% of the computed count, with or without the attention output gate",
        "T1 §7.1: P_d = 5.86B omits the output gate (capacity.md §11)",
    ),
    # pool
    Rule("pool.source_empty", "pool.source", "a non-empty source", "tasks must come from somewhere"),
    Rule(
        "pool.quality_rank_needs_shuffle",
        "pool.shuffle",
        "`order: quality_rank` uses `shuffle: per_epoch`",
        "T1 §5.4: otherwise the reward drifts with task quality",
    ),
    Rule(
        "pool.tasks_empty", "pool.tasks", "null or at least one task id", "an empty split trains on nothing"
    ),
    Rule("pool.tasks_duplicate", "pool.tasks", "each task id once", "a split names tasks, not weights"),
    Rule(
        "pool.tasks_and_limit",
        "pool.tasks",
        "`tasks` or `limit`, not both",
        "both cut the pool; one cut keeps the split unambiguous",
    ),
    Rule("pool.category_mix_range", "pool.category_mix", "every share in [0, 1]", "shares are fractions"),
    Rule(
        "pool.category_mix_sum", "pool.category_mix", "shares sum to 1 (within 1e-3)", "shares are fractions"
    ),
    Rule(
        "pool.category_mix_not_built",
        "pool.category_mix",
        "`category_mix: null`",
        "re-weighting the pool by category is not built; a mix would be ignored",
    ),
    # plan
    Rule(
        "plan.inference_lt_devices",
        "plan.inference_devices",
        "`inference_devices < devices`",
        "at least one device trains; 0 means co-located",
    ),
    Rule(
        "plan.device_product",
        "plan.dp",
        "`tp*pp*cp*dp == devices - inference_devices`",
        "T1 §7.1: tau*rho*kappa*delta = G (training side)",
    ),
    Rule(
        "plan.expert_region",
        "plan.ep",
        "`etp*ep` divides `tp*cp*dp`",
        "Megatron/torchtitan carve expert parallelism out of the tp*cp*dp ranks of a stage",
    ),
    Rule(
        "plan.token_wall_cp",
        "plan.token_wall",
        "`token_wall` is a multiple of `2*cp`",
        "load-balanced context parallelism splits a sequence into 2*cp chunks",
    ),
    Rule(
        "plan.token_wall_tp",
        "plan.token_wall",
        "`token_wall` is a multiple of `tp`",
        "sequence parallelism splits tokens over tp",
    ),
    Rule(
        "plan.b0_lt_budget",
        "plan.b0_gib",
        "`b0_gib < memory_budget_gib`",
        "T1 §7.1: b0 is a few percent of M",
    ),
    Rule(
        "plan.ep_divides_experts",
        "plan.ep",
        "`ep` divides `model.num_experts`",
        "every EP rank holds the same number of experts",
    ),
    Rule(
        "plan.tp_divides_heads",
        "plan.tp",
        "`tp` divides the attention, KV and Gated DeltaNet head counts",
        "tensor parallelism shards heads (Qwen3.5's 2 KV heads allow tp <= 2)",
    ),
    Rule("plan.pp_divides_layers", "plan.pp", "`pp` divides `model.num_layers`", "equal pipeline stages"),
    # ppo
    Rule(
        "ppo.r3_no_kl",
        "ppo.kl_coef",
        "`kl_coef == 0` when `routing_replay` is on",
        "T1 §4.3: the KL term would compare against routing the sampler never used",
    ),
    Rule(
        "ppo.r3_no_load_balancing",
        "ppo.load_balancing_coef",
        "`load_balancing_coef == 0` when `routing_replay` is on",
        "T1 §4.3: replayed routing is not the router's choice",
    ),
    Rule(
        "ppo.grpo_group",
        "ppo.samples_per_task",
        "grpo: `samples_per_task == advantage.group_size` (> 1)",
        "a group is the task's samples in one step",
    ),
    Rule("ppo.adam_betas", "ppo.adam_betas", "both betas in (0, 1)", "Adam"),
    Rule(
        "ppo.batch_splits_dp",
        "ppo.batch_size",
        "`batch_size * samples_per_task` is a multiple of `plan.dp`",
        "T1 §7: the batch is split evenly over data-parallel ranks",
    ),
    Rule(
        "ppo.micro_batch_divides",
        "ppo.micro_batch_size",
        "`micro_batch_size` divides each rank's `batch_size * samples_per_task / plan.dp` samples",
        "T1 §7: gradients accumulate over whole micro-batches (512 at dp 2: 256 of 1 per rank)",
    ),
    # rollout
    Rule(
        "rollout.admitted_le_launched",
        "rollout.admitted",
        "`admitted <= launched`",
        "T1 §7.4: oversampling launches more than it admits (560 for 512)",
    ),
    Rule(
        "rollout.deadlines_nest",
        "rollout.agent_deadline_s",
        "verifier < agent < remote deadline",
        "T1 §7: 900 < 3600 < 5400 s",
    ),
    Rule(
        "rollout.deadlines_sum",
        "rollout.remote_deadline_s",
        "agent + verifier deadline < remote deadline",
        "T1 §7.3: the remote deadline also covers building the sandbox (3600 + 900 < 5400 s)",
    ),
    Rule(
        "rollout.launched_whole_groups",
        "rollout.launched",
        "`launched` is a multiple of `ppo.samples_per_task`",
        "the scheduler launches whole groups of G trials per task",
    ),
    Rule(
        "rollout.continuation_not_with_groups",
        "rollout.continuation.enabled",
        "continuation off with `ppo.samples_per_task > 1`",
        "not built: a group would straddle two steps and two weight versions (T1 §10)",
    ),
    Rule(
        "rollout.creation_quota",
        "rollout.creation_rate_per_s",
        "`creation_rate_per_s * 60 <= creation_quota_per_min`",
        "T1 §7: 6/s under a 600/min quota",
    ),
    Rule(
        "rollout.compaction_below_context",
        "rollout.compaction_threshold_tokens",
        "`compaction_threshold_tokens < context_tokens`",
        "compaction must fire before the context overflows",
    ),
    Rule(
        "rollout.compaction_summary_fits",
        "rollout.compaction_summary_max_tokens",
        "`compaction_threshold_tokens + max_new_tokens + summary cap <= context_tokens`",
        "T1 §9: a budget that could not hold the summary failed 98.3% of summary attempts",
    ),
    Rule(
        "rollout.turn_fits_context",
        "rollout.max_new_tokens",
        "`max_new_tokens < context_tokens`",
        "a turn must fit the context",
    ),
    Rule(
        "rollout.admitted_is_batch",
        "rollout.admitted",
        "`admitted == ppo.batch_size * ppo.samples_per_task`",
        "T1 §7.4: each admitted trial is one sample",
    ),
    Rule(
        "rollout.context_fits_wall",
        "rollout.context_tokens",
        "`context_tokens <= plan.token_wall`",
        "a full-context chunk must fit one training micro-batch",
    ),
    Rule(
        "rollout.context_fits_model",
        "rollout.context_tokens",
        "`context_tokens <= model.max_position_embeddings`",
        "positions beyond the rotary range",
    ),
    # sft
    Rule(
        "sft.trajectories_file",
        "sft.trajectories",
        "`source: trajectories` names a JSONL file; `source: reference_solutions` names none",
        "the expert turns come from exactly one place",
    ),
    Rule(
        "sft.init_checkpoint",
        "sft.checkpoint",
        "`sft.init: checkpoint` has a checkpoint path; `init: random` has none",
        "nothing to load otherwise; a checkpoint that is silently ignored is a mistake",
    ),
    # cross-section
    Rule(
        "critic_warmup.grpo_has_no_critic",
        "critic_warmup.enabled",
        "grpo runs with the warm-up disabled",
        "T1 §9: GRPO has no critic to warm up",
    ),
    Rule(
        "engine.embedded_colocated",
        "plan.inference_devices",
        "embedded engine: `plan.inference_devices == 0`",
        "the embedded engine runs inside the trainer process",
    ),
    Rule(
        "engine.embedded_needs_torch",
        "trainer.backend",
        "embedded engine: `trainer.backend: torch`",
        "weights are shared in memory with a torch trainer",
    ),
    Rule(
        "engine.replicas_fill_partition",
        "engine.replicas",
        "sglang: `replicas * tp == plan.inference_devices` when that is > 0",
        "T1 §7: the inference partition is the replicas",
    ),
    Rule(
        "engine.sglang_ray_replicas",
        "runtime.ray.engine_replicas",
        "sglang on Ray: `engine.replicas == runtime.ray.engine_replicas`",
        "each replica actor is the client of one server",
    ),
    Rule(
        "engine.sglang_needs_devices",
        "plan.inference_devices",
        "sglang with no `urls` has `plan.inference_devices > 0`",
        "T1 launches the servers on those devices",
    ),
    Rule(
        "engine.sampling_greedy",
        "engine.sampling.top_k",
        "training decodes with `temperature > 0` and `top_k != 1`",
        "PPO's ratio needs the behaviour policy's probability; greedy decoding is a point mass the "
        "trainer's softmax never matches",
    ),
    Rule(
        "engine.sampling_truncated",
        "engine.sampling.top_k",
        "training decodes untruncated: `top_k: 0`, `top_p: 1`, `min_p: 0`",
        "the trainer scores the untruncated temperature-scaled distribution (trainer-side truncation is "
        "not built); evaluation may truncate (T1 §6)",
    ),
    Rule(
        "engine.urls_match_replicas",
        "engine.replicas",
        "one url per replica when urls are given",
        "each url is one replica",
    ),
    Rule(
        "trainer.megatron_needs_cuda",
        "trainer.device",
        "megatron: a cuda device",
        "Megatron-Core is GPU-only",
    ),
    Rule(
        "evaluation.walls_nest",
        "evaluation.agent_wall_s",
        "verifier < agent <= total timeout",
        "T1 §6: 900 < 3600 <= 18000 s",
    ),
    Rule(
        "evaluation.compaction_below_context",
        "evaluation.compaction_threshold_tokens",
        "`compaction_threshold_tokens < context_tokens` when set",
        "compaction must fire before the context overflows",
    ),
    Rule(
        "evaluation.suites_required",
        "evaluation.suites",
        "enabled evaluation lists its suites",
        "nothing to evaluate otherwise",
    ),
    Rule(
        "evaluation.context_fits_model",
        "evaluation.context_tokens",
        "enabled evaluation: `context_tokens <= model.max_position_embeddings`",
        "positions beyond the rotary range",
    ),
    Rule(
        "liveness.probes_nest",
        "liveness.probe_deadline_s",
        "probe period < deadline <= grace",
        "T1 §7: 30 < 120 <= 600 s",
    ),
    Rule(
        "liveness.collective_timeout_range",
        "liveness.collective_timeout_s",
        "`collective_timeout_s` in [1800, 7200]",
        "T1 §7.3: collective groups' deadlines are calibrated to 30-120 min, not interactive latencies",
    ),
    # tito
    Rule(
        "tito.normalize_max_s_bound",
        "tito.normalize_max_s",
        "`normalize_max_s <= 96`",
        "T1 §4.1: (s, u) in [0, 96] x [0, 16], s the prompt ids dropped",
    ),
    Rule(
        "tito.normalize_max_u_bound",
        "tito.normalize_max_u",
        "`normalize_max_u <= 16`",
        "T1 §4.1: (s, u) in [0, 96] x [0, 16], u the sampled ids dropped (a swapped pair is caught here)",
    ),
)
"""Every fatal rule."""

ADVISORIES: tuple[Rule, ...] = (
    Rule(
        "ppo.gae_normalized",
        "ppo.normalize_advantages",
        "(note) GAE advantages not whitened",
        "T1 §4.5: the critic is the only baseline",
    ),
    Rule(
        "reward.dense_on_binary_pool",
        "reward.kind",
        "(note) dense reward on a binary-only pool falls back",
        "T1 §3.1: TMax-15k verifiers emit only a binary outcome",
    ),
    Rule("ppo.r3_off", "ppo.routing_replay", "(note) routing replay off", "T1 §4.3, Fig. 6"),
    Rule("critic_warmup.cold", "critic_warmup.enabled", "(note) PPO with a cold critic", "T1 §4.5, Fig. 7"),
)
"""Allowed departures from the paper that ``Recipe.advisories()`` reports."""


def rules_markdown() -> str:
    """A Markdown table of ``RULES`` then ``ADVISORIES`` (rule, field, requires, why) for the docs site."""
    lines = ["| rule | field | requires | why |", "| --- | --- | --- | --- |"]
    for r in (*RULES, *ADVISORIES):
        lines.append(f"| `{r.id}` | `{r.field}` | {r.requires} | {r.why} |")
    return "\n".join(lines) + "\n"
