"""Device check, two ranks on one GPU: the Megatron backend's PPO step with ep = 2, dp = 2, where NCCL allows.

Run (from the repository root; `tools/device/check.sh --ranks 2` dispatches here under its time limit):

    python tools/device/check_ranks.py --ranks 2 [--dry-run] [--device cuda:0] [--samples N] [--seed N]

What it does:

1. Probe: starts 2 processes on one device (``cuda:0``; both ``LOCAL_RANK`` 0), each joins an ``nccl``
   group on a loopback port and all-reduces one tensor. NCCL refuses two ranks of one communicator on one
   GPU in many versions (``ncclInvalidUsage``, "Duplicate GPU detected"); then the JSON line says so
   (``nccl_two_ranks_one_gpu: false`` with the error) and the check ends with status 0: the answer is a fact
   about this machine, not a failure of T1.
2. Where the probe passes: each rank builds `t1_trainer.megatron.MegatronBackend` (the recipe's model with
   every layer full attention, plan ep = 2, dp = 2) and runs ONE PPO step (`t1_trainer.step.ppo_step`, R3
   replay on) on the same batch: teacher-forced samples of random ids whose rollout log-probs and routing
   rows come from one forward of the HF policy (`t1_r3.capture_routing`). Each rank reports its step
   metrics and, on CUDA, its allocated and peak memory after the build and after the step (bytes).

``--dry-run`` runs the same on the CPU with ``gloo`` (the probe then tests gloo, and memory is null), so CI
checks the script without a GPU. Prints one JSON line on stdout; exits 0 when it printed, 1 when a rank
failed (its log tail on stderr), 2 for bad arguments or a missing device.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "tiny-cpu.yaml"
RANK_TIMEOUT_S = 400.0
"""Both phases of a rank together (seconds); check.sh's own limit bounds the whole run."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; ``--ranks`` must be 2 (the one-GPU question is whether a second rank fits)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2, help="ranks on the one device (only 2)")
    ap.add_argument("--dry-run", action="store_true", help="CPU and gloo (CI)")
    ap.add_argument("--device", default=None, help="the one device (default cuda:0; cpu with --dry-run)")
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--worker", nargs=4, metavar=("RANK", "PORT", "PHASE", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.ranks != 2:
        ap.error(f"--ranks {args.ranks}: only 2 is built (two ranks on one device)")
    if args.samples < 1:
        ap.error(f"--samples {args.samples} must be >= 1")
    args.device = args.device or ("cpu" if args.dry_run else "cuda:0")
    return args


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _batch(spec: Any, n: int, seed: int) -> list[Any]:
    """Teacher-forced samples: random ids, rollout log-probs and routing from one HF forward each."""
    import numpy as np
    import torch

    from t1_policy import build_model, num_real_tokens, token_logprobs
    from t1_r3 import capture_routing
    from t1_tito import Sample

    model = build_model(spec, seed=seed)
    limit = num_real_tokens(spec.vocab_size)
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        prompt, answer = 24 + i, 16
        ids = torch.randint(0, 5000, (prompt + answer,), generator=g)
        with capture_routing(model) as rec, torch.no_grad():
            logits = model(input_ids=ids[None]).logits[0]
        lps = np.zeros(len(ids), dtype=np.float32)
        for t in range(prompt, len(ids)):
            lps[t] = float(token_logprobs(logits[t - 1], ids[t], 1.0, vocab_limit=limit))
        sample = Sample(
            token_ids=ids.numpy().astype(np.int32),
            loss_mask=np.array([0] * prompt + [1] * answer, dtype=np.int8),
            rollout_logprobs=lps,
            routing=rec.rows()[: len(ids) - 1].astype(np.int32),
            reward=0.5 * i,
            reward_index=len(ids) - 1,
            task_id=f"check-{i}",
            family="scripting",
            trial_id=f"trial-{i}",
            chunk_index=0,
            policy_version=0,
        )
        sample.validate()
        out.append(sample)
    return out


def _memory(cuda: bool) -> dict[str, int] | None:
    import torch

    if not cuda:
        return None
    return {"allocated": int(torch.cuda.memory_allocated()), "peak": int(torch.cuda.max_memory_allocated())}


def worker(args: argparse.Namespace) -> int:
    """One rank: the probe, or the probe and the PPO step; writes its JSON to ``OUT/rank{R}.json``."""
    rank, port, phase, out = int(args.worker[0]), args.worker[1], args.worker[2], Path(args.worker[3])
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK="0"
    )
    import torch
    import torch.distributed as dist

    cuda = args.device.startswith("cuda")
    row: dict[str, Any] = {"rank": rank}
    if cuda:
        torch.cuda.set_device(torch.device(args.device))
    dist.init_process_group("nccl" if cuda else "gloo")
    one = torch.ones(1, device=args.device)
    dist.all_reduce(one)
    row["probe_sum"] = float(one.item())
    if phase == "step":
        from t1_spec import ModelSpec, load_recipe
        from t1_trainer.megatron.backend import MegatronBackend
        from t1_trainer.step import ppo_step

        recipe = load_recipe(RECIPE)
        spec = ModelSpec(**{**recipe.model.model_dump(), "full_attention_interval": 1})
        plan = recipe.plan.model_copy(update={"ep": 2, "dp": 2, "devices": 2})
        batch = _batch(spec, args.samples, args.seed)
        started = time.monotonic()
        be = MegatronBackend(
            model_spec=spec, ppo_spec=recipe.ppo, plan=plan, seed=args.seed, device=args.device
        )
        row["build_s"] = round(time.monotonic() - started, 2)
        row["memory_after_build"] = _memory(cuda)
        started = time.monotonic()
        metrics = ppo_step(be, batch, recipe.ppo.model_copy(update={"batch_size": len(batch)}))
        row["step_s"] = round(time.monotonic() - started, 2)
        row["memory_after_step"] = _memory(cuda)
        row["metrics"] = {
            k: metrics[k]
            for k in ("actor/logprob_gap_replay", "actor/policy_loss", "critic/value_loss", "actor/grad_norm")
            if k in metrics
        }
        row["samples_aborted_routing"] = metrics.get("samples_aborted_routing")
    (out / f"rank{rank}.json").write_text(json.dumps(row))
    dist.destroy_process_group()
    return 0


def _ranks(args: argparse.Namespace, phase: str, out: Path) -> list[tuple[int, str]]:
    port = str(_free_port())
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--device", args.device]
    cmd += ["--samples", str(args.samples), "--seed", str(args.seed)]
    procs = [
        subprocess.Popen(
            [*cmd, "--worker", str(r), port, phase, str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    done = []
    for p in procs:
        try:
            done.append((p.wait(timeout=RANK_TIMEOUT_S), p.stdout.read() if p.stdout else ""))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            done.append((124, f"no answer within {RANK_TIMEOUT_S:.0f} s"))
    return done


def main(argv: list[str] | None = None) -> int:
    """Runs the check; see the module docstring for the line and the exit status."""
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    cuda = args.device.startswith("cuda")
    if cuda:
        import torch

        if not torch.cuda.is_available():
            print(f"device check (2 ranks): {args.device}: torch sees no CUDA device", file=sys.stderr)
            return 2
    line: dict[str, Any] = {"check": "megatron_two_ranks_one_device", "device": args.device, "ranks": 2}
    line["backend"] = "nccl" if cuda else "gloo"
    with tempfile.TemporaryDirectory() as tmp:
        probe = _ranks(args, "probe", Path(tmp))
        if any(rc != 0 for rc, _ in probe):
            tail = next(log for rc, log in probe if rc != 0)[-2000:]
            if not cuda:
                print(f"device check (2 ranks) failed in the gloo probe:\n{tail}", file=sys.stderr)
                return 1
            line["nccl_two_ranks_one_gpu"] = False
            line["reason"] = tail.strip().splitlines()[-1] if tail.strip() else "no output"
            print(json.dumps(line), flush=True)
            return 0
        line["nccl_two_ranks_one_gpu"] = True if cuda else None
        step = _ranks(args, "step", Path(tmp))
        for r, (rc, log) in enumerate(step):
            if rc != 0:
                print(
                    f"device check (2 ranks) failed on rank {r} (exit {rc}):\n{log[-3000:]}", file=sys.stderr
                )
                return 1
        line["rank_rows"] = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(2)]
    line["plan"] = {"tp": 1, "pp": 1, "cp": 1, "ep": 2, "dp": 2}
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
