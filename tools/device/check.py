"""Device check: sample with the embedded engine, train one PPO step, print one JSON line per run.

Run (from the repository root; `tools/device/check.sh` wraps this with a time limit):

    python tools/device/check.py [--dry-run] [--backend torch,megatron] [--sizes tiny,1b] [--device cuda:0]
        [--samples N] [--prompt N] [--new N] [--seed N] [--recipe recipes/tiny-cpu.yaml]

What it does, in order (one progress line per phase on stderr, with the seconds since start):

0. Preflight, before any work: a CUDA device torch sees (else exit 2); the Gated DeltaNet kernel
   (`check_preflight.gdn_kernel`: flash-linear-attention is switched off where its Triton is known wrong
   on Hopper, and the torch path is named in the JSON); the recipe of every size validates; each backend
   asked for is registered and admitted by its ``preflight`` (megatron: where only its Gated DeltaNet
   layers are refused, it runs the same shape with full attention in every layer, said in ``skipped``).
1. Per size (``tiny``: the recipe's model; ``1b``: a 1.36B-parameter Qwen3.5-MoE shape, `SIZES`): builds
   the model (`t1_policy.build_model`, random weights from the recipe seed) in float32, and samples
   ``--samples`` one-turn answers with the embedded engine (`t1_rollout.engine.EmbeddedEngine`) from a copy
   (bfloat16 on CUDA, float32 in the dry run): sampled ids, log-probs and the routed experts of the very
   forwards that sampled them (T1 §4.2).
2. Trains ONE PPO step (`t1_trainer.step.ppo_step`: critic values, GAE, critic update, actor update with R3
   replay) per backend: ``torch`` (float32) or ``megatron`` (megatron-core, one process, dp = 1; bfloat16
   weights with fp32 main parameters on CUDA, float32 on the CPU). The gap figures are the backend's own
   step metrics (T1 §4.3, Fig. 6: 0.021 without replay -> 0.013 with it).
3. On CUDA, reads ``torch.cuda.memory_allocated`` / ``max_memory_allocated`` around each phase and sets
   each term beside the capacity model's prediction (`check_memory`, Eq. 21) in the backend's byte layout.

Prints one JSON line on stdout per (size, backend), as each finishes, and exits 0; on any failure prints
``device check failed in <phase> after N s: ...`` on stderr and exits 1 at once (2 for bad arguments or a
missing device); run as a script it then ends the process with ``os._exit``, so no engine or library thread
keeps it alive. ``--dry-run`` runs everything on the CPU in float32 at a minimal size (the ``1b`` shape keeps
its layers, experts, top-k and vocabulary with small widths); its memory measurements are null.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import math
import os
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_memory import (  # noqa: E402
    TORCH_FP32_BYTES,
    BuildRecorder,
    Memory,
    PhaseRecorder,
    diff,
    megatron_bytes,
    memory_table,
    predicted_terms,
)
from check_preflight import Progress, gdn_kernel  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RECIPE = ROOT / "recipes" / "tiny-cpu.yaml"
BACKENDS = ("torch", "megatron")

GPU_SIZE = {"samples": 8, "prompt": 128, "new": 128}
"""Default batch on a GPU: 8 answers of 128 sampled tokens after 128 prompt tokens (about 1k loss tokens)."""
DRY_SIZE = {"samples": 2, "prompt": 12, "new": 6}
"""Default batch of the CPU dry run: the least that still exercises every phase (two micro-batches)."""

SIZES: dict[str, list[str]] = {
    "tiny": [],
    "1b": [
        "model.name=qwen3.5-moe-1b-shape",
        "model.hidden_size=1024",
        "model.num_layers=8",
        "model.full_attention_interval=4",
        "model.num_experts=64",
        "model.top_k=8",
        "model.moe_intermediate_size=512",
        "model.shared_expert_intermediate_size=512",
        "model.num_attention_heads=8",
        "model.num_key_value_heads=2",
        "model.head_dim=128",
        "model.linear_num_key_heads=8",
        "model.linear_num_value_heads=16",
        "model.linear_key_head_dim=64",
        "model.linear_value_head_dim=64",
    ],
}
"""Model overrides per ``--sizes`` entry on the recipe. ``1b``: hidden 1024, 8 layers of which 2 full
attention (every 4th), 64 experts top-8 of width 512 and a shared expert of 512, the recipe's untied
248,320-token vocabulary: 1,359,751,232 parameters in the actor."""

DRY_1B = [
    "model.hidden_size=64",
    "model.moe_intermediate_size=32",
    "model.shared_expert_intermediate_size=32",
    "model.num_attention_heads=4",
    "model.head_dim=16",
    "model.linear_num_key_heads=2",
    "model.linear_num_value_heads=4",
    "model.linear_key_head_dim=16",
    "model.linear_value_head_dim=16",
]
"""The ``1b`` shape's widths in the dry run (its layers, experts, top-k and vocabulary stay)."""

FULL_ATTENTION = "model.full_attention_interval=1"

CPU_MEMORY_NOTE = (
    "measured is null on the CPU: torch.cuda.max_memory_allocated exists only on CUDA and the CPU allocator "
    "keeps no per-phase peak"
)


class CheckError(RuntimeError):
    """The check could not measure what it reports; the message says which phase and why."""


def _import_path() -> None:
    """Puts the workspace's package sources on ``sys.path`` where T1 is not installed (a lent GPU machine)."""
    try:
        import t1_spec  # noqa: F401
    except ImportError:
        for src in sorted((ROOT / "packages").glob("*/src")):
            sys.path.insert(0, str(src))


def _list(value: str, allowed: tuple[str, ...], flag: str, ap: argparse.ArgumentParser) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        ap.error(f"{flag} {value!r}: expected a comma-separated list of {', '.join(allowed)}")
    return list(dict.fromkeys(items))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; sizes left unset take `GPU_SIZE` or, with ``--dry-run``, `DRY_SIZE`."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU, float32, minimal size (CI)")
    ap.add_argument("--backend", default="torch", help="comma-separated: torch, megatron (default torch)")
    ap.add_argument("--sizes", default="tiny", help="comma-separated: tiny, 1b (default tiny)")
    ap.add_argument("--device", default=None, help="torch device (default cuda:0; cpu with --dry-run)")
    ap.add_argument("--recipe", type=Path, default=DEFAULT_RECIPE)
    ap.add_argument("--samples", type=int, default=None)
    ap.add_argument("--prompt", type=int, default=None, help="prompt tokens per answer")
    ap.add_argument("--new", type=int, default=None, help="sampled tokens per answer")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.backends = _list(args.backend, BACKENDS, "--backend", ap)
    args.size_list = _list(args.sizes, tuple(SIZES), "--sizes", ap)
    size = DRY_SIZE if args.dry_run else GPU_SIZE
    for key, value in size.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
        if getattr(args, key) < 1:
            ap.error(f"--{key} must be >= 1, got {getattr(args, key)}")
    if args.device is None:
        args.device = "cpu" if args.dry_run else "cuda:0"
    if args.dry_run and args.device != "cpu":
        ap.error(f"--dry-run runs on the CPU; drop --device {args.device}")
    return args


# ---- sampling ------------------------------------------------------------------------------------------


async def _sample(engine: Any, args: argparse.Namespace, vocab_limit: int) -> list[SimpleNamespace]:
    """One-turn answers of the engine, as trainer samples (prompt masked, sampled tokens carry the loss)."""
    import numpy as np

    from t1_rollout.engine import SamplingParams

    g = np.random.default_rng(args.seed)
    out = []
    for i in range(args.samples):
        prompt = g.integers(0, min(5000, vocab_limit), args.prompt).tolist()
        gen = await engine.generate(
            prompt, SamplingParams(temperature=1.0, max_new_tokens=args.new, seed=args.seed * 1009 + i)
        )
        if not gen.output_ids or gen.routed_experts is None:
            raise CheckError(f"sampling: answer {i} came back with no tokens or no routing record")
        tokens = prompt + list(gen.output_ids)
        n_new = len(gen.output_ids)
        out.append(
            SimpleNamespace(
                token_ids=np.asarray(tokens, np.int32),
                loss_mask=np.r_[np.zeros(len(prompt), np.int8), np.ones(n_new, np.int8)],
                rollout_logprobs=np.r_[
                    np.zeros(len(prompt), np.float32), np.asarray(gen.output_logprobs, np.float32)
                ],
                routing=gen.routed_experts,  # [T - 1, L, k], from the sampling forwards themselves
                reward=float(g.integers(0, 2)),
                reward_index=len(tokens) - 1,
                task_id=f"device-check-{i}",
                trial_id=f"s{args.seed}-{i}",
                chunk_index=0,
                policy_version=gen.weight_version,
            )
        )
    return out


# ---- what runs ----------------------------------------------------------------------------------------


def _load(path: Path, overrides: list[str], where: str) -> Any:
    from t1_spec import RecipeError, load_recipe

    try:
        return load_recipe(path, overrides)
    except RecipeError as e:
        raise CheckError(f"{where}: {e}".replace("\n", " ")) from e


def _megatron_plan(
    args: argparse.Namespace, overrides: list[str], cuda: bool
) -> tuple[Any, Any, str | None] | str:
    """Megatron's ``(class, recipe, note)`` for one size, or the one line saying why it cannot run here.

    The recipe is the one validated for the embedded engine with ``trainer.backend: torch`` (the spec pairs
    that engine with the torch trainer, which shares its weights in memory; the check copies them instead),
    with bfloat16 weights on CUDA. Where the backend's preflight refuses only the Gated DeltaNet layers, the
    same shape with full attention in every layer is planned, and ``note`` says so.
    """
    from t1_trainer.base import TRAINER_BACKENDS

    problem = TRAINER_BACKENDS.problem("megatron")
    if problem is not None:
        return problem
    try:
        cls = TRAINER_BACKENDS.load("megatron")
    except ImportError as e:
        return f"{type(e).__name__}: {e}".replace("\n", " ")
    dtype = "bfloat16" if cuda else "float32"
    ov = [*overrides, f"model.dtype={dtype}"]
    recipe = _load(args.recipe, ov, "preflight (megatron)")
    problems = cls.preflight(recipe)
    if not problems:
        return cls, recipe, None
    if all(p.startswith("model.full_attention_interval") for p in problems):
        variant = _load(args.recipe, [*ov, FULL_ATTENTION], "preflight (megatron)")
        if not cls.preflight(variant):
            return (
                cls,
                variant,
                (
                    f"megatron: {'; '.join(problems)}; it trained the same shape with full attention in "
                    f"every layer ({FULL_ATTENTION}), sampled separately"
                ),
            )
    return "; ".join(problems).replace("\n", " ")


def plan_runs(args: argparse.Namespace, dev: str, cuda: bool) -> list[SimpleNamespace]:
    """The sampling units and the backends each trains, decided before any work.

    Returns:
        Units in run order (every size's own model first, then megatron's full-attention variants), each
        ``SimpleNamespace(size, overrides, recipe, backends=[(name, class, recipe)], skipped=[str])``.

    Raises:
        CheckError: a recipe does not validate, or routing replay is off.
    """
    from t1_trainer.base import TRAINER_BACKENDS

    base = [
        f"engine.device={dev}",
        f"trainer.device={dev}",
        "trainer.logprob_gap_every=1",  # step 1 measures the live-routing gap and the flip fraction
        f"seed={args.seed}",
        "trainer.backend=torch",
    ]
    units, variants = [], []
    for size in args.size_list:
        ov = [*base, *SIZES[size], *(DRY_1B if args.dry_run and size == "1b" else [])]
        recipe = _load(args.recipe, ov, f"preflight ({size})")
        if not recipe.ppo.routing_replay:
            raise CheckError(
                f"{args.recipe}: ppo.routing_replay is off; the check compares replay with live routing"
            )
        unit = SimpleNamespace(size=size, overrides=ov, recipe=recipe, backends=[], skipped=[])
        if "torch" in args.backends:
            unit.backends.append(("torch", TRAINER_BACKENDS.load("torch"), recipe))
        if "megatron" in args.backends:
            plan = _megatron_plan(args, ov, cuda)
            if isinstance(plan, str):
                if "torch" in args.backends:
                    unit.skipped.append(f"trainer.backend megatron: skipped ({plan})")
                else:
                    unit.skipped.append(
                        f"trainer.backend megatron: skipped ({plan}); the torch backend trained instead"
                    )
                    unit.backends.append(("torch", TRAINER_BACKENDS.load("torch"), recipe))
            elif plan[2] is None:
                unit.backends.append(("megatron", plan[0], plan[1]))
            else:
                variants.append(
                    SimpleNamespace(
                        size=size,
                        overrides=[*ov, FULL_ATTENTION],
                        recipe=plan[1],
                        backends=[("megatron", plan[0], plan[1])],
                        skipped=[plan[2]],
                    )
                )
        if unit.backends:  # megatron alone on its full-attention variant: this model is not sampled
            units.append(unit)
    return units + variants


def _finite(metrics: dict[str, Any], key: str) -> float:
    value = metrics.get(key)
    if not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise CheckError(f"training: the backend reported {key} = {value!r}; expected a finite number")
    return float(value)


def _free(device: Any) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---- one training run ----------------------------------------------------------------------------------


def train_one(
    name: str, cls: Any, recipe: Any, actor: Any, samples: list, device: Any, prog: Progress
) -> dict[str, Any]:
    """One PPO step of backend ``name`` on ``samples``, from ``actor``'s float32 weights; its figures.

    Returns:
        ``{"metrics", "memory", "constants", "step_time_s", "skipped"}``: the step's metrics, the table of
        `memory_table`, the capacity constants of the prediction, seconds, and what was not measured.

    Raises:
        CheckError: the step failed, refused samples, trained nothing or reported a non-finite gap.
    """
    import time

    import torch

    from t1_trainer.step import ppo_step

    memory = Memory(device)
    skipped: list[str] = []
    memory.start_overall()
    base = memory.allocated()
    prog("place", f"building the {name} trainer's actor and critic on {device}")
    try:
        if name == "torch":
            actor.to(device)
            placed = {"actor": diff(memory.allocated(), base)}
            before_critic = memory.allocated()
            backend = cls.from_spec(recipe, actor=actor)
            placed["critic"] = diff(memory.allocated(), before_critic)
            layout = TORCH_FP32_BYTES
        else:
            with BuildRecorder(memory, cls) as built:
                backend = cls.from_spec(recipe, actor=actor)
            placed = dict(built.placed)
            layout = megatron_bytes(recipe.model.dtype)
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        raise CheckError(f"placing the {name} trainer failed: {type(e).__name__}: {e}") from e
    rec = PhaseRecorder(memory)
    hooked = True
    for net in ("actor", "critic"):
        rec.wrap_update(backend, f"update_{net}", net)
        hooked &= rec.hook_optimizer(getattr(backend, f"{net}_opt", None), net)
    if not hooked:
        skipped.append(f"memory grads/optimizer/activations: the {name} backend exposes no torch optimizer")

    prog("train", f"one PPO step with the {name} backend on {len(samples)} samples")
    torch.manual_seed(recipe.seed)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t1 = time.perf_counter()
    try:
        metrics = ppo_step(backend, samples, recipe.ppo)
    except Exception as e:  # the step's own errors already name what and where
        traceback.print_exc(file=sys.stderr)
        raise CheckError(
            f"training: one PPO step with the {name} backend failed: {type(e).__name__}: {e}"
        ) from e
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    step_s = time.perf_counter() - t1
    if metrics.get("samples_aborted_routing"):
        raise CheckError(f"training: routing records refused: {metrics.get('routing_errors')}")
    if int(metrics.get("trainer/loss_tokens", 0)) < 1:
        raise CheckError("training: the step trained no loss token")
    for key in ("replay", "no_replay"):
        _finite(metrics, f"actor/logprob_gap_{key}")

    prog("memory", f"pricing the {name} backend's plan beside what was measured")
    longest = max(len(s.token_ids) for s in samples)
    pred = predicted_terms(recipe, longest, layout)
    placed["total"] = diff(memory.overall_peak(), base)
    placed["residue"] = diff(memory.overall_reserved_peak(), memory.overall_peak())
    table = memory_table(pred, rec, placed, backend=name)
    del backend
    return {
        "metrics": metrics,
        "memory": table,
        "constants": pred["constants"],
        "step_time_s": step_s,
        "skipped": skipped,
    }


# ---- the check -----------------------------------------------------------------------------------------


def run_check(args: argparse.Namespace, prog: Progress) -> Any:
    """Runs the whole check, yielding one JSON record per (size, backend) as each finishes.

    Raises:
        CheckError: a phase could not produce its figure (no CUDA device, a recipe that does not validate, a
            failed step, a non-finite metric).
    """
    import time

    prog(
        "preflight",
        f"device {args.device}, sizes {','.join(args.size_list)}, backends {','.join(args.backends)}",
    )
    import torch

    device = torch.device(args.device)
    capability = None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise CheckError(f"--device {args.device}: torch sees no CUDA device; use --dry-run on a CPU")
        torch.cuda.set_device(device)
        capability = tuple(torch.cuda.get_device_capability(device))
        label = f"{device.type}:{device.index or 0} {torch.cuda.get_device_name(device)}"
    elif device.type == "cpu":
        label = "cpu"
    else:
        raise CheckError(f"--device {args.device}: only cpu and cuda devices are checked")
    kernel, refusal = gdn_kernel(capability)
    preflight = [refusal] if refusal else []
    if refusal:
        prog("preflight", refusal)
    _import_path()
    import numpy as np
    import transformers

    from t1_policy import build_model
    from t1_rollout.engine import EmbeddedEngine

    dev = "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"
    engine_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    units = plan_runs(args, dev, device.type == "cuda")
    runs = [
        f"{u.size}/{b[0]}" + ("(full attention)" if FULL_ATTENTION in u.overrides else "")
        for u in units
        for b in u.backends
    ]
    prog("preflight", f"runs planned: {', '.join(runs) or 'none'}")

    for unit in units:
        where = f"{unit.size}{' full attention' if FULL_ATTENTION in unit.overrides else ''}"
        prog("build", f"{where}: building the model ({unit.recipe.model.name})")
        torch.manual_seed(args.seed)
        fp32 = build_model(unit.recipe.model, seed=unit.recipe.seed, dtype=torch.float32)
        params = int(sum(p.numel() for p in fp32.parameters()))
        prog("sample", f"{where}: {args.samples} answers of {args.new} tokens, {params:,} parameters")
        t0 = time.perf_counter()
        engine = EmbeddedEngine(
            copy.deepcopy(fp32).to(engine_dtype),
            device=dev,
            num_threads=None,
            prefix_cache_size=0,
            seed=args.seed,
        )
        try:
            samples = asyncio.run(_sample(engine, args, engine.vocab_limit))
        finally:
            engine.close()
        del engine
        rollout_s = time.perf_counter() - t0
        _free(device)
        for i, (name, cls, recipe) in enumerate(unit.backends):
            actor = fp32 if i == len(unit.backends) - 1 else copy.deepcopy(fp32)  # torch trains in place
            out = train_one(name, cls, recipe, actor, samples, device, prog)
            del actor
            _free(device)
            m = out["metrics"]
            gap_replay = _finite(m, "actor/logprob_gap_replay")
            gap_live = _finite(m, "actor/logprob_gap_no_replay")
            gdn = recipe.model.num_linear_attention_layers > 0
            yield {
                "check": "t1-device-check",
                "device": label,
                "dry_run": bool(args.dry_run),
                "size": unit.size,
                "backend": name,
                "skipped": [*unit.skipped, *out["skipped"]],
                "preflight": preflight,
                "gdn_kernel": (
                    kernel
                    if name == "torch"
                    else "megatron GatedDeltaNet (fla)"
                    if recipe.trainer.device.startswith("cuda")
                    else "megatron GatedDeltaNet (torch kernels)"
                )
                if gdn
                else "none",
                "model": recipe.model.name,
                "model_overrides": [o for o in unit.overrides if o.startswith("model.")],
                "params": params,
                "engine_dtype": str(engine_dtype).removeprefix("torch."),
                "trainer_dtype": "float32" if name == "torch" else recipe.model.dtype,
                "samples": len(samples),
                "prompt_tokens": args.prompt,
                "sampled_tokens": int(sum(int(np.asarray(s.loss_mask).sum()) for s in samples)),
                "loss_tokens": int(m.get("trainer/loss_tokens", 0)),
                "gap_replay": gap_replay,
                "gap_live": gap_live,
                "gap_ratio": gap_live / gap_replay if gap_replay > 0 else None,
                "flip_fraction": _finite(m, "actor/routing_flip_fraction"),
                "flip_fraction_layers": _finite(m, "actor/routing_flip_fraction_layers"),
                "memory": out["memory"],
                "memory_note": CPU_MEMORY_NOTE
                if device.type != "cuda"
                else "measured from torch.cuda.memory_allocated / max_memory_allocated around each phase",
                "capacity_constants": out["constants"],
                "rollout_time_s": rollout_s,
                "step_time_s": out["step_time_s"],
                "total_time_s": prog.elapsed(),
                "versions": {
                    "torch": torch.__version__,
                    "transformers": transformers.__version__,
                    "cuda": torch.version.cuda,
                },
            }
        del fp32, samples
        _free(device)
    prog("done", f"{len(runs)} run(s)")


def main(argv: list[str] | None = None) -> int:
    """Parses the arguments, runs the check, prints a JSON line per run; returns the exit status (0, 1, 2)."""
    args = parse_args(argv)
    prog = Progress()
    try:
        for record in run_check(args, prog):
            print(json.dumps(record, allow_nan=False), flush=True)
    except CheckError as e:
        print(f"device check failed in {prog.phase} after {prog.elapsed():.1f} s: {e}", file=sys.stderr)
        return 2 if "torch sees no CUDA device" in str(e) else 1
    except Exception as e:  # anything unforeseen still ends with one clear line, never a figure
        traceback.print_exc(file=sys.stderr)
        print(
            f"device check failed in {prog.phase} after {prog.elapsed():.1f} s: {type(e).__name__}: {e}",
            file=sys.stderr,
        )
        return 1
    return 0


def run_and_exit(argv: list[str] | None = None) -> None:
    """`main`, then ends the process at once with its status (argparse's refusals included).

    ``os._exit`` after flushing: no engine decode thread, NCCL watchdog or kernel-compile worker left
    alive by a failed phase may keep the process running past its verdict.
    """
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse: bad arguments
        rc = e.code if isinstance(e.code, int) else 2
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


if __name__ == "__main__":
    run_and_exit()
