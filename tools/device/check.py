"""Device check: sample with the embedded engine, train one PPO step, print one JSON line of what it measured.

Run (from the repository root; `tools/device/check.sh` wraps this with a time limit):

    python tools/device/check.py [--dry-run] [--backend torch|megatron] [--device cuda:0] [--samples N]
        [--prompt N] [--new N] [--seed N] [--recipe recipes/tiny-cpu.yaml]

What it does, in order:

1. Builds the tiny Qwen3.5-MoE of the recipe (`t1_policy.build_model`: a transformers config with random
   weights from the recipe seed), once in float32 for the trainer and once as a copy for the engine (bfloat16
   on CUDA, float32 in the dry run).
2. Samples ``--samples`` one-turn answers with the embedded engine (`t1_rollout.engine.EmbeddedEngine`): a
   seeded random prompt of ``--prompt`` ids, then ``--new`` tokens at temperature 1, returning the sampled
   ids, their log-probs and the routed experts of the very forwards that sampled them (T1 §4.2).
3. Trains ONE PPO step (`t1_trainer.step.ppo_step`: critic values, GAE, critic update, actor update with R3
   replay) with the backend that ``trainer.backend`` names in `t1_trainer.base.TRAINER_BACKENDS` (``torch``
   in float32, or ``megatron`` when that entry is registered and its preflight finds nothing to refuse; else
   it is skipped with the reason and the torch backend runs). The gap figures are the backend's own step
   metrics ``actor/logprob_gap_replay``, ``actor/logprob_gap_no_replay``, ``actor/routing_flip_fraction``
   (T1 §4.3, Fig. 6: 0.021 without replay -> 0.013 with it), measured on the pre-update forward.
4. On CUDA, reads ``torch.cuda.memory_allocated`` / ``max_memory_allocated`` around each phase (weights
   placed, gradients and optimizer state at the optimizer's step hooks, activation peak of the forward and
   backward passes) and sets each term beside the closed-form capacity model's prediction for the same plan
   (`t1_capacity.footprint`, Eq. 21), priced with the backend's byte layout and the step's real token count.

Prints one JSON line on stdout (keys in docs/device-check.md) and exits 0; on any failure prints
``device check failed: ...`` on stderr and exits 1 (2 for bad arguments or a missing device), never a figure
it did not measure. ``--dry-run`` runs everything on the CPU in float32 at a minimal size, so CI keeps the
script from rotting; its memory measurements are null (the CPU allocator keeps no per-phase peak).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import json
import math
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RECIPE = ROOT / "recipes" / "tiny-cpu.yaml"
GIB = float(1 << 30)

GPU_SIZE = {"samples": 8, "prompt": 128, "new": 128}
"""Default batch on a GPU: 8 answers of 128 sampled tokens after 128 prompt tokens (about 1k loss tokens)."""
DRY_SIZE = {"samples": 2, "prompt": 12, "new": 6}
"""Default batch of the CPU dry run: the least that still exercises every phase (two micro-batches)."""

TORCH_FP32_BYTES = {"weight_bytes": 4.0, "grad_bytes": 4.0, "optimizer_bytes": 8.0, "logit_bytes": 4.0}
"""Bytes of the torch backend: fp32 weights, fp32 grads, AdamW m and v (no master copy) per parameter, and
fp32 logits (no bf16 copy) per logit."""

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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; sizes left unset take `GPU_SIZE` or, with ``--dry-run``, `DRY_SIZE`."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU, float32, minimal size (CI)")
    ap.add_argument("--backend", choices=("torch", "megatron"), default="torch")
    ap.add_argument("--device", default=None, help="torch device (default cuda:0; cpu with --dry-run)")
    ap.add_argument("--recipe", type=Path, default=DEFAULT_RECIPE)
    ap.add_argument("--samples", type=int, default=None)
    ap.add_argument("--prompt", type=int, default=None, help="prompt tokens per answer")
    ap.add_argument("--new", type=int, default=None, help="sampled tokens per answer")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
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


# ---- memory --------------------------------------------------------------------------------------------


class Memory:
    """Allocator readings on one device; every reading is None off CUDA (nothing is estimated instead)."""

    def __init__(self, device: Any) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.cuda = device.type == "cuda"

    def allocated(self) -> int | None:
        """Bytes held by live tensors now (after a device sync)."""
        if not self.cuda:
            return None
        self.torch.cuda.synchronize(self.device)
        return int(self.torch.cuda.memory_allocated(self.device))

    def peak(self) -> int | None:
        """Largest ``allocated`` since the last `reset`, bytes."""
        if not self.cuda:
            return None
        self.torch.cuda.synchronize(self.device)
        return int(self.torch.cuda.max_memory_allocated(self.device))

    def reset(self) -> None:
        """Starts a new peak window (the overall peaks since `start_overall` keep counting)."""
        if self.cuda:
            self._fold()
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def start_overall(self) -> None:
        """Starts the window of `overall_peak` and `overall_reserved_peak`, and a new peak window."""
        self._overall = [0, 0]
        self.reset()

    def _fold(self) -> None:
        self.torch.cuda.synchronize(self.device)
        peaks = (
            self.torch.cuda.max_memory_allocated(self.device),
            self.torch.cuda.max_memory_reserved(self.device),
        )
        self._overall = [
            max(a, int(b)) for a, b in zip(getattr(self, "_overall", [0, 0]), peaks, strict=True)
        ]

    def overall_peak(self) -> int | None:
        """Largest allocated bytes since `start_overall`, across every peak window."""
        if not self.cuda:
            return None
        self._fold()
        return self._overall[0]

    def overall_reserved_peak(self) -> int | None:
        """Largest bytes reserved by the caching allocator since `start_overall`."""
        if not self.cuda:
            return None
        self._fold()
        return self._overall[1]


def _diff(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a - b


class PhaseRecorder:
    """Readings around the trainer's phases: the update calls and each optimizer's step hooks.

    ``marks[name]`` holds ``{"alloc": bytes, "peak": bytes}`` for ``<network>/start`` (entering the update
    call, peak window reset), ``<network>/pre_step`` (the optimizer's step pre-hook: weights + gradients live,
    activations freed; ``peak`` is the forward/backward peak) and ``<network>/post_step`` (optimizer state
    allocated). Off CUDA every reading is None.
    """

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.marks: dict[str, dict[str, int | None]] = {}

    def mark(self, name: str) -> None:
        """Records the current and peak allocation under ``name``, the first time only.

        With ``ppo_epochs > 1`` the optimizer steps again on state it already holds; the first step is the
        one that allocates gradients and optimizer state, so later passes do not overwrite its readings.
        """
        if name not in self.marks:
            self.marks[name] = {"alloc": self.memory.allocated(), "peak": self.memory.peak()}

    def wrap_update(self, backend: Any, method: str, network: str) -> None:
        """Replaces ``backend.<method>`` on the instance by one that marks ``<network>/start`` first."""
        inner = getattr(backend, method)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.memory.reset()
            self.mark(f"{network}/start")
            return inner(*args, **kwargs)

        setattr(backend, method, wrapped)

    def hook_optimizer(self, optimizer: Any, network: str) -> bool:
        """Marks ``<network>/pre_step`` and ``/post_step`` around ``optimizer.step``; False if not torch's."""
        import torch

        if not isinstance(optimizer, torch.optim.Optimizer):
            return False
        optimizer.register_step_pre_hook(lambda *_: self.mark(f"{network}/pre_step"))
        optimizer.register_step_post_hook(lambda *_: self.mark(f"{network}/post_step"))
        return True

    def get(self, name: str, key: str) -> int | None:
        """One reading, or None when it was not taken (or off CUDA)."""
        return self.marks.get(name, {}).get(key)


def _term(predicted_bytes: float, measured_bytes: int | None) -> dict[str, float | None]:
    """One row of the memory table, GiB: predicted, measured (None: not measured), measured / predicted."""
    measured = None if measured_bytes is None else measured_bytes / GIB
    ratio = None if measured_bytes is None or predicted_bytes <= 0 else measured_bytes / predicted_bytes
    return {"predicted_gib": predicted_bytes / GIB, "measured_gib": measured, "ratio": ratio}


def predicted_terms(recipe: Any, token_wall: int, bytes_layout: dict[str, float]) -> dict[str, Any]:
    """The capacity model's per-term prediction for the recipe's plan at ``token_wall`` tokens (Eq. 21).

    Args:
        recipe: the validated recipe; its model, plan (degrees, alpha, b0) and offload mode are priced as
            `t1_capacity.from_recipe` reads them (the same path as ``tools/check_plan``).
        token_wall: the longest micro-batch the step actually trained, tokens (replaces ``plan.token_wall``,
            so prediction and measurement concern the same sequence length).
        bytes_layout: ``weight_bytes``, ``grad_bytes``, ``optimizer_bytes``, ``logit_bytes`` of the backend
            that trains (empty: Eq. 21's bf16 / Megatron defaults).

    Returns:
        ``{"actor": Footprint, "critic": Footprint, "needed_gib": float, "constants": dict}``; ``needed_gib``
        is what the admission rule requires of M (co-resident total under ``offload: none``).
    """
    from t1_capacity import ACTOR, CRITIC, footprint, from_recipe
    from t1_capacity.check import admission

    inputs = from_recipe(recipe)
    plan = dataclasses.replace(inputs.plan, token_wall=int(token_wall))
    consts = dataclasses.replace(inputs.constants, **bytes_layout)
    return {
        "actor": footprint(inputs.model, plan, consts, ACTOR),
        "critic": footprint(inputs.model, plan, consts, CRITIC),
        "needed_gib": admission(inputs.model, plan, consts).needed_gib,
        "constants": {**dataclasses.asdict(consts), "token_wall": plan.token_wall, "offload": plan.offload},
    }


def memory_table(pred: dict[str, Any], rec: PhaseRecorder, placed: dict[str, int | None]) -> dict[str, Any]:
    """Sets every measured phase beside its Eq. 21 terms; GiB, measured None where not measured.

    Measured, per network: ``weights`` = allocation growth when the network was placed on the device;
    ``grads`` = allocation at the optimizer's pre-step hook minus at the update's start; ``optimizer`` =
    growth across the first optimizer step (AdamW allocates its state there); ``activations`` = the
    forward/backward peak above the pre-step allocation (activations, the logit chunks and autograd
    temporaries above weights + gradients). Predicted: the sums of the matching Eq. 21 terms.
    """
    out: dict[str, Any] = {}
    for net in ("actor", "critic"):
        fp = pred[net]
        t = {term.name: term.bytes for term in fp.terms}
        pre = rec.get(f"{net}/pre_step", "alloc")
        out[net] = {
            "weights": _term(t["expert_weights"] + t["dense_weights"], placed.get(net)),
            "grads": _term(
                t["expert_grads"] + t["dense_grads"], _diff(pre, rec.get(f"{net}/start", "alloc"))
            ),
            "optimizer": _term(
                t["expert_optimizer"] + t["dense_optimizer"], _diff(rec.get(f"{net}/post_step", "alloc"), pre)
            ),
            "activations": _term(
                t["recurrent_activations"] + t["attention_activations"] + t["logit_buffer"],
                _diff(rec.get(f"{net}/pre_step", "peak"), pre),
            ),
        }
    out["allocator_residue"] = _term(pred["actor"].term("allocator_residue").bytes, placed.get("residue"))
    out["total"] = _term(pred["needed_gib"] * GIB, placed.get("total"))
    return out


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


# ---- backend -------------------------------------------------------------------------------------------


MEGATRON_TRAINER_OVERRIDES = [
    "trainer.backend=megatron",
    'engine={kind: sglang, urls: ["http://127.0.0.1:30000"], '
    "sampling: {temperature: 1.0, top_p: 1.0, top_k: 0}}",
    "plan.devices=2",
    "plan.inference_devices=1",
]
"""The trainer-side recipe of the megatron path. The spec ties the embedded engine to the torch trainer (they
share weights in memory), so the recipe handed to the megatron backend declares an SGLang engine on a separate
inference device; the check never contacts that URL: it samples with its own embedded engine, as on the torch
path, and hands the trainer only the samples."""


def _choose_backend(
    path: Path, overrides: list[str], wanted: str, skipped: list[str]
) -> tuple[str, Any, Any]:
    """The backend to train with: ``(name, class, recipe)`` for ``wanted`` from `TRAINER_BACKENDS`, or torch.

    Megatron is used when the registry has the entry, its trainer recipe (`MEGATRON_TRAINER_OVERRIDES`)
    validates, and its ``preflight`` returns nothing; otherwise one line saying why joins ``skipped`` and the
    torch backend trains the same samples.
    """
    from t1_spec import RecipeError, load_recipe
    from t1_trainer.base import TRAINER_BACKENDS

    torch_recipe = load_recipe(path, [*overrides, "trainer.backend=torch"])
    if wanted != "torch":
        problem = TRAINER_BACKENDS.problem(wanted)
        if problem is None:
            try:
                recipe = load_recipe(path, [*overrides, *MEGATRON_TRAINER_OVERRIDES])
                cls = TRAINER_BACKENDS.load(wanted)
                problems = cls.preflight(recipe)
            except (ImportError, RecipeError) as e:
                problems = [f"{type(e).__name__}: {e}".replace("\n", " ")]
            if not problems:
                return wanted, cls, recipe
            problem = "; ".join(problems)
        skipped.append(f"trainer.backend {wanted}: skipped ({problem}); the torch backend trained instead")
    return "torch", TRAINER_BACKENDS.load("torch"), torch_recipe


def _finite(metrics: dict[str, Any], key: str) -> float:
    value = metrics.get(key)
    if not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise CheckError(f"training: the backend reported {key} = {value!r}; expected a finite number")
    return float(value)


# ---- the check -----------------------------------------------------------------------------------------


def run_check(args: argparse.Namespace) -> dict[str, Any]:
    """Runs the whole check and returns the JSON record (see the module docstring and docs/device-check.md).

    Raises:
        CheckError: a phase could not produce its figure (no CUDA device, a non-finite metric, a backend
            that returned no gap).
    """
    t_start = time.perf_counter()
    _import_path()
    import numpy as np
    import torch
    import transformers

    from t1_policy import build_model
    from t1_rollout.engine import EmbeddedEngine
    from t1_trainer.step import ppo_step

    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise CheckError(f"--device {args.device}: torch sees no CUDA device; use --dry-run on a CPU")
        torch.cuda.set_device(device)
        label = f"{device.type}:{device.index or 0} {torch.cuda.get_device_name(device)}"
    elif device.type == "cpu":
        label = "cpu"
    else:
        raise CheckError(f"--device {args.device}: only cpu and cuda devices are checked")
    dev = str(device) if device.type == "cpu" else f"cuda:{device.index or 0}"
    engine_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    overrides = [
        f"engine.device={dev}",
        f"trainer.device={dev}",
        "trainer.logprob_gap_every=1",  # step 1 measures the live-routing gap and the flip fraction
        f"seed={args.seed}",
    ]
    skipped: list[str] = []
    backend_name, backend_cls, recipe = _choose_backend(args.recipe, overrides, args.backend, skipped)
    if not recipe.ppo.routing_replay:
        raise CheckError(
            f"{args.recipe}: ppo.routing_replay is off; the check compares replay with live routing"
        )

    memory = Memory(device)
    torch.manual_seed(args.seed)
    fp32 = build_model(recipe.model, seed=recipe.seed, dtype=torch.float32)

    # 1. sample with the embedded engine (its own copy of the weights, in the engine dtype)
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
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the engine's blocks must not count as the trainer's

    # 2. place the trainer's networks, one at a time, reading the allocation each adds
    memory.start_overall()
    base = memory.allocated()
    if backend_name == "torch":
        fp32.to(device)
        placed_actor = _diff(memory.allocated(), base)
        before_critic = memory.allocated()
        backend = backend_cls.from_spec(recipe, actor=fp32)
        placed_critic = _diff(memory.allocated(), before_critic)
    else:
        backend = backend_cls.from_spec(recipe, actor=fp32)
        placed_actor = placed_critic = None
        skipped.append(
            f"memory per network: the {backend_name} backend places actor and critic in one call, so only "
            "the total is measured"
        )
    rec = PhaseRecorder(memory)
    hooked = True
    for net in ("actor", "critic"):
        rec.wrap_update(backend, f"update_{net}", net)
        hooked &= rec.hook_optimizer(getattr(backend, f"{net}_opt", None), net)
    if not hooked:
        skipped.append(
            f"memory grads/optimizer/activations: the {backend_name} backend exposes no torch optimizer"
        )

    # 3. one PPO step, timed
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t1 = time.perf_counter()
    try:
        metrics = ppo_step(backend, samples, recipe.ppo)
    except Exception as e:  # the step's own errors already name what and where
        raise CheckError(f"training: one PPO step with the {backend_name} backend failed: {e}") from e
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    step_s = time.perf_counter() - t1
    if metrics.get("samples_aborted_routing"):
        raise CheckError(f"training: routing records refused: {metrics.get('routing_errors')}")

    gap_replay = _finite(metrics, "actor/logprob_gap_replay")
    gap_live = _finite(metrics, "actor/logprob_gap_no_replay")
    flips = _finite(metrics, "actor/routing_flip_fraction")
    flips_layers = _finite(metrics, "actor/routing_flip_fraction_layers")
    loss_tokens = int(metrics.get("trainer/loss_tokens", 0))
    if loss_tokens < 1:
        raise CheckError("training: the step trained no loss token")

    # 4. memory: every phase beside its Eq. 21 terms, priced at the step's longest micro-batch
    longest = max(len(s.token_ids) for s in samples)
    layout = TORCH_FP32_BYTES if backend_name == "torch" else {}
    pred = predicted_terms(recipe, longest, layout)
    peak_total = _diff(memory.overall_peak(), base)
    residue = _diff(memory.overall_reserved_peak(), memory.overall_peak())
    table = memory_table(
        pred, rec, {"actor": placed_actor, "critic": placed_critic, "total": peak_total, "residue": residue}
    )
    note = (
        CPU_MEMORY_NOTE
        if device.type != "cuda"
        else "measured from torch.cuda.memory_allocated / max_memory_allocated around each phase"
    )
    return {
        "check": "t1-device-check",
        "device": label,
        "dry_run": bool(args.dry_run),
        "backend": backend_name,
        "skipped": skipped,
        "model": recipe.model.name,
        "engine_dtype": str(engine_dtype).removeprefix("torch."),
        "trainer_dtype": "float32",
        "samples": len(samples),
        "prompt_tokens": args.prompt,
        "sampled_tokens": int(sum(int(np.asarray(s.loss_mask).sum()) for s in samples)),
        "loss_tokens": loss_tokens,
        "gap_replay": gap_replay,
        "gap_live": gap_live,
        "gap_ratio": gap_live / gap_replay if gap_replay > 0 else None,
        "flip_fraction": flips,
        "flip_fraction_layers": flips_layers,
        "memory": table,
        "memory_note": note,
        "capacity_constants": pred["constants"],
        "rollout_time_s": rollout_s,
        "step_time_s": step_s,
        "total_time_s": time.perf_counter() - t_start,
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "cuda": torch.version.cuda,
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Parses the arguments, runs the check, prints its JSON line; returns the exit status (0, 1 or 2)."""
    args = parse_args(argv)
    try:
        result = run_check(args)
    except CheckError as e:
        print(f"device check failed: {e}", file=sys.stderr)
        return 2 if "torch sees no CUDA device" in str(e) else 1
    except Exception as e:  # anything unforeseen still ends with one clear line, never a figure
        traceback.print_exc(file=sys.stderr)
        print(f"device check failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result, allow_nan=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
