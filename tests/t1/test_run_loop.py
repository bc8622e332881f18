"""The run loop's step arithmetic and its stop token."""

from __future__ import annotations

from pathlib import Path

import pytest

from t1.run import StopToken
from t1.run.steps import planned_steps, warmup_steps
from t1_spec import load_recipe

TINY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"


@pytest.mark.parametrize(("epochs", "steps", "want"), [(1, None, 1), (3, None, 5), (3, 2, 2), (3, 9, 5)])
def test_planned_steps_never_reach_into_a_pass_beyond_ppo_epochs(epochs, steps, want):
    # the mini pool's 9 tasks, 5 launched per step: one pass holds 1 whole step, three passes hold 5 (27 // 5)
    recipe = load_recipe(TINY, [f"ppo.epochs={epochs}", f"ppo.steps={'null' if steps is None else steps}"])
    assert planned_steps(recipe, 9) == want


@pytest.mark.parametrize(("epochs", "want"), [(1, 2), (2, 4), (3, 6)])
def test_warmup_covers_the_warmup_pool_each_epoch(epochs, want):
    # 9 tasks, 5 launched per step: ceil(9 * epochs / 5) steps draw every task at least `epochs` times
    recipe = load_recipe(TINY, [f"critic_warmup.epochs={epochs}"])
    assert warmup_steps(recipe, 9) == want


def test_stop_token_keeps_the_first_reason_and_raises_at_the_next_check():
    token = StopToken()
    token.check()  # nothing asked: no raise
    token.request("SIGTERM")
    token.request("SIGHUP")
    assert token.reason == "SIGTERM"
    with pytest.raises(KeyboardInterrupt):
        token.check()
