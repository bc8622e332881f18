"""Fixtures: a stand-in sampler that records what the engine records.

Samples are real `t1_tito.Sample` objects (validated), built from a prefill + cached-decode trajectory. The
tiny model itself is `tiny_model_spec` from the root `tests/conftest.py` (`recipes/tiny-cpu.yaml`).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from t1_tito import Sample as TitoSample

logging.getLogger("transformers.integrations.hub_kernels").setLevel(logging.ERROR)


def sample_from(
    model: torch.nn.Module,
    *,
    prompt_len: int,
    turns: list[tuple[int, int]],
    reward: float,
    seed: int,
    task_id: str = "task",
) -> TitoSample:
    """Samples a multi-turn trajectory the way the embedded engine does: prefill, cached decode.

    ``turns`` is a list of (sampled tokens, observation tokens after them). Routing is captured per forward
    (rows = tokens - 1), log-probs scored with `t1_policy.token_logprobs` as the engine does.
    """
    from t1_policy import num_real_tokens, token_logprobs
    from t1_r3 import capture_routing

    g = torch.Generator().manual_seed(seed)
    limit = num_real_tokens(model.config.vocab_size)
    ids = torch.randint(0, 5000, (prompt_len,), generator=g).tolist()
    mask = [0] * prompt_len
    lps = [0.0] * prompt_len
    with capture_routing(model) as rec, torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=True)
        for t_i, (n_sampled, n_obs) in enumerate(turns):
            for k in range(n_sampled):
                logits = out.logits[0, -1]
                probs = torch.softmax(logits[:limit].float(), -1)
                tok = int(torch.multinomial(probs, 1, generator=g))
                ids.append(tok)
                mask.append(1)
                lps.append(float(token_logprobs(logits, torch.tensor(tok), 1.0, vocab_limit=limit)))
                last = t_i == len(turns) - 1 and k == n_sampled - 1 and n_obs == 0
                if not last:
                    out = model(input_ids=torch.tensor([[tok]]), cache=out.cache, use_cache=True)
            if n_obs:
                obs = torch.randint(0, 5000, (n_obs,), generator=g).tolist()
                ids += obs
                mask += [0] * n_obs
                lps += [0.0] * n_obs
                out = model(input_ids=torch.tensor([obs]), cache=out.cache, use_cache=True)
        routing = rec.rows()
    assert routing.shape[0] == len(ids) - 1 or turns[-1][1] > 0
    routing = routing[: len(ids) - 1]
    last_sampled = max(i for i, m in enumerate(mask) if m)
    sample = TitoSample(
        token_ids=np.array(ids, dtype=np.int32),
        loss_mask=np.array(mask, dtype=np.int8),
        rollout_logprobs=np.array(lps, dtype=np.float32),
        routing=routing.astype(np.int32),
        reward=reward,
        reward_index=last_sampled,
        task_id=task_id,
        family="scripting",
        trial_id=f"trial-{seed}",
        chunk_index=0,
        policy_version=0,
    )
    sample.validate()
    return sample


@pytest.fixture(scope="session")
def Sample() -> type[TitoSample]:  # noqa: N802 - a class handed to tests
    return TitoSample


@pytest.fixture(scope="session")
def sample_with() -> object:
    return sample_from
