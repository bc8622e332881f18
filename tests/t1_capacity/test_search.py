"""Plan search over a device count (T1 §7.1): every valid plan priced, admitted ones ranked."""

import json
from itertools import product
from pathlib import Path

import pytest

from t1_capacity import (
    PAPER_CONSTANTS,
    PAPER_MODEL,
    Plan,
    check_plan,
    enumerate_plans,
    plan_problems,
    search_plans,
)

WALL_84K = 86_016
BASE = Plan(token_wall=WALL_84K, memory_budget_gib=95.0)


def brute_force(g: int, wall: int, batch_samples: int = 512) -> set[tuple[int, int, int, int, int]]:
    """Independent enumeration: all 5-tuples with tp*pp*cp*dp = g under the layout rules.

    Qwen3.5-122B-A10B: 32 query heads, 2 KV heads, 16 GDN key heads, 64 GDN value heads, shared expert
    width 1024, 48 layers, 256 experts; the token wall is a multiple of tp and of 2*cp (t1_spec's rules);
    the batch of ``batch_samples`` samples splits evenly over dp (rule ppo.batch_splits_dp).
    """
    out = set()
    rng = [d for d in range(1, g + 1) if g % d == 0]
    for tp, pp, cp in product(rng, rng, rng):
        if g % (tp * pp * cp):
            continue
        dp = g // (tp * pp * cp)
        if any(h % tp for h in (32, 2, 16, 64, 1024)) or 48 % pp or wall % tp or wall % (2 * cp):
            continue
        if batch_samples % dp:
            continue
        for ep in range(1, 257):
            if 256 % ep == 0 and (tp * cp * dp) % ep == 0:
                out.add((tp, pp, cp, dp, ep))
    return out


@pytest.mark.parametrize(("g", "wall"), [(16, WALL_84K), (64, WALL_84K), (96, WALL_84K), (64, 10_000)])
def test_enumeration_is_complete_and_valid(g, wall):
    base = Plan(token_wall=wall)
    got = {(p.tp, p.pp, p.cp, p.dp, p.ep) for p in enumerate_plans(PAPER_MODEL, g, base)}
    assert got == brute_force(g, wall)
    assert all(not plan_problems(p, PAPER_MODEL) for p in enumerate_plans(PAPER_MODEL, g, base))


def test_search_keeps_exactly_the_plans_that_fit():
    result = search_plans(PAPER_MODEL, BASE, PAPER_CONSTANTS, training_devices=64)
    assert result.fitting and result.refused
    for cand in result.fitting[:20] + result.refused[:20]:
        assert check_plan(PAPER_MODEL, cand.plan, PAPER_CONSTANTS).fits == cand.fits


def test_production_plan_is_admitted_and_cp2_refused():
    result = search_plans(PAPER_MODEL, BASE, PAPER_CONSTANTS, training_devices=64)
    admitted = {c.plan.label() for c in result.fitting}
    refused = {c.plan.label() for c in result.refused}
    assert "tp2 pp4 cp4 dp2 ep16" in admitted
    assert "tp2 pp4 cp2 dp4 ep16" in refused


def test_ranked_by_data_parallelism_then_headroom():
    result = search_plans(PAPER_MODEL, BASE, PAPER_CONSTANTS, training_devices=64, rank="dp")
    keys = [(-c.plan.dp, -c.headroom_gib) for c in result.fitting]
    assert keys == sorted(keys)
    by_headroom = search_plans(PAPER_MODEL, BASE, PAPER_CONSTANTS, training_devices=64, rank="headroom")
    heads = [c.headroom_gib for c in by_headroom.fitting]
    assert heads == sorted(heads, reverse=True)


def test_raising_cp_consumes_data_parallelism():
    """T1 §7.1: tau rho kappa delta = G is fixed, so a higher cp leaves fewer dp ranks (256 each)."""
    prod = Plan(tp=2, pp=4, cp=4, dp=2, ep=16, token_wall=WALL_84K)
    assert prod.microbatches_per_rank == 256


def test_refusals_are_explained_with_a_term():
    result = search_plans(PAPER_MODEL, BASE, PAPER_CONSTANTS, training_devices=64)
    cand = result.refused[0]
    text = cand.explain(PAPER_MODEL, PAPER_CONSTANTS)
    assert "exceeds M" in text and f"(by {-cand.headroom_gib:.1f} GiB); binding term" in text
    assert text == check_plan(PAPER_MODEL, cand.plan, PAPER_CONSTANTS).reason()  # one wording, one rule


def test_1024_devices_search_runs():
    result = search_plans(PAPER_MODEL, BASE, PAPER_CONSTANTS, training_devices=1024)
    assert result.n_plans == len(brute_force(1024, WALL_84K))
    assert {c.plan.tp for c in result.fitting + result.refused} == {1, 2}  # 2 KV heads: tp <= 2
    assert result.fitting[0].plan.training_devices == 1024


def test_ep_maximal_only_keeps_one_ep_per_layout():
    result = search_plans(PAPER_MODEL, BASE, PAPER_CONSTANTS, training_devices=64, ep_maximal_only=True)
    layouts = [(c.plan.tp, c.plan.pp, c.plan.cp, c.plan.dp) for c in result.fitting + result.refused]
    assert len(layouts) == len(set(layouts))


def test_unknown_ranking_is_refused():
    with pytest.raises(ValueError, match="rank must be"):
        search_plans(PAPER_MODEL, BASE, PAPER_CONSTANTS, training_devices=64, rank="speed")


def test_search_lists_no_plan_the_recipe_validator_rejects():
    """Every plan the search prices loads as the production recipe's plan (t1_spec's own layout rules)."""
    from pathlib import Path

    from t1_spec import load_recipe

    prod = Path(__file__).resolve().parents[2] / "recipes" / "t1-122b.yaml"
    recipe = load_recipe(prod)
    result = search_plans(PAPER_MODEL, BASE, PAPER_CONSTANTS, training_devices=64)
    for cand in result.fitting + result.refused:
        p = cand.plan
        load_recipe(prod, [f"plan.{k}={getattr(p, k)}" for k in ("tp", "pp", "cp", "dp", "ep")])
    assert recipe.plan.training_devices == 64


def test_tp4_is_not_enumerated_for_two_kv_heads():
    """tp must divide the 2 KV heads (t1_spec rule plan.tp_divides_heads): tp 4 and 8 are never offered."""
    tps = {p.tp for p in enumerate_plans(PAPER_MODEL, 64, BASE)}
    assert tps == {1, 2}
    assert any("num_key_value_heads" in s for s in plan_problems(Plan(tp=4, dp=16), PAPER_MODEL))


def _validator_problems(recipe_dict: dict, inference: int, p: Plan) -> str | None:
    """Run t1_spec's whole recipe validator with ``p`` as the plan; the error text, or None when accepted."""
    import pydantic

    from t1_spec import Recipe

    d = {**recipe_dict, "plan": {**recipe_dict["plan"], "devices": inference + p.training_devices}}
    d["plan"].update(tp=p.tp, pp=p.pp, cp=p.cp, dp=p.dp, ep=p.ep, etp=p.etp, token_wall=p.token_wall)
    try:
        Recipe.model_validate(d)
    except (pydantic.ValidationError, ValueError) as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("g", [96, 1024])
def test_search_over_a_recipe_returns_only_plans_its_validator_accepts(g):
    """Issue: over 96 devices the search ranked dp = 6 plans (512 / 6 = 85.33 samples per rank) as fitting,
    which ``ppo.batch_splits_dp`` refuses. Every plan priced, fitting or refused, must validate."""
    from t1_capacity import load
    from t1_spec import load_recipe
    from t1_spec.loading import recipe_to_dict

    prod = Path(__file__).resolve().parents[2] / "recipes" / "t1-122b.yaml"
    inputs = load(prod)
    d = recipe_to_dict(load_recipe(prod))
    # The plan the issue saw ranked 3rd: the validator refuses it for the batch split alone.
    assert "ppo.batch_splits_dp" in (_validator_problems(d, 64, Plan(tp=1, pp=2, cp=8, dp=6, ep=16)) or "")
    result = search_plans(inputs.model, inputs.plan, inputs.constants, g)
    assert result.fitting
    bad = [
        (c.plan.label(), why)
        for c in result.fitting + result.refused
        if (why := _validator_problems(d, 64, c.plan)) is not None
    ]
    assert bad == []
    # 512 samples split over dp ranks: every rank holds a whole number of samples.
    assert all(512 % c.plan.dp == 0 for c in result.fitting + result.refused)
    assert all(float(c.plan.microbatches_per_rank).is_integer() for c in result.fitting)


def test_dp_must_divide_batch_times_samples_per_task():
    """3 tasks x 2 samples = 6 samples: over 12 devices dp is 1, 2, 3 or 6, never 4 or 12."""
    base = Plan(token_wall=WALL_84K, batch_size=3, samples_per_task=2)
    dps = {p.dp for p in enumerate_plans(PAPER_MODEL, 12, base)}
    assert dps and dps <= {1, 2, 3, 6}
    assert 4 not in dps and 12 not in dps
    assert Plan(dp=3, batch_size=3, samples_per_task=2).microbatches_per_rank == 2


# --- offload "none": search admits and ranks by the same co-resident rule as check -------------------------

TINY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"
COEFFICIENTS = (
    Path(__file__).resolve().parents[2] / "packages" / "t1-capacity" / "src" / "t1_capacity" / "coefficients"
)


def tiny_coresident_gib(b0_gib: float | None = None) -> float:
    """recipes/tiny-cpu.yaml priced by hand (tp = pp = cp = dp = ep = 1, T = 4096, no padding).

    h 64, L 4 (3 Gated DeltaNet + 1 full attention), E 8 x F 32, shared F 32, |V| 248,320; its torch trainer
    in float32: 4 + 4 + 8 = 16 B per parameter (weights, grads, AdamW m and v), and one LM-head chunk of 256
    rows at 12 B per logit (not the wall's 4096 rows). Activations and b0: the torch backend's stored
    calibration (bytes per value of each layer kind times the values per token: attention h + 3*4*16 +
    2*2*16 = 320, Gated DeltaNet h + 2*2*16 + 2*4*16 + 4*64 = 512, MoE h + 8 + 2 (h + 3*32) = 392, shared
    expert h + 3*32 + 1 = 161, norms/residuals, embedding and head h each; the attention scores n_h = 4 values
    per token per token of the wall), b0 the stored one or ``b0_gib``
    (``plan.b0_gib`` set). Co-resident: actor + critic with the allocator residue counted once.
    """
    c = json.loads((COEFFICIENTS / "torch-cpu.json").read_text())
    k = c["activation_bytes_per_value"]
    h, v, t, b0 = 64, 248_320, 4096, (c["b0_gib"] if b0_gib is None else b0_gib) * 2**30
    every = k["moe"] * 392 + k["shared_expert"] * 161 + k["layer"] * h
    per_token = (
        3 * (k["gdn"] * 512 + every)
        + (k["attention"] * 320 + k["attention_scores"] * 4 * t + every)
        + (k["embedding"] + k["head"]) * h
    )
    experts = 3 * h * 32 * 8 * 4
    per_layer = 3 * h * 32 + (h * 8 + h + 2 * h)  # shared expert; router, shared gate, two norms
    attention = 2 * h * 4 * 16 + 2 * h * 2 * 16 + 2 * 16  # q/o, k/v, q/k norms
    dk, dv = 2 * 16, 4 * 16
    recurrent = h * (2 * dk + 2 * dv) + h * 2 * 4 + (2 * dk + dv) * 4 + dv * h + 2 * 4 + 16
    body = 4 * per_layer + attention + 3 * recurrent + v * h + h  # embedding, final norm
    activations = per_token * t
    actor = 16 * (experts + body + v * h) + activations + 256 * v * 12 + b0  # LM head, one logit chunk
    critic = 16 * (experts + body + h) + activations + b0  # value head h -> 1
    return (actor + critic - b0) / 2**30


def test_tiny_recipe_coresident_total_is_the_hand_figure():
    from t1_capacity import load

    inputs = load(TINY)
    verdict = check_plan(inputs.model, inputs.plan, inputs.constants)
    assert verdict.coresident_gib == pytest.approx(tiny_coresident_gib(), rel=1e-12)  # 2.21 GiB


def test_offload_none_search_headroom_is_m_minus_coresident_as_check_says():
    """Issue: search printed the headroom of M - actor alone where check printed M - co-resident."""
    from t1_capacity import load

    inputs = load(TINY)
    result = search_plans(inputs.model, inputs.plan, inputs.constants)
    (cand,) = result.fitting
    assert cand.headroom_gib == pytest.approx(95.0 - tiny_coresident_gib())  # 92.8, not 95 - 1.76
    verdict = check_plan(inputs.model, cand.plan, inputs.constants)
    assert cand.headroom_gib == verdict.headroom_gib
    assert f"{cand.headroom_gib:.1f} GiB headroom" in cand.explain(inputs.model, inputs.constants)


def test_offload_none_refusal_names_coresidency_not_a_negative_overflow():
    """Issue: at an M between the actor alone and the co-resident total, search said "over M by -0.x GiB".

    At M = 2 and b0 = 0.5 GiB (the spec keeps b0 below M) the actor alone (1.90 GiB) fits; actor + critic
    co-resident (2.35 GiB) does not.
    """
    from t1_capacity import load

    inputs = load(TINY, ["plan.memory_budget_gib=2", "plan.b0_gib=0.5"])
    result = search_plans(inputs.model, inputs.plan, inputs.constants)
    assert not result.fitting
    (cand,) = result.refused
    over = tiny_coresident_gib(0.5) - 2.0
    assert cand.headroom_gib == pytest.approx(-over)
    text = cand.explain(inputs.model, inputs.constants)
    assert "co-resident" in text and f"exceeds M by {over:.1f} GiB" in text and "-0." not in text
    verdict = check_plan(inputs.model, cand.plan, inputs.constants)
    assert text == verdict.reason() and cand.fits == verdict.fits


@pytest.mark.parametrize("budget", [2.3, 2.4, 2.5, 95.0])
def test_search_and_check_share_one_admission_rule(budget):
    """Near the co-resident total (2.35 GiB at b0 = 0.5) both admit exactly when actor + critic - b0 <= M."""
    from t1_capacity import load

    inputs = load(TINY, [f"plan.memory_budget_gib={budget}", "plan.b0_gib=0.5"])
    result = search_plans(inputs.model, inputs.plan, inputs.constants)
    (cand,) = result.fitting + result.refused
    verdict = check_plan(inputs.model, inputs.plan, inputs.constants)
    assert cand.fits == verdict.fits == (tiny_coresident_gib(0.5) <= budget)
    assert cand.headroom_gib == verdict.headroom_gib == pytest.approx(budget - tiny_coresident_gib(0.5))
