"""Time PPO steps of the torch backend on issue 2's tiny model (hidden 64, 4 layers, 8 experts top 2).

Usage (from the repository root):

    uv run python packages/t1-trainer/scripts/bench_ppo_step.py [tokens_per_sample=1024] [samples=4] [steps=3]

Samples are synthetic but shaped like stitched trajectories: a 200-token prompt, then 150 sampled tokens and a
100-token observation, repeated; routing and rollout log-probs come from a forward of the sampler (same seed,
so the replayed log-prob gap of the first step is the numerics alone). Prints wall and CPU seconds per step,
the split (critic values, critic update, actor update), the gap, and the peak RSS of the process (which also
holds the sampler copy).
"""

from __future__ import annotations

import resource
import sys
import time
from types import SimpleNamespace

import numpy as np
import torch

from t1_r3 import capture_routing
from t1_rollout.model import build_model, num_real_tokens
from t1_tito import Sample
from t1_trainer import PpoHyperparams, TorchBackend, ppo_step
from t1_trainer.logprobs import lm_head_logprobs

TINY = SimpleNamespace(
    vocab_size=248320, hidden_size=64, num_layers=4, num_experts=8, top_k=2, moe_intermediate_size=32,
    shared_expert_intermediate_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
    linear_conv_kernel_dim=4, full_attention_interval=4, max_position_embeddings=8192,
    tie_word_embeddings=False,
)  # fmt: skip


def make_samples(model: torch.nn.Module, tokens: int, count: int) -> list[Sample]:
    """``count`` validated samples of ``tokens`` tokens with routing and log-probs from ``model``."""
    limit = num_real_tokens(TINY.vocab_size)
    out = []
    for i in range(count):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, 5000, (tokens,), generator=g)
        mask = np.zeros(tokens, np.int8)
        for j in range(200, tokens, 250):
            mask[j : j + 150] = 1
        mask[-1] = 1
        pos = np.flatnonzero(mask)
        lp = np.zeros(tokens, np.float32)
        with capture_routing(model) as rec, torch.no_grad():
            hidden = model.model(input_ids=ids[None]).last_hidden_state[0]
            lp[pos] = lm_head_logprobs(
                hidden[pos - 1], model.lm_head.weight, ids[pos], temperature=1.0, vocab_limit=limit
            ).numpy()
        s = Sample(
            token_ids=ids.numpy().astype(np.int32), loss_mask=mask, rollout_logprobs=lp,
            routing=rec.rows()[: tokens - 1].astype(np.int32), reward=0.1 * i, reward_index=int(pos[-1]),
            task_id=f"task-{i}", family="bench", trial_id=f"trial-{i}", chunk_index=0, policy_version=0,
        )  # fmt: skip
        s.validate()
        out.append(s)
    return out


def main() -> None:
    """Parse the arguments, build samples and backend, time the steps."""
    tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    samples = make_samples(build_model(TINY, seed=0), tokens, count)
    hp = PpoHyperparams()
    backend = TorchBackend(model_spec=TINY, ppo_spec=hp, seed=0)
    loss_tokens = sum(int(s.loss_mask.sum()) for s in samples)
    threads = torch.get_num_threads()
    print(f"{count} samples x {tokens} tokens ({loss_tokens} loss tokens), torch threads {threads}")
    for k in range(steps):
        wall, cpu = time.perf_counter(), time.process_time()
        m = ppo_step(backend, samples, hp)
        print(
            f"step {k}: wall {time.perf_counter() - wall:.2f} s, cpu {time.process_time() - cpu:.2f} s "
            f"(values {m['trainer/values_time_s']:.2f}, critic {m['critic/time_s']:.2f}, "
            f"actor {m['actor/time_s']:.2f}); gap with replay {m['actor/logprob_gap_replay']:.2e}"
        )
    print(f"load average {open('/proc/loadavg').read().split()[:3]}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
