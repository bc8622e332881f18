"""The capacity findings of T1 §7.1 (Eq. 21, Prop. 7.1), as claims about the model.

Expected numbers are computed here from the paper's constants (116.0B experts, 248,320 vocabulary, 95 GiB),
not read back from the code under test.
"""

from dataclasses import replace

import pytest

from t1_capacity import (
    ACTOR,
    CRITIC,
    PAPER_CONSTANTS,
    PAPER_MODEL,
    CapacityConstants,
    Plan,
    check_plan,
    enumerate_plans,
    footprint,
)

GIB = 2**30
M = 95.0
WALL_84K = 84 * 1024
VOCAB = 248_320
# routed experts of Qwen3.5-122B-A10B: 3 matrices x h 3072 x F 1024 x E 256 x L 48 (paper: 116.0B)
P_E = 3 * 3072 * 1024 * 256 * 48

# The production plan of recipes/t1-122b.yaml: 64 training devices, tp 2, pp 4, dp 2, ep maximal.
PROD_CP4 = Plan(tp=2, pp=4, cp=4, dp=2, ep=16, token_wall=WALL_84K, memory_budget_gib=M)
PROD_CP2 = replace(PROD_CP4, cp=2, dp=4)

# alpha (bytes/token/layer) and b0 (GiB) around the defaults: the findings must not hang on one value.
ALPHAS = [58_000, 61_440, 67_584, 72_000, 78_000]
B0S = [2.0, 3.0, 4.0]


def test_paper_expert_count_is_116b():
    assert PAPER_MODEL.expert_params == P_E
    assert abs(P_E / 1e9 - 116.0) < 0.05
    assert abs(PAPER_MODEL.dense_params / 1e9 - 5.86) < 0.02


@pytest.mark.parametrize("g", [64, 128, 256, 1024])
def test_expert_optimizer_state_is_plan_invariant(g):
    """Prop. 7.1: per-device expert optimizer state = 12 B * P_e / G for every plan on G training devices."""
    expected = 12 * P_E / g
    seen = 0
    for plan in enumerate_plans(PAPER_MODEL, g, Plan(token_wall=WALL_84K)):
        f = footprint(PAPER_MODEL, plan, PAPER_CONSTANTS, ACTOR)
        assert f.term("expert_optimizer").bytes == pytest.approx(expected, rel=1e-12), plan.label()
        seen += 1
    assert seen > 10


def test_lowering_ep_doubles_weights_and_grads_but_not_optimizer():
    """T1 §7.1: reducing expert sharding doubles resident weights and gradients, optimizer state untouched."""
    hi = footprint(PAPER_MODEL, PROD_CP4, PAPER_CONSTANTS, ACTOR)
    lo = footprint(PAPER_MODEL, replace(PROD_CP4, ep=8), PAPER_CONSTANTS, ACTOR)
    for name in ("expert_weights", "expert_grads"):
        assert lo.term(name).bytes == pytest.approx(2 * hi.term(name).bytes)
    assert lo.term("expert_optimizer").bytes == pytest.approx(hi.term("expert_optimizer").bytes)
    # weights bf16 2 B + grads fp32 4 B over ep * pp at ep 16, pp 4: 6 * P_e / 64
    assert hi.term("expert_weights").bytes + hi.term("expert_grads").bytes == pytest.approx(6 * P_E / 64)


@pytest.mark.parametrize("g", [64, 256])
def test_ep_maximal_is_best(g):
    """For every layout, the largest valid ep gives the smallest footprint (eta pinned maximal)."""
    by_layout: dict = {}
    for plan in enumerate_plans(PAPER_MODEL, g, Plan(token_wall=WALL_84K)):
        total = footprint(PAPER_MODEL, plan, PAPER_CONSTANTS, ACTOR).total_bytes
        by_layout.setdefault((plan.tp, plan.pp, plan.cp, plan.dp), []).append((plan.ep, total))
    for layout, rows in by_layout.items():
        best_ep = min(rows, key=lambda r: r[1])[0]
        assert best_ep == max(ep for ep, _ in rows), layout


@pytest.mark.parametrize("alpha", ALPHAS)
def test_tp_beyond_2_leaves_recurrent_activations_unchanged(alpha):
    c = replace(PAPER_CONSTANTS, alpha=alpha)
    base = Plan(tp=2, pp=4, cp=4, dp=8, ep=64, token_wall=WALL_84K)
    rec = []
    attn = []
    for tp in (2, 4, 8):
        plan = replace(base, tp=tp, dp=base.dp * 2 // tp)
        f = footprint(PAPER_MODEL, plan, c, ACTOR, stage=3)
        rec.append(f.term("recurrent_activations").bytes)
        attn.append(f.term("attention_activations").bytes)
    assert rec[0] == rec[1] == rec[2]
    assert attn[0] == attn[1] == attn[2]
    # independent: 9 recurrent layers on the last of 4 stages (layers 36..47, every 4th full attention)
    assert rec[0] == pytest.approx(alpha * WALL_84K * 9 / 4)


def test_recurrent_blocks_are_not_tensor_sharded():
    """Recurrent blocks replicate across tp: tp 1 -> 2 leaves the recurrent activation peak unchanged too."""
    one = footprint(PAPER_MODEL, Plan(tp=1, pp=4, cp=4, dp=4, ep=16, token_wall=WALL_84K), stage=0)
    two = footprint(PAPER_MODEL, Plan(tp=2, pp=4, cp=4, dp=2, ep=16, token_wall=WALL_84K), stage=0)
    assert one.term("recurrent_activations").bytes == two.term("recurrent_activations").bytes


@pytest.mark.parametrize("alpha", ALPHAS)
def test_recurrent_activation_peaks_fall_to_half_quarter_eighth(alpha):
    """T1 §7.1: relative to cp 1, recurrent activation peaks are 1/2, 1/4, 1/8 at cp 2, 4, 8."""
    c = replace(PAPER_CONSTANTS, alpha=alpha)
    base = Plan(tp=2, pp=4, cp=1, dp=8, ep=16, token_wall=WALL_84K)
    peak1 = footprint(PAPER_MODEL, base, c, CRITIC, stage=0).term("recurrent_activations").bytes
    for cp in (2, 4, 8):
        plan = replace(base, cp=cp, dp=8 // cp)
        peak = footprint(PAPER_MODEL, plan, c, CRITIC, stage=0).term("recurrent_activations").bytes
        assert peak / peak1 == pytest.approx(1 / cp)


def test_logit_buffer_formula():
    """T x |V| x 6 B / (tp x cp) on the terminal stage; 248,320 needs no padding at tp 2."""
    f = footprint(PAPER_MODEL, PROD_CP2, PAPER_CONSTANTS, ACTOR)
    assert f.stage == 3
    assert f.term("logit_buffer").bytes == WALL_84K * VOCAB * 6 / (2 * 2)
    assert footprint(PAPER_MODEL, PROD_CP2, PAPER_CONSTANTS, ACTOR, stage=0).term("logit_buffer").bytes == 0


@pytest.mark.parametrize("b0", B0S)
@pytest.mark.parametrize("alpha", ALPHAS)
def test_kappa2_exceeds_budget_with_logit_buffer_about_a_third(alpha, b0):
    """T1 §7.1: at an 84k wall, cp 2 leaves a logit buffer of roughly a third of M and exceeds M."""
    c = CapacityConstants(alpha=alpha, b0_gib=b0)
    verdict = check_plan(PAPER_MODEL, PROD_CP2, c)
    assert not verdict.fits
    actor = verdict.actor
    share = actor.term("logit_buffer").bytes / (M * GIB)
    assert 0.28 < share < 0.38
    assert actor.binding.name == "logit_buffer"
    assert "logit_buffer" in verdict.reason()


@pytest.mark.parametrize("b0", B0S)
@pytest.mark.parametrize("alpha", ALPHAS)
def test_kappa4_halves_logit_share_and_admits(alpha, b0):
    """T1 §7.1: cp 4 halves the logit buffer's share and admits the plan, actor and critic each alone."""
    c = CapacityConstants(alpha=alpha, b0_gib=b0)
    v4 = check_plan(PAPER_MODEL, PROD_CP4, c)
    v2 = check_plan(PAPER_MODEL, PROD_CP2, c)
    assert v4.fits and v4.actor.fits and v4.critic.fits
    assert v4.actor.term("logit_buffer").bytes == pytest.approx(v2.actor.term("logit_buffer").bytes / 2)


def test_refusal_names_the_fix():
    verdict = check_plan(PAPER_MODEL, PROD_CP2, PAPER_CONSTANTS)
    assert verdict.advice is not None
    assert "raise cp 2 -> 4" in verdict.advice


def test_critic_has_no_logit_buffer_and_no_lm_head():
    actor = footprint(PAPER_MODEL, PROD_CP4, PAPER_CONSTANTS, ACTOR, stage=3)
    critic = footprint(PAPER_MODEL, PROD_CP4, PAPER_CONSTANTS, CRITIC, stage=3)
    assert critic.term("logit_buffer").bytes == 0
    # the LM head (|V| h / tp, 2 + 4 + 12/(dp cp) B per parameter) is the only dense difference, minus the
    # value head
    lm_head = VOCAB * 3072 / 2
    diff = actor.term("dense_weights").bytes - critic.term("dense_weights").bytes
    assert diff == pytest.approx(2 * (lm_head - 3072))


def test_allocator_residue_is_b0():
    f = footprint(PAPER_MODEL, PROD_CP4, CapacityConstants(b0_gib=2.85))
    assert f.term("allocator_residue").bytes == 2.85 * GIB


def test_offload_none_requires_both_networks_together():
    forced = check_plan(PAPER_MODEL, PROD_CP4, PAPER_CONSTANTS)
    together = check_plan(PAPER_MODEL, replace(PROD_CP4, offload="none"), PAPER_CONSTANTS)
    assert forced.fits and not together.fits
    assert together.coresident_gib > M


def test_package_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, t1_capacity, t1_capacity.report; assert 'torch' not in sys.modules, 'torch imported'"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def test_without_critic_only_the_actor_counts_when_co_resident():
    plan = replace(PROD_CP4, offload="none", critic=False)
    verdict = check_plan(PAPER_MODEL, plan, PAPER_CONSTANTS)
    assert verdict.critic is None
    assert verdict.coresident_gib == pytest.approx(verdict.actor.total_gib)


def test_alpha_interval_that_reproduces_both_findings_ends_where_the_docs_say():
    """docs/concepts/capacity.md: the two cp findings hold for alpha in about [53.6k, 82.8k] B at b0 = 3 GiB.

    Upper end from first principles: at cp 2 the actor's last stage holds 36 / 4 = 9 recurrent layers, so the
    recurrent term alpha * T * 9 / 2 overtakes the logit buffer T * |V| * 6 / (tp 2 * cp 2) at
    alpha = |V| * 6 / 4 * 2 / 9 = 82,773.3 B.
    """
    upper = VOCAB * 6 / 4 * 2 / 9
    assert upper == pytest.approx(82_773.3, abs=0.1)
    below, above = CapacityConstants(alpha=upper - 50), CapacityConstants(alpha=upper + 50)
    assert check_plan(PAPER_MODEL, PROD_CP2, below).actor.binding.name == "logit_buffer"
    assert check_plan(PAPER_MODEL, PROD_CP2, above).actor.binding.name == "recurrent_activations"
    # Lower end: below ~53.6k B the cp 2 plan would fit M, contradicting T1 §7.1.
    assert check_plan(PAPER_MODEL, PROD_CP2, CapacityConstants(alpha=53_400.0)).fits
    assert not check_plan(PAPER_MODEL, PROD_CP2, CapacityConstants(alpha=53_800.0)).fits
