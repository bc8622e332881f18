"""Benchmark: decode tokens/s of the embedded engine with continuous batching vs one request at a time.

Run (from the repository root):

    OMP_NUM_THREADS=1 uv run python tools/bench/bench_engine_batching.py [--requests 16] [--prompt 32]
        [--new-tokens 32] [--repeat 3] [--recipe recipes/tiny-cpu.yaml]

The model is the recipe's tiny Qwen3.5-MoE (seed 0, float32, one torch thread, CPU). ``--requests``
concurrent requests, each a prompt of ``--prompt`` random ids and ``--new-tokens`` sampled tokens at
temperature 1 with its own seed and no stop id, are served four ways side by side in the same run,
interleaved within each repetition:

* "one at a time": `EmbeddedEngine` with ``max_batch_size=1`` (every request still submitted concurrently,
  served in arrival order: the engine before continuous batching), batch-invariant kernels;
* "batched": the same engine with ``max_batch_size=requests`` (one forward over the active sequences per
  step, routing captured, per-sequence sampling and stops), batch-invariant kernels
  (`t1_rollout.engine.invariant`), as the engine runs by default;
* "batched, torch kernels": the batched engine with ``batch_invariant=False`` (torch's kernels as they are:
  what batch invariance costs);
* "one at a time, torch kernels": ``max_batch_size=1, batch_invariant=False``, the engine's default before
  batching was on (a lone sequence pays for invariance too: 4 LM-head rows instead of MKL's fast one-row
  path);
* "minimal loop": what a capable user writes without T1: one prefill of ``[requests, prompt]``, then one
  forward of ``[requests, 1]`` per step with the transformers cache, and a per-row sampler (each row's
  log-softmax over the real ids at temperature 1, a float64 inverse-CDF draw from its own seeded
  generator, the drawn id's log-prob read back); no routing capture, no stop check, no prefix cache, no
  asyncio.

Tokens/s = completion tokens of all requests / wall time of the whole batch (prefill included). The five
arms run interleaved (`paired.interleave`: A B C, then C B A, ...) and each ratio is taken within one
repetition: batched / one at a time (goal >= 4), batched / minimal loop (goal >= 0.8), batched / batched
with torch kernels (the price of invariance) and batched / one at a time with torch kernels (against the
old default). Before any figure is printed, the batched answers are
checked to carry the same ids, routed experts and log-probs, bit for bit, as the one-at-a-time answers;
the largest log-prob difference of the torch-kernel arm against one at a time is printed. Prints
min / median / max of the per-repetition figures and paired ratios, then one JSON line. Nothing asserts
on time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

import numpy as np
import torch
from paired import format_summary, interleave, paired_ratios, summary  # tools/bench/paired.py

from t1_policy import build_model, num_real_tokens
from t1_rollout.engine import SamplingParams
from t1_rollout.engine.embedded import EmbeddedEngine
from t1_spec import load_recipe


def engine_run(engine: EmbeddedEngine, prompts: list[list[int]], new_tokens: int) -> tuple[float, list]:
    """Wall seconds to answer every prompt concurrently, and the answers."""

    async def all_of_them() -> list:
        return await asyncio.gather(
            *(
                engine.generate(p, SamplingParams(max_new_tokens=new_tokens, seed=1000 + i))
                for i, p in enumerate(prompts)
            )
        )

    t0 = time.perf_counter()
    answers = asyncio.run(all_of_them())
    return time.perf_counter() - t0, answers


@torch.inference_mode()
def minimal_loop(model: torch.nn.Module, prompts: list[list[int]], new_tokens: int, seed: int) -> float:
    """Wall seconds of a plain batched KV-cached loop with a per-row sampler over equal-length ``prompts``."""
    limit = num_real_tokens(model.config.vocab_size)
    gens = [torch.Generator().manual_seed(seed * 1000 + i) for i in range(len(prompts))]
    t0 = time.perf_counter()
    out = model(input_ids=torch.tensor(prompts), use_cache=True, logits_to_keep=1)
    cache = out.cache
    for step in range(new_tokens):
        ids = []
        for row, gen in enumerate(gens):
            logp_v = torch.log_softmax(out.logits[row, -1, :limit].float(), dim=-1)
            cdf_v = torch.cumsum(logp_v.exp().double(), dim=0)
            u = torch.rand(1, generator=gen, dtype=torch.float64) * cdf_v[-1]
            token = int(torch.searchsorted(cdf_v, u, right=True).clamp_max(limit - 1))
            float(logp_v[token])  # the log-prob a sampler reports, as the engine does
            ids.append([token])
        if step + 1 < new_tokens:
            out = model(input_ids=torch.tensor(ids), cache=cache, use_cache=True, logits_to_keep=1)
            cache = out.cache
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--recipe", default="recipes/tiny-cpu.yaml")
    args = ap.parse_args()
    spec = load_recipe(args.recipe).model
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 240_000, args.prompt).tolist() for _ in range(args.requests)]
    serial_eng = EmbeddedEngine(build_model(spec, seed=0), seed=0, max_batch_size=1)
    batched_eng = EmbeddedEngine(build_model(spec, seed=0), seed=0, max_batch_size=args.requests)
    plain_eng = EmbeddedEngine(
        build_model(spec, seed=0), seed=0, max_batch_size=args.requests, batch_invariant=False
    )
    old_eng = EmbeddedEngine(build_model(spec, seed=0), seed=0, max_batch_size=1, batch_invariant=False)
    engines = (serial_eng, batched_eng, plain_eng, old_eng)
    for eng in engines:
        eng._prefix_cache_size = 0  # every repeat prefills afresh
    minimal_model = build_model(spec, seed=0)
    tokens = args.requests * args.new_tokens

    # Warm-up and the equivalence check: same ids, routing and log-probs, bit for bit.
    _, serial = engine_run(serial_eng, prompts, args.new_tokens)
    _, batched = engine_run(batched_eng, prompts, args.new_tokens)
    _, plain = engine_run(plain_eng, prompts, args.new_tokens)
    minimal_loop(minimal_model, prompts, 2, seed=0)
    worst = 0.0
    for s, b, p in zip(serial, batched, plain, strict=True):
        assert s.output_ids == b.output_ids, "batched ids differ from one-at-a-time ids"
        assert s.output_logprobs == b.output_logprobs, "batched log-probs differ from one at a time"
        np.testing.assert_array_equal(s.routed_experts, b.routed_experts)
        if p.output_ids == s.output_ids:
            worst = max(worst, float(np.abs(np.array(s.output_logprobs) - np.array(p.output_logprobs)).max()))

    seeds = iter(range(args.repeat))
    rates = interleave(
        {
            "one_at_a_time": lambda: tokens / engine_run(serial_eng, prompts, args.new_tokens)[0],
            "batched": lambda: tokens / engine_run(batched_eng, prompts, args.new_tokens)[0],
            "batched_torch_kernels": lambda: tokens / engine_run(plain_eng, prompts, args.new_tokens)[0],
            "one_at_a_time_torch_kernels": lambda: tokens / engine_run(old_eng, prompts, args.new_tokens)[0],
            "minimal": lambda: tokens / minimal_loop(minimal_model, prompts, args.new_tokens, next(seeds)),
        },
        repeat=args.repeat,
    )
    vs_serial = paired_ratios(rates["batched"], rates["one_at_a_time"])
    vs_minimal = paired_ratios(rates["batched"], rates["minimal"])
    vs_plain = paired_ratios(rates["batched"], rates["batched_torch_kernels"])
    vs_old = paired_ratios(rates["batched"], rates["one_at_a_time_torch_kernels"])
    for eng in engines:
        eng.close()

    print(
        f"{args.requests} concurrent requests x {args.new_tokens} new tokens, prompts of {args.prompt} "
        f"tokens; {args.repeat} repeats; torch threads {torch.get_num_threads()}"
    )
    for name, values in rates.items():
        s = summary(values)
        print(f"{name:>27}: tokens/s min {s['min']:7.1f}  median {s['median']:7.1f}  max {s['max']:7.1f}")
    for name, values, goal in (("one at a time", vs_serial, 4.0), ("minimal loop", vs_minimal, 0.8)):
        print(format_summary(f"batched / {name} (paired)", values, goal=f">= {goal}"))
    print(
        format_summary(
            "batched / batched with torch kernels (paired; < 1 is what invariance costs)", vs_plain
        )
    )
    print(format_summary("batched / one at a time with torch kernels (paired; the old default)", vs_old))
    print(
        "batched: same ids, routing and log-probs as one at a time, bit for bit; torch kernels: max "
        f"|log-prob difference| {worst:.3g}"
    )
    print(
        json.dumps(
            {
                "bench": "engine_batching",
                "requests": args.requests,
                "prompt_tokens": args.prompt,
                "new_tokens": args.new_tokens,
                "repeat": args.repeat,
                "tokens_per_s": {name: summary(values) for name, values in rates.items()},
                "ratio_vs_one_at_a_time": summary(vs_serial),
                "ratio_vs_minimal_loop": summary(vs_minimal),
                "ratio_vs_torch_kernels": summary(vs_plain),
                "ratio_vs_one_at_a_time_torch_kernels": summary(vs_old),
                "max_logprob_diff": 0.0,
                "max_logprob_diff_torch_kernels": worst,
                "load_average": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
