"""Every cross-field rule refuses a recipe that breaks it, names the field to change and says how.

Each case starts from a shipped recipe (tiny-cpu or t1-122b) and breaks exactly one rule with dotlist
overrides. ``test_every_rule_has_a_breaking_case`` keeps this table complete.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from t1_spec import load_recipe
from t1_spec.rules import ADVISORIES, RULES, rules_markdown

SRC = Path(__file__).resolve().parents[2] / "packages" / "t1-spec" / "src" / "t1_spec"

# rule id, base recipe ("tiny" | "prod"), overrides, field the error must name, words the message must hold
CASES: list[tuple[str, str, tuple[str, ...], str, str]] = [
    # model
    (
        "model.checkpoint_required",
        "tiny",
        ("model.init=checkpoint",),
        "model.checkpoint",
        "set model.checkpoint",
    ),
    ("model.checkpoint_unused", "tiny", ("model.checkpoint=/ckpt",), "model.checkpoint", "init: checkpoint"),
    (
        "model.layer_pattern",
        "tiny",
        ("model.num_layers=6",),
        "model.full_attention_interval",
        "not a multiple",
    ),
    (
        "model.vocab_covers_tokenizer",
        "tiny",
        ("model.vocab_size=1000",),
        "model.vocab_size",
        "set model.vocab_size to at least 248077",
    ),
    ("model.top_k", "tiny", ("model.top_k=9",), "model.top_k", "lower top_k"),
    ("model.gqa", "tiny", ("model.num_key_value_heads=3",), "model.num_key_value_heads", "divides"),
    (
        "model.gdn_heads",
        "tiny",
        ("model.linear_num_value_heads=5",),
        "model.linear_num_value_heads",
        "multiple",
    ),
    (
        "model.declared_expert_params",
        "prod",
        ("model.declared_expert_params=100e9",),
        "model.declared_expert_params",
        "differs",
    ),
    (
        "model.declared_dense_params",
        "prod",
        ("model.declared_dense_params=5.0e9",),
        "model.declared_dense_params",
        "matches neither",
    ),
    # sft
    (
        "sft.trajectories_file",
        "tiny",
        ("sft.source=trajectories",),
        "sft.trajectories",
        "source: trajectories",
    ),
    ("sft.init_checkpoint", "tiny", ("sft.init=checkpoint",), "sft.checkpoint", "init: checkpoint"),
    # pool
    ("pool.source_empty", "tiny", ("pool.source=' '",), "pool.source", "builtin:mini"),
    ("pool.quality_rank_needs_shuffle", "prod", ("pool.shuffle=none",), "pool.shuffle", "shuffle: per_epoch"),
    ("pool.tasks_empty", "tiny", ("pool.tasks=[]",), "pool.tasks", "null for all"),
    ("pool.tasks_duplicate", "tiny", ("pool.tasks=[a,b,a]",), "pool.tasks", "['a'] more than once"),
    ("pool.tasks_and_limit", "tiny", ("pool.tasks=[a]", "pool.limit=1"), "pool.tasks", "give one"),
    (
        "pool.category_mix_range",
        "tiny",
        ("pool.category_mix={a: 1.5, b: -0.5}",),
        "pool.category_mix",
        "[0, 1]",
    ),
    (
        "pool.category_mix_sum",
        "tiny",
        ("pool.category_mix={a: 0.5, b: 0.2}",),
        "pool.category_mix",
        "rescale",
    ),
    (
        "pool.category_mix_not_built",
        "prod",
        ("pool.category_mix={scripting: 0.5, data: 0.5}",),
        "pool.category_mix",
        "set it to null",
    ),
    # plan
    (
        "plan.inference_lt_devices",
        "tiny",
        ("plan.inference_devices=1",),
        "plan.inference_devices",
        "no training",
    ),
    ("plan.device_product", "prod", ("plan.dp=4",), "plan.dp", "64"),
    ("plan.expert_region", "prod", ("plan.ep=32",), "plan.ep", "divides tp*cp*dp"),
    ("plan.token_wall_cp", "prod", ("plan.token_wall=86012",), "plan.token_wall", "multiple of 8"),
    ("plan.token_wall_tp", "tiny", ("plan.tp=3", "plan.devices=3"), "plan.token_wall", "multiple of tp"),
    ("plan.b0_lt_budget", "prod", ("plan.b0_gib=200",), "plan.b0_gib", "few percent"),
    (
        "plan.ep_divides_experts",
        "prod",
        ("model.num_experts=200", "model.declared_expert_params=null"),
        "plan.ep",
        "divisors of num_experts",
    ),
    ("plan.tp_divides_heads", "prod", ("plan.tp=4", "plan.dp=1"), "plan.tp", "tp <= 2"),
    ("plan.pp_divides_layers", "prod", ("plan.pp=5", "plan.devices=144"), "plan.pp", "divisors"),
    # ppo
    ("ppo.r3_no_kl", "tiny", ("ppo.kl_coef=0.01",), "ppo.kl_coef", "kl_coef: 0"),
    (
        "ppo.r3_no_load_balancing",
        "tiny",
        ("ppo.load_balancing_coef=0.01",),
        "ppo.load_balancing_coef",
        "load_balancing_coef: 0",
    ),
    (
        "ppo.grpo_group",
        "tiny",
        ("ppo.advantage.estimator=grpo", "ppo.advantage.group_size=2"),
        "ppo.samples_per_task",
        "set samples_per_task to 2",
    ),
    ("ppo.adam_betas", "tiny", ("ppo.adam_betas=[0.9, 1.0]",), "ppo.adam_betas", "(0, 1)"),
    (
        "ppo.batch_splits_dp",
        "prod",
        ("ppo.batch_size=511", "rollout.admitted=511"),
        "ppo.batch_size",
        "multiple of plan.dp",
    ),
    (
        "ppo.micro_batch_divides",
        "prod",
        ("ppo.micro_batch_size=3",),  # 512 samples at dp 2: 256 per rank
        "ppo.micro_batch_size",
        "pick a divisor of 256",
    ),
    # rollout
    ("rollout.admitted_le_launched", "tiny", ("rollout.launched=3",), "rollout.admitted", "raise launched"),
    (
        "rollout.deadlines_nest",
        "tiny",
        ("rollout.verifier_deadline_s=200",),
        "rollout.agent_deadline_s",
        "verifier < agent < remote",
    ),
    (
        "rollout.deadlines_sum",
        "tiny",
        ("rollout.remote_deadline_s=180",),  # = agent 120 + verifier 60: no time left to build the sandbox
        "rollout.remote_deadline_s",
        "above their sum",
    ),
    (
        "rollout.launched_whole_groups",
        "tiny",
        ("ppo.samples_per_task=2", "rollout.launched=9", "rollout.admitted=8"),
        "rollout.launched",
        "set it to 8 or 10",
    ),
    (
        "rollout.continuation_not_with_groups",
        "tiny",
        (
            "rollout.continuation.enabled=true",
            "ppo.samples_per_task=2",
            "rollout.launched=10",
            "rollout.admitted=8",
        ),
        "rollout.continuation.enabled",
        "groups of ppo.samples_per_task 2 are not built with it",
    ),
    (
        "rollout.creation_quota",
        "tiny",
        ("rollout.creation_rate_per_s=20",),
        "rollout.creation_rate_per_s",
        "at most 10",
    ),
    (
        "rollout.compaction_below_context",
        "tiny",
        ("rollout.compaction_threshold_tokens=4096",),
        "rollout.compaction_threshold_tokens",
        "below context_tokens",
    ),
    (
        "rollout.compaction_summary_fits",
        "tiny",
        ("rollout.compaction_summary_max_tokens=600",),
        "rollout.compaction_summary_max_tokens",
        "98.3%",
    ),
    (
        "evaluation.compaction_below_context",
        "tiny",
        ("evaluation.compaction_threshold_tokens=96000",),
        "evaluation.compaction_threshold_tokens",
        "below context_tokens",
    ),
    (
        "rollout.turn_fits_context",
        "tiny",
        ("rollout.max_new_tokens=4096",),
        "rollout.max_new_tokens",
        "lower",
    ),
    (
        "rollout.admitted_is_batch",
        "tiny",
        ("rollout.admitted=3",),  # tiny-cpu's admitted follows ppo.batch_size (4) unless set
        "rollout.admitted",
        "set rollout.admitted to 4",
    ),
    (
        "rollout.context_fits_wall",
        "tiny",
        ("rollout.context_tokens=8192",),
        "rollout.context_tokens",
        "raise the token wall",
    ),
    (
        "rollout.context_fits_model",
        "tiny",
        ("model.max_position_embeddings=2048",),
        "rollout.context_tokens",
        "max_position_embeddings",
    ),
    # critic warm-up, engine, trainer
    (
        "critic_warmup.grpo_has_no_critic",
        "prod",
        (
            "ppo.advantage.estimator=grpo",
            "ppo.advantage.group_size=4",
            "ppo.samples_per_task=4",
            "ppo.batch_size=128",
        ),
        "critic_warmup.enabled",
        "critic_warmup.enabled: false",
    ),
    (
        "engine.embedded_colocated",
        "tiny",
        ("plan.devices=2", "plan.inference_devices=1"),
        "plan.inference_devices",
        "co-located",
    ),
    (
        "engine.embedded_needs_torch",
        "tiny",
        ("trainer.backend=megatron", "trainer.device=cuda"),
        "trainer.backend",
        "trainer.backend: torch",
    ),
    ("engine.sampling_greedy", "tiny", ("engine.sampling.top_k=1",), "engine.sampling.top_k", "argmax"),
    (
        "engine.sampling_truncated",
        "prod",
        ("engine.sampling.top_p=0.95", "engine.sampling.top_k=20"),
        "engine.sampling.top_k",
        "never sampled",
    ),
    ("engine.replicas_fill_partition", "prod", ("engine.replicas=4",), "engine.replicas", "fill"),
    (
        "engine.sglang_ray_replicas",
        "tiny",
        (
            "engine.kind=sglang",
            "engine.urls=[http://a:30000]",
            "runtime.kind=ray",
            "runtime.ray.engine_replicas=2",
        ),
        "runtime.ray.engine_replicas",
        "client of one SGLang server",
    ),
    ("engine.sglang_needs_devices", "tiny", ("engine.kind=sglang",), "plan.inference_devices", "engine.urls"),
    (
        "engine.urls_match_replicas",
        "tiny",
        ("engine.kind=sglang", "engine.urls=[http://a:30000, http://b:30000]"),
        "engine.replicas",
        "one url per replica",
    ),
    (
        "trainer.megatron_needs_cuda",
        "prod",
        ("trainer.device=cpu",),
        "trainer.device",
        "trainer.device: cuda",
    ),
    # evaluation
    (
        "evaluation.walls_nest",
        "prod",
        ("evaluation.verifier_wall_s=4000",),
        "evaluation.agent_wall_s",
        "verifier < agent <= total",
    ),
    (
        "evaluation.suites_required",
        "tiny",
        ("evaluation.enabled=true",),
        "evaluation.suites",
        "enabled: false",
    ),
    (
        "evaluation.context_fits_model",
        "prod",
        ("model.max_position_embeddings=90000",),
        "evaluation.context_tokens",
        "lower evaluation.context_tokens",
    ),
    # liveness
    (
        "liveness.probes_nest",
        "prod",
        ("liveness.probe_period_s=300",),
        "liveness.probe_deadline_s",
        "period < deadline <= grace",
    ),
    (
        "liveness.collective_timeout_range",
        "prod",
        ("liveness.collective_timeout_s=30",),  # 30 s, not 30 min
        "liveness.collective_timeout_s",
        "within [1800, 7200] s",
    ),
    # tito
    (
        "tito.normalize_max_s_bound",
        "tiny",
        ("tito.normalize_max_s=97",),
        "tito.normalize_max_s",
        "exceeds the paper's bound 96",
    ),
    (
        "tito.normalize_max_u_bound",
        "prod",
        ("tito.normalize_max_s=16", "tito.normalize_max_u=96"),
        "tito.normalize_max_u",
        "look swapped",
    ),
]


@pytest.mark.parametrize(("rule", "base", "overrides", "field", "words"), CASES, ids=[c[0] for c in CASES])
def test_rule_refuses_a_recipe_that_breaks_it(
    rule, base, overrides, field, words, tiny_path, prod_path, problems_of
) -> None:
    path = tiny_path if base == "tiny" else prod_path
    probs = problems_of(path, *overrides)
    hits = [p for p in probs if p.rule == rule]
    assert hits, f"rule {rule} did not fire; got {[(p.rule, p.field) for p in probs]}"
    assert hits[0].field == field
    assert words in hits[0].message


def test_every_rule_has_a_breaking_case() -> None:
    declared = set()
    for src in SRC.glob("*.py"):
        declared |= set(re.findall(r'Violation\(\s*"([a-z_]+\.[a-z_0-9]+)"', src.read_text(encoding="utf-8")))
    advisories = {a.id for a in ADVISORIES}
    assert declared - advisories == {c[0] for c in CASES}
    assert declared - advisories == {r.id for r in RULES}, "rules.RULES is out of step with the validators"
    assert advisories <= declared


def test_catalogue_fields_match_what_the_rules_report() -> None:
    assert {c[0]: c[3] for c in CASES} == {r.id: r.field for r in RULES}


def test_rules_markdown_lists_every_rule() -> None:
    text = rules_markdown()
    assert all(f"`{r.id}`" in text for r in (*RULES, *ADVISORIES))


def test_reward_scale_must_be_a_positive_count(tiny_path, problems_of) -> None:
    # S is a count of assertions, at least 1 (T1 §5.2): r = P / S.
    probs = problems_of(tiny_path, "reward.scale=0")
    assert [p.field for p in probs] == ["reward.scale"]
    assert "greater than or equal to 1" in probs[0].message
    probs = problems_of(tiny_path, "reward.scale=17.5")
    assert [p.field for p in probs] == ["reward.scale"] and "integer" in probs[0].message


def test_r3_off_admits_kl_and_load_balancing(tiny_path) -> None:
    r = load_recipe(
        tiny_path, ["ppo.routing_replay=false", "ppo.kl_coef=0.01", "ppo.load_balancing_coef=0.01"]
    )
    assert r.ppo.kl_coef == 0.01


def test_grpo_with_matching_groups_validates(prod_path) -> None:
    r = load_recipe(
        prod_path,
        [
            "ppo.advantage.estimator=grpo",
            "ppo.advantage.group_size=4",
            "ppo.samples_per_task=4",
            "ppo.batch_size=128",
            "critic_warmup.enabled=false",
        ],
    )
    assert r.ppo.advantage.estimator == "grpo"
    assert r.rollout.admitted == 128 * 4


def test_gae_with_normalized_advantages_is_allowed_with_a_note(tiny_path) -> None:
    r = load_recipe(tiny_path, ["ppo.normalize_advantages=true"])
    assert "ppo.gae_normalized" in {a.rule for a in r.advisories()}


def test_dense_reward_on_binary_only_pool_is_noted(tiny_path) -> None:
    r = load_recipe(tiny_path, ["pool.source=TMax-15k"])
    assert "reward.dense_on_binary_pool" in {a.rule for a in r.advisories()}


def test_production_recipe_has_no_departures_from_the_paper(prod) -> None:
    assert prod.advisories() == []


def test_all_violations_are_reported_at_once(tiny_path, problems_of) -> None:
    probs = problems_of(tiny_path, "rollout.launched=3", "rollout.verifier_deadline_s=200")
    assert {p.rule for p in probs} == {"rollout.admitted_le_launched", "rollout.deadlines_nest"}


def test_sglang_with_external_urls_needs_no_inference_devices(tiny_path) -> None:
    r = load_recipe(tiny_path, ["engine.kind=sglang", "engine.urls=[http://a:30000]"])
    assert r.engine.kind == "sglang" and r.plan.inference_devices == 0


def test_vocab_exactly_the_tokenizer_ids_validates(tiny_path, problems_of) -> None:
    # 248,077 real Qwen3.5 ids (0..248,076): the smallest vocabulary that covers them is accepted.
    assert load_recipe(tiny_path, ["model.vocab_size=248077"]).model.vocab_size == 248_077
    probs = problems_of(tiny_path, "model.vocab_size=248076")
    assert [p.rule for p in probs] == ["model.vocab_covers_tokenizer"]


def test_tokenizer_id_count_matches_the_real_tokenizer() -> None:
    """The constant kept in t1_spec (which may not import the tokenizer) equals the loaded vocabulary."""
    from t1_spec.model import TOKENIZER_ID_COUNTS
    from t1_tito import load_tokenizer

    assert load_tokenizer("qwen3.5").vocab_size == TOKENIZER_ID_COUNTS["qwen3.5"] == 248_077


def test_greedy_in_any_form_gets_one_message(tiny_path, problems_of) -> None:
    by_temperature = problems_of(tiny_path, "engine.sampling.temperature=0")
    by_top_k = problems_of(tiny_path, "engine.sampling.top_k=1")
    assert [p.rule for p in by_temperature] == [p.rule for p in by_top_k] == ["engine.sampling_greedy"]
    assert by_temperature[0].field == "engine.sampling.temperature"
    assert by_temperature[0].message.split(" (override")[0] == by_top_k[0].message.split(" (override")[0]


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (("engine.sampling.top_p=0.95",), "top_p = 0.95"),
        (("engine.sampling.min_p=0.05",), "min_p = 0.05"),
        (("engine.sampling.top_k=2",), "top_k = 2"),
    ],
)
def test_each_truncation_is_refused_by_name_for_training(overrides, named, tiny_path, problems_of) -> None:
    probs = problems_of(tiny_path, *overrides)
    assert [p.rule for p in probs] == ["engine.sampling_truncated"] and named in probs[0].message


def test_evaluation_decoding_may_still_truncate(tiny_path) -> None:
    r = load_recipe(tiny_path, ["evaluation.top_k=1", "evaluation.top_p=0.5"])
    assert r.evaluation.top_k == 1 and r.evaluation.top_p == 0.5
