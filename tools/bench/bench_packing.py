"""Benchmark: trained tokens per second of a PPO step, packed micro-batches against one sample at a time.

Run (from the repository root):

    OMP_NUM_THREADS=1 uv run python tools/bench/bench_packing.py [--batch 16] [--repeat 4]
        [--min-tokens 48] [--max-tokens 320] [--micro-batch-size 16] [--micro-batch-tokens 1024]
        [--recipe recipes/tiny-cpu.yaml] [--set ppo.ppo_epochs=2 ...]

The model and PPO settings come from the recipe (the tiny model by default). The batch is ``--batch``
synthetic samples of lengths drawn uniformly (seeded) in ``[--min-tokens, --max-tokens]``: a prompt of a
third of the sample, then sampled tokens (loss) and an observation, the reward on the last sampled token;
routing records and rollout log-probs come from a forward of the sampler (same weights as the actor), so
R3 replay is on as in a run. Two backends of the same seed train the same batch: ``unpacked``
(``ppo.micro_batch_size`` 1, today's default) and ``packed`` (``--micro-batch-size`` samples and at most
``--micro-batch-tokens`` tokens per micro-batch, `t1_trainer.packing`). ``--set`` overrides recipe fields
(`t1_spec.load_recipe`'s overrides). What packing cannot amortise: the LM head over the 248,320-id
vocabulary (the recipe's tokenizer fixes it) costs the same per loss token in both arms, as do the AdamW
steps; packing removes the per-micro-batch costs (one forward and backward per sample, the dense gradient of
the embedding and the head per backward). A larger pack is not always faster on the CPU: the attention mask
is materialised ``[N, N]`` (block-diagonal, but computed densely) and the Gated DeltaNet runs the pack padded
to its longest sample, so both grow with the pack; on the 2-core box the default 1024-token budget (3 packs
of the default batch) measured 1.30x, one pack of the whole batch (``--micro-batch-tokens 4096``) 1.06x
and 512 tokens 1.19x, all at a load average near 2.

The first step of each arm is untimed (the warm-up) and checks that they agree: the largest weight
difference after it is printed as a share of one AdamW step (``lr``). Then each repetition runs one full
``ppo_step`` (critic values, critic update, actor update) of each arm, interleaved (`paired.interleave`:
packed unpacked, then unpacked packed, ...), and the figure of an arm is the batch's tokens divided by the
step's wall seconds. The ratio packed / unpacked is taken within each repetition: min / median / max.
Ends with one JSON line. Nothing asserts on time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from paired import format_summary, interleave, paired_ratios, summary  # tools/bench/paired.py

ROOT = Path(__file__).resolve().parents[2]


def make_batch(model: torch.nn.Module, lengths: list[int]) -> list[Any]:
    """One validated sample per length, routing and rollout log-probs from ``model`` (the sampler)."""
    from t1_policy import num_real_tokens
    from t1_r3 import capture_routing
    from t1_tito import Sample
    from t1_trainer.logprobs import lm_head_logprobs

    limit = num_real_tokens(model.config.vocab_size)
    out = []
    for i, n in enumerate(lengths):
        g = torch.Generator().manual_seed(100 + i)
        ids = torch.randint(0, 5000, (n,), generator=g)
        mask = np.zeros(n, np.int8)
        prompt = max(1, n // 3)
        sampled = max(1, (n - prompt) // 2)
        mask[prompt : prompt + sampled] = 1  # sampled tokens, then an observation
        mask[-1] = 1  # the final sampled token
        pos = np.flatnonzero(mask)
        lp = np.zeros(n, np.float32)
        with capture_routing(model) as rec, torch.no_grad():
            hidden = model.model(input_ids=ids[None]).last_hidden_state[0]
            lp[pos] = lm_head_logprobs(
                hidden[pos - 1], model.lm_head.weight, ids[pos], temperature=1.0, vocab_limit=limit
            ).numpy()
        s = Sample(
            token_ids=ids.numpy().astype(np.int32), loss_mask=mask, rollout_logprobs=lp,
            routing=rec.rows()[: n - 1].astype(np.int32), reward=0.05 * i, reward_index=int(pos[-1]),
            task_id=f"task-{i}", family="bench", trial_id=f"trial-{i}", chunk_index=0, policy_version=0,
        )  # fmt: skip
        s.validate()
        out.append(s)
    return out


def max_step_share(a: torch.nn.Module, b: torch.nn.Module, lr: float) -> float:
    """The largest |weight difference| between two networks, as a share of one AdamW step ``lr``."""
    pb = dict(b.named_parameters())
    return max(float((p - pb[n]).detach().abs().max()) for n, p in a.named_parameters()) / lr


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--recipe", default=str(ROOT / "recipes" / "tiny-cpu.yaml"))
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--repeat", type=int, default=4)
    p.add_argument("--min-tokens", type=int, default=48)
    p.add_argument("--max-tokens", type=int, default=320)
    p.add_argument("--micro-batch-size", type=int, default=16)
    p.add_argument("--micro-batch-tokens", type=int, default=1024)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="recipe override")
    args = p.parse_args(argv)

    from t1_policy import build_model
    from t1_spec import load_recipe
    from t1_trainer.packing import plan_micro_batches
    from t1_trainer.step import ppo_step
    from t1_trainer.torch_backend import TorchBackend

    torch.set_num_threads(1)
    recipe = load_recipe(args.recipe, args.set)
    rng = np.random.default_rng(0)
    lengths = [int(n) for n in rng.integers(args.min_tokens, args.max_tokens + 1, size=args.batch)]
    tokens = sum(lengths)
    batch = make_batch(build_model(recipe.model, seed=recipe.seed), lengths)
    base = recipe.ppo.model_copy(update={"batch_size": args.batch, "micro_batch_size": 1})
    packed = base.model_copy(
        update={"micro_batch_size": args.micro_batch_size, "micro_batch_tokens": args.micro_batch_tokens}
    )
    plan = plan_micro_batches(lengths, max_samples=args.micro_batch_size, max_tokens=args.micro_batch_tokens)
    specs = {"packed": packed, "unpacked": base}
    backends = {
        name: TorchBackend(model_spec=recipe.model, ppo_spec=spec, seed=recipe.seed, logprob_gap_every=0)
        for name, spec in specs.items()
    }

    t0 = time.perf_counter()
    for name, be in backends.items():  # the agreement check is also the warm-up step of each arm
        ppo_step(be, batch, specs[name])
    share_actor = max_step_share(backends["packed"].actor, backends["unpacked"].actor, base.actor_lr)
    share_critic = max_step_share(backends["packed"].critic, backends["unpacked"].critic, base.critic_lr)
    print(
        f"batch of {args.batch} samples, {tokens} tokens (lengths {min(lengths)}..{max(lengths)}); packed "
        f"into {len(plan)} micro-batch(es) of sizes {[len(g) for g in plan]}; model {recipe.model.name}"
    )
    print(
        f"agreement after one step: max |w_packed - w_unpacked| = {share_actor:.2%} of an actor AdamW step, "
        f"{share_critic:.2%} of a critic step (warm-up {time.perf_counter() - t0:.1f}s)"
    )

    def arm(name: str) -> Any:
        def run() -> float:
            start = time.perf_counter()
            ppo_step(backends[name], batch, specs[name])
            return tokens / (time.perf_counter() - start)

        return run

    rates = interleave({name: arm(name) for name in specs}, repeat=args.repeat)
    for name, series in rates.items():
        print(format_summary(f"{name} trained tokens/s", series))
    ratio = paired_ratios(rates["packed"], rates["unpacked"])
    print(format_summary("packed / unpacked tokens/s", ratio, goal=">= 1.5"))
    result = {
        "bench": "packing",
        "model": recipe.model.name,
        "overrides": args.set,
        "batch": args.batch,
        "tokens": tokens,
        "micro_batches": len(plan),
        "micro_batch_size": args.micro_batch_size,
        "micro_batch_tokens": args.micro_batch_tokens,
        "repeat": args.repeat,
        "packed_tokens_per_s": summary(rates["packed"]),
        "unpacked_tokens_per_s": summary(rates["unpacked"]),
        "ratio": summary(ratio),
        "agreement_actor_step_share": share_actor,
        "agreement_critic_step_share": share_critic,
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
