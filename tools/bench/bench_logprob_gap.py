"""Benchmark: the train-inference log-prob gap on a real numerics mismatch, with and without R3 (T1 §4.3).

Run (from the repository root):

    uv run python tools/bench/bench_logprob_gap.py [--samples 4] [--prompt 64] [--new 64] [--repeat 3]
        [--recipe recipes/tiny-cpu.yaml]

The sampler is the embedded engine (`t1_rollout.engine.EmbeddedEngine`) serving the recipe's tiny MoE in
bfloat16; the trainer is `t1_trainer.TorchBackend` holding the same weights in float32, as the paper's
sampler (SGLang kernels) and trainer (Megatron) differ in numerics (T1 §4.3, Fig. 6: 0.021 without, 0.013
with TITO and R3). Each sample is one engine answer: a random prompt, then ``--new`` sampled tokens at
temperature 1 with their bf16 log-probs and the bf16 forward's routing record. `TorchBackend.logprob_gap`
then reports, over the loss tokens, the mask-weighted mean ``|log p_trainer - log p_rollout|`` with the record
replayed and with live routing, and the fraction of loss tokens whose live experts differ from the record in
at least one MoE layer (and over (token, layer) pairs).

Side by side per repeat (fresh prompts each): the baseline is live routing, the T1 path is replay; the ratio
printed is gap(live) / gap(replay) (how much of the gap R3 removes; > 1 means replay helps), min / median /
max over repeats, then one JSON line. A float32 engine is run once as the control: there the replayed gap is
float rounding only. Nothing asserts on the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from t1_policy import build_model
from t1_rollout.engine import EmbeddedEngine, SamplingParams
from t1_spec import load_recipe
from t1_trainer.torch_backend import TorchBackend

ROOT = Path(__file__).resolve().parents[2]


async def _sample(engine: EmbeddedEngine, n: int, prompt: int, new: int, seed: int) -> list[SimpleNamespace]:
    g = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ids = g.integers(0, 5000, prompt).tolist()
        gen = await engine.generate(
            ids, SamplingParams(temperature=1.0, max_new_tokens=new, seed=seed * 97 + i)
        )
        tokens = ids + gen.output_ids
        mask = np.r_[np.zeros(prompt, np.int8), np.ones(len(gen.output_ids), np.int8)]
        lps = np.r_[np.zeros(prompt, np.float32), np.asarray(gen.output_logprobs, np.float32)]
        out.append(
            SimpleNamespace(
                token_ids=np.asarray(tokens, np.int32),
                loss_mask=mask,
                rollout_logprobs=lps,
                routing=gen.routed_experts,  # [T-1, L, k] compact, from the sampler's own forwards
                reward=0.0,
                reward_index=len(tokens) - 1,
                task_id="bench",
                trial_id=f"s{seed}-{i}",
                chunk_index=0,
                policy_version=0,
            )
        )
    return out


def measure(model: torch.nn.Module, backend: TorchBackend, args: argparse.Namespace, seed: int) -> dict:
    engine = EmbeddedEngine(model, num_threads=None, prefix_cache_size=0)
    try:
        samples = asyncio.run(_sample(engine, args.samples, args.prompt, args.new, seed))
    finally:
        engine.close()
    t0 = time.perf_counter()
    gap = backend.logprob_gap(samples)
    gap["seconds"] = time.perf_counter() - t0
    return gap


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "tiny-cpu.yaml")
    args = ap.parse_args()
    recipe = load_recipe(args.recipe)
    fp32 = build_model(recipe.model, seed=recipe.seed, dtype=torch.float32)
    backend = TorchBackend.from_spec(recipe, actor=copy.deepcopy(fp32))
    bf16 = copy.deepcopy(fp32).to(torch.bfloat16)

    control = measure(copy.deepcopy(fp32), backend, args, seed=1000)
    runs = [measure(bf16, backend, args, seed=r) for r in range(args.repeat)]
    ratios = [r["actor/logprob_gap_no_replay"] / r["actor/logprob_gap_replay"] for r in runs]

    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    print(
        f"model: {recipe.model.name} ({recipe.model.num_layers} MoE layers, top-{recipe.model.top_k} of "
        f"{recipe.model.num_experts}); engine bfloat16, trainer float32; {args.samples} samples x "
        f"{args.new} sampled tokens per repeat, {args.repeat} repeats"
    )
    for i, r in enumerate(runs):
        print(
            f"  repeat {i}: gap replay {r['actor/logprob_gap_replay']:.5f}  "
            f"live {r['actor/logprob_gap_no_replay']:.5f}"
            f"  flipped tokens {r['actor/routing_flip_fraction']:.3f}  (token, layer) "
            f"{r['actor/routing_flip_fraction_layers']:.4f}  loss tokens {r['actor/loss_tokens']}"
        )
    print(
        f"control (float32 engine): gap replay {control['actor/logprob_gap_replay']:.2e}  live "
        f"{control['actor/logprob_gap_no_replay']:.2e}  "
        f"flipped tokens {control['actor/routing_flip_fraction']:.3f}"
    )
    print(
        f"ratio gap(live) / gap(replay): min {min(ratios):.3f}  median {statistics.median(ratios):.3f}  "
        f"max {max(ratios):.3f}   (paper: 0.021 / 0.013 = {0.021 / 0.013:.2f})"
    )
    print(
        json.dumps(
            {
                "bench": "logprob_gap",
                "engine_dtype": "bfloat16",
                "trainer_dtype": "float32",
                "samples": args.samples,
                "sampled_tokens": args.new,
                "repeat": args.repeat,
                "gap_replay_median": med("actor/logprob_gap_replay"),
                "gap_live_median": med("actor/logprob_gap_no_replay"),
                "flip_fraction_median": med("actor/routing_flip_fraction"),
                "flip_fraction_layers_median": med("actor/routing_flip_fraction_layers"),
                "ratio_min": min(ratios),
                "ratio_median": statistics.median(ratios),
                "ratio_max": max(ratios),
                "control_fp32_gap_replay": control["actor/logprob_gap_replay"],
                "control_fp32_flip_fraction": control["actor/routing_flip_fraction"],
            }
        )
    )


if __name__ == "__main__":
    main()
