"""Data parallel over a rank group: the token-balanced shard, 2 gloo ranks = 1 rank, a dead rank's failure.

The two-rank tests run this file as a script in two subprocesses (``python test_distributed.py RANK WORLD
PORT OUT MODE``), each a rank of a gloo group on 127.0.0.1 at a free port; the one-rank reference runs in the
test's own process on the same batch. Four samples of 30, 21, 30 and 25 tokens shard as [0, 3] and [1, 2],
so the group adds the per-sample gradients in another order than one rank does.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from t1_spec import PPOSpec, load_recipe
from t1_trainer.data_parallel import reduce_metrics
from t1_trainer.distributed import RankGroup, shard_by_tokens

HERE = Path(__file__).resolve()
TINY_RECIPE = HERE.parents[2] / "recipes" / "tiny-cpu.yaml"
PPO = PPOSpec(batch_size=4, actor_lr=1e-4, critic_lr=1e-3, ppo_epochs=2)  # R3 replay on (the default)
WEIGHT_ATOL = {"actor": 0.01 * PPO.actor_lr, "critic": 0.01 * PPO.critic_lr}
"""fp32 reduction order: the group sums the same per-sample gradients in another order than one rank, and
Adam's step (about one learning rate per weight) divides by the gradient's own scale, so a last-bit difference
of a small gradient moves a weight by a little; 1% of one step is allowed (measured: 1.2e-7 and 8.6e-7)."""
PACKED = PPO.model_copy(update={"micro_batch_size": 2})
"""Packed micro-batches of two samples (`t1_trainer.packing`): each rank packs its two-sample shard."""
PACKED_ATOL = {"actor": 0.02 * PPO.actor_lr, "critic": 0.02 * PPO.critic_lr}
"""Packing changes the forward's kernels (varlen attention, right-padded scans), not only the order of the
additions; 2% of one Adam step is allowed, the packing tests' own bound against unpacked."""
DEAD_RANK_TIMEOUT_S = 20.0
"""The group's deadline in the dead-rank test (a recipe's is 1800-7200 s, T1 §7.3)."""


# ---- the shard (pure) ----


def test_shard_balances_tokens_longest_first():
    # by hand, longest first onto the lighter rank: 9 -> r0, 7 -> r1, 5 -> r1 (7 < 9), 4 -> r0 (9 < 12),
    # 3 -> r1 (12 < 13)
    assert shard_by_tokens([5, 9, 3, 7, 4], 2) == [[1, 4], [0, 2, 3]]


def test_shard_is_a_partition_in_batch_order_and_deterministic():
    counts = [int(x) for x in np.random.default_rng(0).integers(1, 500, size=37)]
    shards = shard_by_tokens(counts, 4)
    assert sorted(i for s in shards for i in s) == list(range(37))
    assert all(s == sorted(s) for s in shards)
    assert shards == shard_by_tokens(counts, 4)
    loads = [sum(counts[i] for i in s) for s in shards]
    assert max(loads) - min(loads) <= max(
        counts
    )  # greedy longest-first never leaves more than one sample's gap


def test_one_rank_is_the_batch_and_ties_go_to_the_lower_rank():
    assert shard_by_tokens([3, 1, 2], 1) == [[0, 1, 2]]
    assert shard_by_tokens([30, 21, 30], 2) == [[0, 1], [2]]
    assert shard_by_tokens([4], 3) == [[0], [], []]


def test_shard_refuses_bad_input():
    with pytest.raises(ValueError, match="world_size 0"):
        shard_by_tokens([1], 0)
    with pytest.raises(ValueError, match="sample 1 has a negative"):
        shard_by_tokens([1, -2], 2)


def test_rank_group_refuses_bad_arguments():
    with pytest.raises(ValueError, match="rank 2 of world_size 2"):
        RankGroup(rank=2, world_size=2, address="127.0.0.1", port=1234, timeout_s=10)
    with pytest.raises(ValueError, match="timeout_s 0"):
        RankGroup(rank=0, world_size=1, address="127.0.0.1", port=1234, timeout_s=0)


def test_reduce_metrics_weights_means_by_tokens_and_sums_losses():
    rows = [
        {"actor/loss_tokens": 30, "actor/logprob_gap_replay": 0.01, "actor/policy_loss": 0.5,
         "actor/ratio_min": 0.9, "actor/grad_norm": 2.0, "actor/time_s": 1.0},
        {"actor/loss_tokens": 10, "actor/logprob_gap_replay": 0.05, "actor/policy_loss": -0.2,
         "actor/ratio_min": 0.8, "actor/grad_norm": 2.0, "actor/time_s": 3.0},
    ]  # fmt: skip
    out = reduce_metrics(rows)
    assert out["actor/loss_tokens"] == 40
    assert out["actor/logprob_gap_replay"] == pytest.approx((0.01 * 30 + 0.05 * 10) / 40)
    assert out["actor/policy_loss"] == pytest.approx(0.3)
    assert out["actor/ratio_min"] == 0.8 and out["actor/grad_norm"] == 2.0 and out["actor/time_s"] == 3.0
    with pytest.raises(Exception, match="no rule to reduce metric 'actor/new'"):
        reduce_metrics([{"actor/new": 1.0}])


# ---- two ranks (subprocesses) ----


def _batch(spec, sample_with):
    from t1_policy import build_model

    sampler = build_model(spec, seed=0)
    turns = [[(6, 4), (4, 0)], [(5, 0)], [(8, 3), (3, 0)], [(9, 0)]]  # 30, 21, 30, 25 tokens (16 of prompt)
    return [
        sample_with(sampler, prompt_len=16, turns=t, reward=r, seed=i, task_id=f"t{i}")
        for i, (t, r) in enumerate(zip(turns, [0.2, 0.9, 0.5, 0.0], strict=True))
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(tmp_path: Path, mode: str, timeout_s: float) -> list[subprocess.CompletedProcess]:
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE), str(rank), "2", str(port), str(tmp_path), mode],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    done = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out))
    return done


def _max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert set(a) == set(b)
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a if a[k].numel())


@pytest.mark.parametrize("mode", ["step", "packed"])
def test_two_gloo_ranks_train_the_weights_one_rank_trains(tmp_path, tiny_model_spec, sample_with, mode):
    from t1_trainer.step import critic_warmup_step, ppo_step
    from t1_trainer.torch_backend import TorchBackend

    runs = _run_ranks(tmp_path, mode, timeout_s=600)
    for r in runs:
        assert r.returncode == 0, r.stdout[-3000:]
    torch.set_num_threads(1)
    ppo, atol = (PPO, WEIGHT_ATOL) if mode == "step" else (PACKED, PACKED_ATOL)
    one = TorchBackend(model_spec=tiny_model_spec, ppo_spec=ppo, seed=0, logprob_gap_every=1)
    initial = {net: {k: v.detach().clone() for k, v in getattr(one, net).state_dict().items()}
               for net in ("actor", "critic")}  # fmt: skip
    row = ppo_step(one, _batch(tiny_model_spec, sample_with), ppo)
    got = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for net, model in (("actor", one.actor), ("critic", one.critic)):
        want = {k: v.detach() for k, v in model.state_dict().items()}
        diff = _max_abs_diff(got[0][net], want)
        print(f"{net}: max |w_2rank - w_1rank| = {diff:.3g}")
        assert diff <= atol[net], f"{net} weights differ by {diff} > {atol[net]}"
        assert _max_abs_diff(got[0][net], got[1][net]) == 0.0  # the replicas stay identical
        assert _max_abs_diff(want, initial[net]) > 10 * atol[net]  # the step moved the weights
    rel = 1e-4 if mode == "step" else 1e-3
    _same_row(got, "metrics", row, rel)
    # then the critic warm-up step on the same batch, from the weights the PPO step left
    warm = critic_warmup_step(one, _batch(tiny_model_spec, sample_with), ppo)
    diff = _max_abs_diff(got[0]["critic_warm"], {k: v.detach() for k, v in one.critic.state_dict().items()})
    print(f"critic after warm-up: max |w_2rank - w_1rank| = {diff:.3g}")
    assert diff <= atol["critic"]
    _same_row(got, "warm", warm, rel)


def _same_row(got: list[dict], key: str, row: dict, rel: float = 1e-4) -> None:
    """Both ranks return one row, the one-rank row to fp32 reduction-order tolerance (times aside)."""
    metrics = dict(got[0][key])
    assert json.dumps(metrics, sort_keys=True) == json.dumps(got[1][key], sort_keys=True)  # one row, NaN too
    assert metrics.pop("trainer/ranks") == 2
    assert set(metrics) == set(row)
    for k, v in row.items():
        if k.endswith("time_s") or not isinstance(v, float):
            assert k.endswith("time_s") or metrics[k] == v, k
            continue
        print(f"{key} {k}: 1 rank {v!r}, 2 ranks {metrics[k]!r}")
        assert metrics[k] == pytest.approx(v, rel=rel, abs=1e-6, nan_ok=True), k


def test_a_dead_rank_fails_the_others_collective_with_its_cause(tmp_path):
    runs = _run_ranks(tmp_path, "die", timeout_s=300)  # generous: the group's deadline is 20 s
    assert runs[1].returncode == 17, runs[1].stdout[-3000:]
    assert runs[0].returncode == 0, runs[0].stdout[-3000:]
    message = (tmp_path / "rank0.err").read_text()
    assert "rank 0 of 2" in message and "collective deadline of 20 s" in message, message
    assert "liveness.collective_timeout_s" in message and "Cause:" in message
    # rank 1 passed every collective up to its actor backward, so rank 0 fails in DDP's gradient sum
    assert "the actor's gradient all-reduce failed" in message, message


def test_a_backward_error_that_is_not_the_gradient_sum_is_not_called_a_collective_failure(tmp_path):
    # a one-rank group in a child process: the test process may hold another group (megatron's CPU tests)
    port = _free_port()
    args = [sys.executable, str(HERE), "0", "1", str(port), str(tmp_path), "autograd"]
    run = subprocess.run(
        args, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    raised = (tmp_path / "rank0.err").read_text()
    assert raised.startswith("RuntimeError:") and "does not require grad" in raised, raised


def _rank_main(rank: int, world: int, port: int, out: Path, mode: str) -> None:
    """One rank of a test's group.

    Modes: ``step`` trains and saves, the PPO step as a Ray run's rank takes it (the plan made from the whole
    batch, then only this rank's shard given to `data_parallel_ppo_shard_step`); ``packed`` through
    `data_parallel_ppo_step` (every rank plans) with packed micro-batches of two samples; ``die``:
    rank 1 dies in its actor update; ``autograd``: a backward of a loss without a graph, whose error is
    written down.
    """
    sys.path.insert(0, str(HERE.parent))
    from conftest import sample_from  # the fixtures' sampler, as the in-process reference uses it
    from t1_trainer.data_parallel import (
        DataParallelTorchBackend,
        data_parallel_critic_warmup_step,
        data_parallel_ppo_shard_step,
        data_parallel_ppo_step,
    )
    from t1_trainer.distributed import CollectiveError
    from t1_trainer.shard_plan import plan_ppo_step

    torch.set_num_threads(1)
    spec = load_recipe(TINY_RECIPE).model
    batch = _batch(spec, sample_from)
    timeout = DEAD_RANK_TIMEOUT_S if mode == "die" else 600.0
    group = RankGroup(rank=rank, world_size=world, address="127.0.0.1", port=port, timeout_s=timeout).join()
    ppo = PACKED if mode == "packed" else PPO
    be = DataParallelTorchBackend(group, model_spec=spec, ppo_spec=ppo, seed=0, logprob_gap_every=1)
    if mode == "autograd":
        try:
            be.backward(torch.zeros(()), "critic")  # a loss with no graph: autograd's own error
        except RuntimeError as e:
            (out / f"rank{rank}.err").write_text(f"{type(e).__name__}: {e}")
        group.leave()
        return
    if mode == "die" and rank == 1:
        backward = be.backward

        def dying_backward(loss: torch.Tensor, network: str) -> None:
            if network == "actor":
                os._exit(17)  # mid-step: the critic is updated, the actor's first backward never happens
            backward(loss, network)

        be.backward = dying_backward
    try:
        if mode == "step":
            plan = plan_ppo_step(batch, ppo, world, policy_version=0, routing_errors=be.routing_errors)
            shard = [batch[i] for i in plan.shards[rank]]
            metrics = data_parallel_ppo_shard_step(be, shard, plan, ppo)
        else:
            metrics = data_parallel_ppo_step(be, batch, ppo)
    except CollectiveError as e:
        (out / f"rank{rank}.err").write_text(str(e))
        os._exit(0)  # the group is broken: leaving it would wait on the dead peer
    weights = {net: {k: v.detach().clone() for k, v in getattr(be, net).state_dict().items()}
               for net in ("actor", "critic")}  # fmt: skip
    warm = data_parallel_critic_warmup_step(be, batch, ppo)
    critic_warm = {k: v.detach().clone() for k, v in be.critic.state_dict().items()}
    torch.save(
        {**weights, "metrics": metrics, "warm": warm, "critic_warm": critic_warm}, out / f"rank{rank}.pt"
    )
    group.leave()


if __name__ == "__main__":
    _rank_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), sys.argv[5])
