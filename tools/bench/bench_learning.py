"""Benchmark: does T1's PPO learn? A one-turn bandit through the torch backend's own update, no sandbox.

Run (from the repository root):

    uv run python tools/bench/bench_learning.py [--seeds 5] [--steps 40] [--batch 16] [--vocab 4096]
        [--arms ppo,null,bad_critic] [--recipe recipes/tiny-cpu.yaml]

The policy is the tiny recipe's Qwen3.5-MoE (`t1_policy.build_model` of the recipe's ``model`` section) with a
small vocabulary (``--vocab``, 4,096 by default, so a step takes well under a second; ``--vocab 248320`` is
the real one). Each step it sees a fixed prompt of four token ids and samples one token at temperature 1; the
"right answer" is every id with ``id % 8 == target``, so a uniform policy succeeds 1/8 of the time. Reward is
1 for a right answer, else 0. Every sample is a real `t1_tito.Sample` (the routing the sampler's forward took,
recorded with `t1_r3.capture_routing`, so R3 replays it) and every update is `t1_trainer.step.ppo_step` on a
`t1_trainer.TorchBackend`: critic values, GAE, critic update, actor update, exactly the path of ``t1 train``.

Arms (each run for every seed):

- ``ppo``: actor LR 1e-2, critic LR 1e-3 (the critic slower than the actor at this large rate).
- ``null``: the same, but the reward is a coin of probability 1/8 drawn independently of the answer; the
  success rate must stay flat (no learning from noise; a sign or offset error would show here).
- ``bad_critic``: actor LR 1e-2 with the paper's 15x critic ratio (critic LR 0.15): the known-bad setting,
  expected to fail (explained variance far below 0, success not rising as in ``ppo``).

Printed per arm: success over the first and the last 5 steps (min/median/max over seeds), the OLS slope of
success per step with its t statistic and two-sided p (t distribution), how many seeds rose
significantly (p < 0.01 and slope > 0), and the critic's explained variance at the last step. The last line
is one JSON object with those figures. Nothing asserts: the verdict fields say what was seen. The machinery
has a short test (tests/t1_trainer/test_learning_smoke.py).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
MODULUS = 8
"""Right answers are the ids with ``id % MODULUS == target``: chance success 1 / MODULUS."""
PROMPT_LEN = 4


@dataclass(frozen=True)
class Arm:
    """One setting of the bandit: learning rates and whether the reward ignores the answer."""

    name: str
    actor_lr: float
    critic_lr: float
    null_reward: bool = False


ARMS = {
    "ppo": Arm("ppo", 1e-2, 1e-3),
    "null": Arm("null", 1e-2, 1e-3, null_reward=True),
    "bad_critic": Arm("bad_critic", 1e-2, 1.5e-1),
}


def build_backend(recipe_path: Path, *, vocab: int, arm: Arm, seed: int, batch: int) -> Any:
    """A `TorchBackend` over the recipe's model with ``vocab`` ids and the arm's learning rates.

    The spec's own rule ties the vocabulary to the tokenizer (248,077 ids); the bandit feeds no text, so the
    copy skips validation (``model_copy``) to shrink the embedding and the LM head.
    """
    from t1_policy import build_model
    from t1_spec import load_recipe
    from t1_trainer import TorchBackend

    recipe = load_recipe(recipe_path)
    model_spec = recipe.model.model_copy(update={"vocab_size": vocab})
    ppo = recipe.ppo.model_copy(
        update={"actor_lr": arm.actor_lr, "critic_lr": arm.critic_lr, "batch_size": batch, "ppo_epochs": 1}
    )
    actor = build_model(model_spec, seed=seed)
    return TorchBackend(model_spec=model_spec, ppo_spec=ppo, seed=seed, actor=actor), ppo


def sample_batch(backend: Any, prompt: list[int], batch: int, gen: torch.Generator) -> list[Any]:
    """``batch`` one-token answers to ``prompt`` from the current actor, as `t1_tito.Sample` objects."""
    from t1_policy import logprob_vector, num_real_tokens
    from t1_r3 import capture_routing
    from t1_tito import Sample

    actor = backend.actor
    actor.eval()
    ids = torch.tensor([prompt] * batch, dtype=torch.long, device=backend.device)
    with torch.no_grad(), capture_routing(actor) as rec:
        logits = actor(input_ids=ids, use_cache=False).logits[:, -1, :].float()
    logp = logprob_vector(logits, 1.0, vocab_limit=num_real_tokens(actor.config.vocab_size))
    answers = torch.multinomial(logp.exp().cpu(), 1, generator=gen).flatten()
    rows = rec.rows().reshape(batch, len(prompt), *rec.rows().shape[1:])
    out = []
    for b in range(batch):
        a = int(answers[b])
        t = len(prompt) + 1
        out.append(
            Sample(
                token_ids=np.array([*prompt, a], dtype=np.int32),
                loss_mask=np.array([0] * len(prompt) + [1], dtype=np.int8),
                rollout_logprobs=np.array([0.0] * len(prompt) + [float(logp[b, a])], dtype=np.float32),
                routing=np.ascontiguousarray(rows[b]),
                reward=0.0,
                reward_index=t - 1,
                task_id="bandit",
                family="bandit",
                trial_id=f"bandit-{b}",
                chunk_index=0,
                policy_version=backend.policy_version,  # the trainer's own weights sample: staleness 0
            )
        )
    return out


def run_arm(arm: Arm, *, seed: int, steps: int, batch: int, vocab: int, recipe: Path) -> dict[str, Any]:
    """One seed of one arm: the success rate per step and the last step's explained variance."""
    from t1_trainer.step import ppo_step

    backend, ppo = build_backend(recipe, vocab=vocab, arm=arm, seed=seed, batch=batch)
    rng = np.random.default_rng(seed)
    prompt = [int(x) for x in rng.integers(10, vocab, size=PROMPT_LEN)]
    target = int(rng.integers(0, MODULUS))
    gen = torch.Generator().manual_seed(seed)
    success, evs = [], []
    for _ in range(steps):
        samples = sample_batch(backend, prompt, batch, gen)
        right = [int(s.token_ids[-1]) % MODULUS == target for s in samples]
        success.append(float(np.mean(right)))
        if arm.null_reward:
            rewards = (rng.random(batch) < 1.0 / MODULUS).astype(float)
        else:
            rewards = np.asarray(right, dtype=float)
        for s, r in zip(samples, rewards, strict=True):
            s.reward = float(r)
        m = ppo_step(backend, samples, ppo)
        evs.append(float(m.get("critic/explained_variance", float("nan"))))
    return {"success": success, "ev": evs}


def trend(y: list[float]) -> dict[str, float]:
    """OLS slope of ``y`` against its index, its t statistic and the two-sided p of the t distribution.

    The p is that of Student's t on n - 2 degrees of freedom (scipy.stats.t), not a normal approximation,
    which understates it at these lengths (16 steps: 7e-4 where the t distribution gives 0.0044).
    """
    x = np.arange(len(y), dtype=float)
    yy = np.asarray(y, dtype=float)
    xc = x - x.mean()
    sxx = float((xc**2).sum())
    slope = float((xc * (yy - yy.mean())).sum() / sxx)
    resid = yy - yy.mean() - slope * xc
    dof = max(len(y) - 2, 1)
    se = math.sqrt(float((resid**2).sum()) / dof / sxx)
    t = slope / se if se > 0 else (0.0 if slope == 0 else math.copysign(math.inf, slope))
    p = float(2.0 * stats.t.sf(abs(t), dof)) if math.isfinite(t) else 0.0
    return {"slope": slope, "t": t, "p": p}


def summarize(runs: list[dict[str, Any]], window: int = 5) -> dict[str, Any]:
    """Per-arm figures over seeds: start and end success, the trend, seeds that rose, the last EV."""

    def mmm(v: list[float]) -> dict[str, float]:
        return {"min": float(np.min(v)), "median": float(np.median(v)), "max": float(np.max(v))}

    starts = [float(np.mean(r["success"][:window])) for r in runs]
    ends = [float(np.mean(r["success"][-window:])) for r in runs]
    trends = [trend(r["success"]) for r in runs]
    rose = sum(t["slope"] > 0 and t["p"] < 0.01 for t in trends)
    evs = [r["ev"][-1] for r in runs if math.isfinite(r["ev"][-1])]
    return {
        "start": mmm(starts),
        "end": mmm(ends),
        "slope": mmm([t["slope"] for t in trends]),
        "p": mmm([t["p"] for t in trends]),
        "seeds_rose": rose,
        "seeds": len(runs),
        "ev_last": mmm(evs) if evs else None,
    }


def main(argv: list[str] | None = None) -> int:
    arms = "; ".join(f"{a.name}: actor LR {a.actor_lr:g}, critic LR {a.critic_lr:g}" for a in ARMS.values())
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog=f"Arms: {arms} (null: the reward is a 1/8 coin that ignores the answer). Prints one line "
        "per arm and a JSON object last; nothing asserts.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--seeds", type=int, default=5, help="seeds per arm (each a fresh model and sampler)")
    ap.add_argument("--steps", type=int, default=40, help="PPO steps per seed")
    ap.add_argument("--batch", type=int, default=16, help="samples per step (one sampled token each)")
    ap.add_argument(
        "--vocab", type=int, default=4096, help="vocabulary size of the tiny model (248320: the real one)"
    )
    ap.add_argument("--arms", default="ppo,null,bad_critic", help="comma-separated arms to run, in order")
    ap.add_argument(
        "--recipe", type=Path, default=ROOT / "recipes" / "tiny-cpu.yaml", help="recipe whose model is used"
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    out: dict[str, Any] = {"bench": "learning", "steps": args.steps, "batch": args.batch, "vocab": args.vocab}
    t_all = time.perf_counter()
    for name in args.arms.split(","):
        arm = ARMS[name]
        t0 = time.perf_counter()
        runs = [
            run_arm(arm, seed=s, steps=args.steps, batch=args.batch, vocab=args.vocab, recipe=args.recipe)
            for s in range(args.seeds)
        ]
        fig = summarize(runs)
        fig["wall_s"] = time.perf_counter() - t0
        fig["actor_lr"], fig["critic_lr"] = arm.actor_lr, arm.critic_lr
        out[name] = fig
        ev = fig["ev_last"]
        print(
            f"{name:<11} actor {arm.actor_lr:g} critic {arm.critic_lr:g}"
            f"{' null reward' if arm.null_reward else ''}: success start "
            f"{fig['start']['median']:.3f} [{fig['start']['min']:.3f}, {fig['start']['max']:.3f}] -> end "
            f"{fig['end']['median']:.3f} [{fig['end']['min']:.3f}, {fig['end']['max']:.3f}]; slope/step "
            f"{fig['slope']['median']:+.4f}, p {fig['p']['median']:.2g}; rose in {fig['seeds_rose']}/"
            f"{fig['seeds']} seeds; EV last "
            + (f"{ev['median']:.2f} [{ev['min']:.2f}, {ev['max']:.2f}]" if ev else "n/a")
            + f"; {fig['wall_s']:.0f} s",
            file=sys.stderr,
        )
    if "ppo" in out:
        out["ppo_learns"] = out["ppo"]["seeds_rose"] == out["ppo"]["seeds"]
    if "null" in out:
        out["null_flat"] = out["null"]["seeds_rose"] == 0
    if "bad_critic" in out and "ppo" in out:
        out["bad_critic_fails"] = out["bad_critic"]["end"]["median"] < out["ppo"]["end"]["median"] - 0.1
    out["wall_s"] = time.perf_counter() - t_all
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
