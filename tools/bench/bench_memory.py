"""Benchmark: memory of a trainer backend per term on the CPU, predicted vs measured (T1 §7.1).

Run (from the repository root):

    OMP_NUM_THREADS=1 uv run python tools/bench/bench_memory.py [--backend torch|megatron] [--dtype D]
        [--walls 1024 2048] [--shapes tiny wide deep] [--recipe recipes/tiny-cpu.yaml] [--out rows.jsonl]

Each (shape, wall) case runs in its own subprocess (its RSS is its own) on one synthetic sample of ``wall``
tokens (the stitched layout of ``bench_ppo_step.py``: 150 loss tokens every 250 after a 200-token prompt).

``--backend torch`` (float32 by default): the torch backend of ``recipes/tiny-cpu.yaml`` with the shape's
model overrides, in three phases: actor forward + backward with routing replay
(``TorchBackend.actor_logprobs`` inside ``t1_r3.replay_routing``), critic forward + backward, then one AdamW
step of each.

``--backend megatron`` (bfloat16 by default): ``t1_trainer.megatron.MegatronBackend`` on the CPU (one process,
gloo; its CPU path steps torch's AdamW, megatron's grad buffers and distributed optimizer being CUDA-only),
started from the HF policy of the same shape with ``model.full_attention_interval=1`` (megatron's Gated
DeltaNet needs CUDA and flash-linear-attention): ``update_actor`` (router replay of the HF policy's routing)
and ``update_critic``, one PPO epoch each, as the trainer calls them.

What is measured, and how:

- weights, grads, optimizer: the bytes of the parameters, their ``.grad`` at the optimizer's step (torch:
  after the backward) and the AdamW state after the step (tensor sizes: exact).
- activations: the bytes held for the backward, i.e. every storage autograd saves during the forward
  (``torch.autograd.graph.saved_tensors_hooks``), counted once per storage, parameters excluded, attributed
  to the layer kind whose forward saved it (module forward hooks): full attention, Gated DeltaNet, MoE (router
  and routed experts), shared expert, the rest of the decoder layer (norms, residuals), embedding, head (final
  norm, LM head / value head, the loss). This is what the activation model prices.
- logits: the peak of live tensor bytes (a ``TorchDispatchMode`` following every storage an op returns until
  it is freed) during the LM head's log-prob forward + backward on the loss rows, less its outputs (the
  gradients of the head weight and of the hidden rows, and the log-probs).
- rss: the process's peak resident set (``VmHWM``) and its RSS after imports, before any model is built: what
  the allocator residue b0 stands for on the CPU (interpreter, libraries, allocator slack).

It prints, per case and network, predicted / measured / ratio per term with the capacity model's layout of the
backend (`t1_capacity.layouts.backend_constants` on the CPU: the stored coefficients of
``t1_capacity/coefficients/<backend>-cpu.json`` when present), then one JSON line ``{"bench": "memory",
"backend", "dtype", "device", "rows": [...]}`` that ``t1 plan calibrate`` reads.
The goal: within +-15% per term above 1% of the total.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GIB = float(1 << 30)

SHAPES: dict[str, list[str]] = {
    "tiny": [],  # recipes/tiny-cpu.yaml's model: h 64, 4 layers (1 attention), 8 experts top-2
    "wide": [
        "model.hidden_size=128",
        "model.head_dim=32",
        "model.linear_key_head_dim=32",
        "model.linear_value_head_dim=32",
        "model.moe_intermediate_size=64",
        "model.shared_expert_intermediate_size=64",
    ],
    "deep": [
        "model.num_layers=8",
        "model.num_experts=16",
        "model.top_k=4",
        "model.moe_intermediate_size=48",
    ],
}

KINDS = ("attention", "gdn", "moe", "shared_expert", "layer", "embedding", "head")


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} missing from /proc/self/status")


def _nbytes(tensors: Any) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors if t is not None)


def hf_tags(decoder: Any) -> dict[Any, str]:
    """Layer kind of each module of an HF Qwen3.5-MoE decoder (``model.model``, the critic's ``body``)."""
    tag = {decoder.embed_tokens: "embedding", decoder.rotary_emb: "embedding"}
    for layer in decoder.layers:
        tag[layer] = "layer"
        for name, kind in (("self_attn", "attention"), ("linear_attn", "gdn"), ("mlp", "moe")):
            if hasattr(layer, name):
                tag[getattr(layer, name)] = kind
        for name in ("shared_expert", "shared_expert_gate"):
            if hasattr(layer.mlp, name):
                tag[getattr(layer.mlp, name)] = "shared_expert"
    return tag


def megatron_tags(gpt: Any) -> dict[Any, str]:
    """Layer kind of each module of a megatron-core ``GPTModel`` (`t1_trainer.megatron.model.build_gpt`)."""
    tag = {gpt.embedding: "embedding", gpt.rotary_pos_emb: "embedding"}
    for layer in gpt.decoder.layers:
        tag[layer] = "layer"
        tag[layer.self_attention] = (
            "gdn" if type(layer.self_attention).__name__ == "GatedDeltaNet" else "attention"
        )
        tag[layer.mlp] = "moe"
        if getattr(layer.mlp, "shared_experts", None) is not None:
            tag[layer.mlp.shared_experts] = "shared_expert"
    return tag


class _KindStack:
    """Module forward hooks that keep the layer kind whose forward is running (``tags``: module -> kind)."""

    def __init__(self, tag: dict[Any, str]) -> None:
        self.stack: list[str] = []
        self.handles = []
        for module, kind in tag.items():
            self.handles.append(module.register_forward_pre_hook(lambda m, a, k=kind: self.stack.append(k)))
            self.handles.append(module.register_forward_hook(self._pop))

    def _pop(self, module: Any, args: Any, output: Any) -> None:
        self.stack.pop()  # a hook returning a value would replace the module's output

    @property
    def kind(self) -> str:
        return self.stack[-1] if self.stack else "head"


class _Saved:
    """Bytes autograd saves for the backward, once per storage, by layer kind (parameters excluded)."""

    def __init__(self, kinds: _KindStack, params: Any) -> None:
        import torch

        self.kinds = kinds
        self.skip = {p.untyped_storage().data_ptr() for p in params}
        self.seen: dict[int, tuple[str, int]] = {}
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: Any) -> Any:
        st = t.untyped_storage()
        key = st.data_ptr()
        if key and key not in self.skip and key not in self.seen:
            self.seen[key] = (self.kinds.kind, st.nbytes())
        return t

    def by_kind(self) -> dict[str, int]:
        out = dict.fromkeys(KINDS, 0)
        for kind, n in self.seen.values():
            out[kind] += n
        return out


def _live_peak(fn: Any) -> int:
    """Peak bytes of storages returned by ops inside ``fn()`` and still alive, above the start (0 = none)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Live(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.live: dict[int, int] = {}
            self.cur = self.peak = 0

        def _free(self, key: int) -> None:
            self.cur -= self.live.pop(key, 0)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if hasattr(t, "untyped_storage"):
                    st = t.untyped_storage()
                    key = st.data_ptr()
                    if key and key not in self.live:
                        self.live[key] = st.nbytes()
                        self.cur += st.nbytes()
                        self.peak = max(self.peak, self.cur)
                        weakref.finalize(st, self._free, key)
            return out

    mode = Live()
    with mode:
        fn()
    return mode.peak


def _adamw_step(model: Any, opt: Any) -> None:
    """Clip the grad norm and step, as the trainer's update does (its state appears at the first step)."""
    import torch

    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def child(shape: str, wall: int, recipe_path: str, dtype: str = "float32") -> dict[str, Any]:
    """One case in this process: build, run the three phases, measure. Returns the measured row."""
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "tools" / "bench"))
    from bench_ppo_step import make_samples

    from t1_r3 import replay_routing
    from t1_spec import load_recipe
    from t1_trainer import TorchBackend
    from t1_trainer.logprobs import lm_head_logprobs

    rss_base = _status_kib("VmRSS") * 1024
    overrides = [*SHAPES[shape], "trainer.backend=torch", f"model.dtype={dtype}"]
    recipe = load_recipe(recipe_path, overrides)
    backend = TorchBackend.from_spec(recipe, gap_without_replay=False)
    sample = make_samples(backend.actor, recipe.model.vocab_size, wall, 1)[0]
    ids = torch.from_numpy(sample.token_ids.astype(np.int64))
    pos = torch.from_numpy(np.flatnonzero(sample.loss_mask)).long()
    row: dict[str, Any] = {"shape": shape, "overrides": SHAPES[shape], "wall": wall, "loss_rows": len(pos)}

    # actor: forward + backward with replay, saved tensors by kind
    actor = backend.actor
    actor.train()
    kinds = _KindStack(hf_tags(actor.model))
    saved = _Saved(kinds, actor.parameters())
    with replay_routing(actor, np.asarray(sample.routing)), saved.hooks:
        logp = backend.actor_logprobs(sample)
        logp.sum().backward()
    del logp
    grads = _nbytes(p.grad for p in actor.parameters())
    _adamw_step(actor, backend.actor_opt)
    opt = _nbytes(v for s in backend.actor_opt.state.values() for v in s.values() if torch.is_tensor(v))
    act = saved.by_kind()

    # logits: the chunked LM head alone, fwd + bwd on the loss rows' hidden states
    with torch.no_grad():
        hidden = actor.model(input_ids=ids[None], use_cache=False).last_hidden_state[0][pos - 1].clone()
    w = actor.lm_head.weight.detach().clone().requires_grad_(True)
    h = hidden.requires_grad_(True)
    kept: list[Any] = []

    def head() -> None:
        out = lm_head_logprobs(h, w, ids[pos], temperature=1.0, vocab_limit=backend.vocab_limit)
        out.sum().backward()
        kept.append(out.detach())

    peak = _live_peak(head)
    logits = peak - _nbytes([w.grad, h.grad, kept[0]])
    row["actor"] = {
        "weights": _nbytes(actor.parameters()),
        "grads": grads,
        "optimizer": opt,
        "activations": sum(act.values()),
        "activations_by_kind": act,
        "logits": logits,
    }

    # critic: forward + backward (live routing), then its step
    critic = backend.critic
    critic.train()
    ckinds = _KindStack(hf_tags(critic.body))
    csaved = _Saved(ckinds, critic.parameters())
    with csaved.hooks:
        v = critic(ids)
        v.sum().backward()
    del v
    cgrads = _nbytes(p.grad for p in critic.parameters())
    _adamw_step(critic, backend.critic_opt)
    copt = _nbytes(v for s in backend.critic_opt.state.values() for v in s.values() if torch.is_tensor(v))
    cact = csaved.by_kind()
    row["critic"] = {
        "weights": _nbytes(critic.parameters()),
        "grads": cgrads,
        "optimizer": copt,
        "activations": sum(cact.values()),
        "activations_by_kind": cact,
        "logits": 0,
    }
    row["rss_base"] = rss_base
    row["rss_peak"] = _status_kib("VmHWM") * 1024
    return row


MEGATRON_CPU = ["model.full_attention_interval=1"]
"""Megatron's Gated DeltaNet needs CUDA and flash-linear-attention: on the CPU every layer is attention."""


def _measure_update(model: Any, opt: Any, tags: dict[Any, str], update: Any) -> dict[str, Any]:
    """Run ``update()`` (forward, backward, one optimizer step of ``model``) and measure it per term.

    Gradients are read at the optimizer's step pre-hook (the backward done, nothing stepped), the optimizer
    state after the call, the saved activations by kind throughout (`_Saved`).
    """
    import torch

    saved = _Saved(_KindStack(tags), model.parameters())
    grads: list[int] = []

    def pre_step(*_: Any) -> None:
        if not grads:
            grads.append(_nbytes(p.grad for p in model.parameters()))

    handle = opt.register_step_pre_hook(pre_step)
    with saved.hooks:
        update()
    handle.remove()
    act = saved.by_kind()
    return {
        "weights": _nbytes(model.parameters()),
        "grads": grads[0],
        "optimizer": _nbytes(v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)),
        "activations": sum(act.values()),
        "activations_by_kind": act,
    }


def child_megatron(shape: str, wall: int, recipe_path: str, dtype: str) -> dict[str, Any]:
    """One case of the megatron backend on the CPU (one process, gloo): ``update_actor`` with router replay,
    then ``update_critic``, each one PPO epoch on one sample of ``wall`` tokens, measured per term."""
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "tools" / "bench"))
    from bench_ppo_step import make_samples

    from t1_policy import build_model
    from t1_spec import load_recipe
    from t1_trainer.logprobs import lm_head_logprobs
    from t1_trainer.megatron.backend import MegatronBackend

    rss_base = _status_kib("VmRSS") * 1024
    recipe = load_recipe(recipe_path, [*SHAPES[shape], *MEGATRON_CPU, f"model.dtype={dtype}"])
    spec = recipe.model
    hf = build_model(
        spec, seed=recipe.seed
    )  # the engine's policy: samples, routing, then the backend's start
    sample = make_samples(hf, spec.vocab_size, wall, 1)[0]
    ids = torch.from_numpy(sample.token_ids.astype(np.int64))
    pos = torch.from_numpy(np.flatnonzero(sample.loss_mask)).long()
    with torch.no_grad():
        hidden = hf.model(input_ids=ids[None], use_cache=False).last_hidden_state[0][pos - 1].clone()
    ppo = recipe.ppo.model_copy(update={"ppo_epochs": 1})
    be = MegatronBackend(
        model_spec=spec, ppo_spec=ppo, plan=recipe.plan, seed=recipe.seed, device="cpu", actor=hf
    )
    del hf
    row: dict[str, Any] = {
        "shape": shape,
        "overrides": [*SHAPES[shape], *MEGATRON_CPU],
        "wall": wall,
        "loss_rows": len(pos),
    }
    adv = np.where(sample.loss_mask, 0.5, 0.0).astype(np.float32)
    row["actor"] = _measure_update(
        be.actor, be.actor_opt, megatron_tags(be.actor), lambda: be.update_actor([sample], [adv])
    )
    w = be.actor.output_layer.weight.detach().clone().requires_grad_(True)
    h = hidden.to(w.dtype).requires_grad_(True)  # megatron's final norm returns the weight dtype
    kept: list[Any] = []

    def head() -> None:
        out = lm_head_logprobs(h, w, ids[pos], temperature=1.0, vocab_limit=be.vocab_limit)
        out.sum().backward()
        kept.append(out.detach())

    row["actor"]["logits"] = _live_peak(head) - _nbytes([w.grad, h.grad, kept[0]])
    zeros = np.zeros(wall, np.float32)
    row["critic"] = _measure_update(
        be.critic,
        be.critic_opt,
        megatron_tags(be.critic),
        lambda: be.update_critic([sample], [zeros + 0.5], [zeros]),
    )
    row["critic"]["logits"] = 0
    row["rss_base"] = rss_base
    row["rss_peak"] = _status_kib("VmHWM") * 1024
    return row


def run_case(
    shape: str, wall: int, recipe: str, backend: str = "torch", dtype: str = "float32"
) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", shape, str(wall), "--recipe", recipe]
    cmd += ["--backend", backend, "--dtype", dtype]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def report(line: str, recipe: str) -> int:
    """Print predicted / measured / ratio per case, network and term; returns the terms outside +-15%."""
    import tempfile

    from t1_capacity.calibrate_backend import case_constants, format_table, read_bench, table
    from t1_spec.plan import PlanSpec

    with tempfile.TemporaryDirectory(prefix="t1-bench-memory-") as tmp:
        path = Path(tmp) / "rows.jsonl"
        path.write_text(line + "\n")
        cases = read_bench(path, recipe)
    fields = PlanSpec.model_fields
    alpha, b0 = float(fields["alpha"].default), float(fields["b0_gib"].default)
    constants = case_constants(cases[0], alpha, b0, stored=True)
    source = "stored coefficients" if constants.activations is not None else f"alpha {constants.alpha:g} B"
    layout = f"{cases[0].backend} {cases[0].dtype} on {cases[0].device}"
    print(f"capacity model: {layout} layout, activations from {source}, b0 {constants.b0_gib:.3f} GiB")
    rows = table(cases, constants)
    print(format_table(rows))
    return sum(not r.within for r in rows if r.network != "process")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=2, metavar=("SHAPE", "WALL"))
    ap.add_argument("--recipe", default=str(ROOT / "recipes" / "tiny-cpu.yaml"))
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--walls", nargs="+", type=int, default=[1024, 2048])
    ap.add_argument("--out", type=Path, help="also write the final JSON line here")
    ap.add_argument("--backend", choices=["torch", "megatron"], default="torch")
    ap.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        help="weight dtype (default: float32 for torch, bfloat16 for megatron)",
    )
    args = ap.parse_args()
    dtype = args.dtype or ("bfloat16" if args.backend == "megatron" else "float32")
    if args.child:
        shape, wall = args.child[0], int(args.child[1])
        if args.backend == "megatron":
            print(json.dumps(child_megatron(shape, wall, args.recipe, dtype)))
        else:
            print(json.dumps(child(shape, wall, args.recipe, dtype)))
        return
    rows = []
    for shape in args.shapes:
        for wall in args.walls:
            print(f"[bench_memory] {shape} @ {wall} tokens ...", file=sys.stderr, flush=True)
            rows.append(run_case(shape, wall, args.recipe, args.backend, dtype))
    import os
    import platform

    import torch

    meta = {
        "command": "OMP_NUM_THREADS=1 uv run python tools/bench/bench_memory.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus",
        "torch": torch.__version__,
    }
    layout = {"backend": args.backend, "dtype": dtype, "device": "cpu"}
    line = json.dumps({"bench": "memory", **layout, **meta, "rows": rows})
    if args.out:
        args.out.write_text(line + "\n")
    misses = report(line, args.recipe)
    print(f"terms above 1% of their network's total outside +-15%: {misses}")
    print(line)


if __name__ == "__main__":
    main()
