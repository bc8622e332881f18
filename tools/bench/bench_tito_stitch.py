"""Benchmark: TITO stitching (`t1_tito.stitch`) against a plain numpy stitch of the same arrays (T1 §4.1).

Run (from the repository root):

    uv run python tools/bench/bench_tito_stitch.py [--repeat 7] [--inner 20] [--turns 5,10,20,40]

Episodes are synthetic but shaped like the paper's (T1 §6.3: about 20 turns and 18k tokens): a 2,000-token
first prompt, then per turn 300 sampled tokens and a 500-token observation plus template glue, so a 20-turn
episode holds 17,500 tokens; each turn's prompt is its own int64 array, as a harness passing numpy arrays
hands them over, and every boundary is strict (the case T1's own sessions produce). Every turn carries its
routing record as the engine returns it (``--layers`` x ``--top-k`` uint8 expert ids per token, default the
paper's 48 x 8, rows from where the previous turn's rows ended: ``routed_experts_start_len``), so both
sides stitch the routing stream too (T1 §4.2).

The named baseline, "numpy", is the least a correct stitch from arrays must do: per turn compare the prompt
with the previous prompt and output (two vectorised comparisons), keep the new context and the output, then
one concatenation into int32 ids, an int8 mask and float32 log-probs, the routing rows (each turn's rows must
start where the previous turn's ended) concatenated into ``[T-1, L, k]``, and the reward index. The T1 path is
``stitch(turns, ...)`` with its full per-turn validation (types, id and log-prob ranges of the new ids),
the audit (`audit_drift` recount) and `Sample.validate`; it runs with ``repair="strict"`` and with
``repair="retokenized"`` (same boundaries, so the repairs cost nothing unless a boundary needs them). The
list path (Python lists, as today's harness passes) is shown for reference, and so is the T1 path on
prompts held in one `t1_tito.PromptBuffer` (each prompt a view sharing the previous one's memory, so the
prefix is recognised without a comparison). Both variants' outputs are
checked equal before any figure is printed.

Each repeat times ``--inner`` calls of each variant, interleaved (`paired.interleave`: A B C D, then
D C B A, ...), and keeps each variant's fastest call; the ratio is baseline time / T1 time within each
repeat (>= 0.5 is the goal), printed as min / median / max. Time
per token at each turn count is the median over repeats (flat means linear cost). Nothing asserts. Ends
with one JSON line of the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np
from paired import interleave, paired_ratios  # tools/bench/paired.py

from t1_tito import PromptBuffer, Turn, load_tokenizer, stitch

FIRST_PROMPT, OUTPUT, OBSERVATION = 2_000, 300, 500
LAYERS, TOP_K, NUM_EXPERTS = 48, 8, 256  # the paper's model: 48 MoE layers, top-8 of 256 experts
META = {"reward": 0.5, "task_id": "bench", "family": "bench", "trial_id": "bench-0"}


def episode(
    turns: int,
    seed: int = 0,
    as_lists: bool = False,
    buffered: bool = False,
    layers: int = LAYERS,
    top_k: int = TOP_K,
) -> list[Turn]:
    """A strict episode: prompt_(i+1) = prompt_i || output_i || observation_i, arrays (or lists) per turn.

    Each turn's routing rows (uint8 ``[rows, layers, top_k]``, none when ``layers`` is 0) cover the positions
    from where the previous turn's rows ended to ``len(prompt) + len(output) - 1``, as the harness asks the
    engine for them. ``buffered``: the prompts are views of one `t1_tito.PromptBuffer` instead of an array
    each.
    """
    rng = np.random.default_rng(seed)
    covered = 0
    prompt = rng.integers(0, 248_000, FIRST_PROMPT, dtype=np.int64)
    buffer = PromptBuffer(prompt) if buffered else None
    prompt = buffer.view() if buffer is not None else prompt
    out = []
    for _ in range(turns):
        output = rng.integers(0, 248_000, OUTPUT, dtype=np.int64)
        logprobs = -rng.random(OUTPUT)
        end = len(prompt) + OUTPUT - 1
        routing = (
            rng.integers(0, NUM_EXPERTS, (end - covered, layers, top_k), dtype=np.uint8) if layers else None
        )
        if as_lists:
            turn = Turn(
                prompt_ids=prompt.tolist(),
                output_ids=output.tolist(),
                output_logprobs=logprobs.tolist(),
                policy_version=1,
                finish_reason="stop",
                routed_experts=routing,
                routed_experts_start_len=covered,
            )
        else:
            turn = Turn(
                prompt_ids=prompt,
                output_ids=output,
                output_logprobs=logprobs,
                policy_version=1,
                finish_reason="stop",
                routed_experts=routing,
                routed_experts_start_len=covered,
            )
        out.append(turn)
        covered = end
        observation = rng.integers(0, 248_000, OBSERVATION, dtype=np.int64)
        if buffer is not None:
            prompt = buffer.extend(output, observation)
        else:
            prompt = np.concatenate([prompt, output, observation])
    return out


def numpy_stitch(turns: list[Turn]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, int]:
    """The baseline: prefix and routing-row checks, then one concatenation of each stream."""
    tokens, mask, logprobs, routing = [], [], [], []
    prev_prompt = prev_output = None
    n = 0
    for t in turns:
        p, a = t.prompt_ids, t.output_ids
        if prev_prompt is not None:
            m = prev_prompt.shape[0]
            if not ((p[:m] == prev_prompt).all() and (p[m:n] == prev_output).all()):
                raise AssertionError("the bench episode is strict")
        if t.routed_experts is not None:
            if t.routed_experts_start_len != max(n - 1, 0):
                raise AssertionError("each turn's routing rows start where the previous turn's ended")
            routing.append(t.routed_experts)
        context = p[n:]
        tokens += [context, a]
        mask += [np.zeros(context.shape[0], np.int8), np.ones(a.shape[0], np.int8)]
        logprobs += [np.zeros(context.shape[0], np.float32), t.output_logprobs]
        prev_prompt, prev_output, n = p, a, p.shape[0] + a.shape[0]
    ids = np.concatenate(tokens, dtype=np.int32, casting="unsafe")
    loss = np.concatenate(mask)
    lps = np.concatenate(logprobs, dtype=np.float32, casting="same_kind")
    rows = np.concatenate(routing) if routing else None
    return ids, loss, lps, rows, int(np.flatnonzero(loss)[-1])


def timed(fn: Callable[[], object]) -> Callable[[], float]:
    """``fn`` as an arm of `paired.interleave`: it returns the seconds one call took."""

    def arm() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return arm


def interleaved(variants: dict[str, Callable[[], object]], inner: int) -> dict[str, float]:
    """Fastest call of each variant in seconds, the variants interleaved call by call (`paired.interleave`).

    The minimum, since on a shared machine every slower call measures other processes' load; interleaving
    spreads that load evenly over the variants.
    """
    calls = interleave({name: timed(fn) for name, fn in variants.items()}, repeat=inner)
    return {name: min(values) for name, values in calls.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--inner", type=int, default=20)
    ap.add_argument("--turns", default="5,10,20,40")
    ap.add_argument("--layers", type=int, default=LAYERS, help="routing layers per token (0: no routing)")
    ap.add_argument("--top-k", type=int, default=TOP_K, help="routed experts per layer")
    args = ap.parse_args()
    tok = load_tokenizer()
    repaired = {"repair": "retokenized", "normalize_max_s": 96, "normalize_max_u": 16, "tokenizer": tok}

    rows = {}
    for n_turns in [int(x) for x in args.turns.split(",")]:
        shape = {"layers": args.layers, "top_k": args.top_k}
        turns = episode(n_turns, **shape)
        ids, loss, lps, routing_rows, reward_index = numpy_stitch(turns)
        (sample,) = stitch(turns, **META).samples
        assert (sample.token_ids == ids).all() and (sample.loss_mask == loss).all()
        assert (sample.rollout_logprobs == lps).all() and sample.reward_index == reward_index
        if routing_rows is None:
            assert sample.routing is None
        else:
            same = sample.routing is not None and (sample.routing == routing_rows).all()
            assert same, "routing streams differ"
        buffered = episode(n_turns, buffered=True, **shape)
        variants = {
            "numpy": lambda turns=turns: numpy_stitch(turns),
            "t1_strict": lambda turns=turns: stitch(turns, **META),
            "t1_retokenized": lambda turns=turns: stitch(turns, **META, **repaired),
            "t1_buffer": lambda turns=buffered: stitch(turns, **META),
        }
        interleaved(variants, 2)  # warm
        times = {k: [] for k in variants}
        for _ in range(args.repeat):
            for name, t in interleaved(variants, args.inner).items():
                times[name].append(t)
        tokens = int(ids.shape[0])
        ratios = paired_ratios(times["numpy"], times["t1_strict"])
        ratios_r = paired_ratios(times["numpy"], times["t1_retokenized"])
        rows[n_turns] = {
            "tokens": tokens,
            "numpy_us": statistics.median(times["numpy"]) * 1e6,
            "t1_us": statistics.median(times["t1_strict"]) * 1e6,
            "t1_retokenized_us": statistics.median(times["t1_retokenized"]) * 1e6,
            "numpy_ns_per_token": statistics.median(times["numpy"]) / tokens * 1e9,
            "t1_ns_per_token": statistics.median(times["t1_strict"]) / tokens * 1e9,
            "ratio_min": min(ratios),
            "ratio_median": statistics.median(ratios),
            "ratio_max": max(ratios),
            "ratio_retokenized_median": statistics.median(ratios_r),
            "t1_buffer_ns_per_token": statistics.median(times["t1_buffer"]) / tokens * 1e9,
            "ratio_buffer_median": statistics.median(paired_ratios(times["numpy"], times["t1_buffer"])),
        }

    list_turns = episode(20, as_lists=True, layers=args.layers, top_k=args.top_k)
    list_s = min(interleaved({"lists": lambda: stitch(list_turns, **META)}, 3)["lists"] for _ in range(3))

    print(
        f"{'turns':>5} {'tokens':>7} {'numpy us':>9} {'t1 us':>9} {'numpy ns/tok':>12} {'t1 ns/tok':>9} "
        f"{'ratio min/med/max (numpy / t1)':>31} {'retok. med':>10} {'buffer ns/tok':>13} {'buffer med':>10}"
    )
    for n_turns, r in rows.items():
        print(
            f"{n_turns:>5} {r['tokens']:>7} {r['numpy_us']:>9.0f} {r['t1_us']:>9.0f} "
            f"{r['numpy_ns_per_token']:>12.1f} {r['t1_ns_per_token']:>9.1f} {r['ratio_min']:>11.2f} / "
            f"{r['ratio_median']:.2f} / {r['ratio_max']:.2f}x {r['ratio_retokenized_median']:>9.2f}x "
            f"{r['t1_buffer_ns_per_token']:>13.1f} {r['ratio_buffer_median']:>9.2f}x"
        )
    per_token = [r["t1_ns_per_token"] for r in rows.values()]
    flatness = max(per_token) / min(per_token)
    buffer_tok = [r["t1_buffer_ns_per_token"] for r in rows.values()]
    numpy_tok = [r["numpy_ns_per_token"] for r in rows.values()]
    print(
        f"time per token, largest / smallest over turn counts: t1 {flatness:.2f}x, t1 buffer prompts "
        f"{max(buffer_tok) / min(buffer_tok):.2f}x, numpy {max(numpy_tok) / min(numpy_tok):.2f}x (1.0 = flat)"
    )
    tokens_20 = rows.get(20, next(iter(rows.values())))["tokens"]
    print(f"list inputs, 20 turns: {list_s * 1e3:.2f} ms ({tokens_20 / list_s / 1e6:.2f} M tokens/s)")
    print(f"routing: {args.layers} layers x top-{args.top_k} uint8 per token, stitched on both sides")
    figures = {
        "bench": "tito_stitch",
        "routing_layers": args.layers,
        "routing_top_k": args.top_k,
        "per_turns": {str(k): {n: round(v, 3) for n, v in r.items()} for k, r in rows.items()},
        "ratio_median_20_turns": round(rows[20]["ratio_median"], 3) if 20 in rows else None,
        "per_token_flatness": round(flatness, 3),
        "per_token_flatness_buffer": round(max(buffer_tok) / min(buffer_tok), 3),
        "per_token_flatness_numpy": round(max(numpy_tok) / min(numpy_tok), 3),
        "t1_tokens_per_s_20_turns": round(rows[20]["tokens"] / (rows[20]["t1_us"] * 1e-6))
        if 20 in rows
        else None,
        "list_inputs_20_turns_ms": round(list_s * 1e3, 3),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
