"""The actor and critic as megatron-core 0.19.2 ``GPTModel`` s built from a `t1_spec.ModelSpec` (T1 §4.5, §6).

Every layer is a ``TransformerLayer`` whose MLP is an ``MoELayer`` (top-k softmax router, ``SequentialMLP``
experts, a gated shared expert); full-attention layers are megatron's ``SelfAttention`` with the Qwen3.5
output gate (``attention_output_gate``), q/k RMSNorm and partial rotary embedding (``rotary_percent`` 0.25,
base 10,000, the HF config's defaults); Gated DeltaNet layers are megatron-core's own
``megatron.core.ssm.gated_delta_net.GatedDeltaNet``. The layer modules are the plain-torch ones of
``get_gpt_layer_local_spec`` (Transformer Engine is not installed here, and megatron-core's hybrid block
builder asserts TE), with unfused norms, as `t1_trainer.megatron.names` maps them (``layer_spec="local"``).

Norms. HF Qwen3.5 computes every RMSNorm but the Gated DeltaNet output norm as ``x * (1 + w)``; megatron's
local ``WrappedTorchNorm`` refuses zero-centred gamma, so `ZeroCenteredRMSNorm` takes its place there. The
Gated DeltaNet output norm (``x * w``) stays ``WrappedTorchNorm`` on CUDA; on the CPU it is `PlainRMSNorm`,
the same function without ``WrappedTorchNorm``'s refusal of sequence parallelism (tp > 1).

What needs what. Megatron's ``GatedDeltaNet`` raises ``ImportError`` in its constructor when
flash-linear-attention (``fla``) is absent, and places ``conv1d``, ``dt_bias`` and ``A_log`` on
``torch.cuda.current_device()``. On CUDA it needs ``fla`` (`gdn_problem` says so); on the CPU the layer is
`t1_trainer.megatron.gdn_cpu.CpuGatedDeltaNet`, megatron's own with fla's three kernels answered in torch,
its parameters placed on the CPU by `cpu_device_shim`. The model builds and trains on the CPU with
``use_cpu_initialization``, the ``allgather`` token dispatcher (the ``alltoall`` one creates a
``torch.cuda.Stream`` in its constructor), megatron's no-op RNG tracker (the CUDA RNG tracker's ``fork`` needs
CUDA; dropout is 0) and an explicit causal mask (the default mask is made with ``device="cuda"``); one call
still hard-codes CUDA, ``RotaryEmbedding.get_emb`` (``inv_freq.to(torch.cuda.current_device())``), which
`cpu_device_shim` redirects to the CPU for the duration of a forward and backward.

Context parallelism (cp > 1, CPU only): full attention is `t1_trainer.megatron.cp.CpDotProductAttention`
(megatron's local attention over the all-gathered keys and values), Gated DeltaNet layers run T1's
sequence-sharded scan (`t1_trainer.megatron.gdn_cpu`).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from t1_spec import ModelSpec

__all__ = [
    "PlainRMSNorm",
    "ValueHead",
    "ZeroCenteredRMSNorm",
    "build_gpt",
    "cpu_device_shim",
    "gdn_problem",
    "transformer_config",
]


class ZeroCenteredRMSNorm(nn.Module):
    """RMSNorm ``x / rms(x) * (1 + w)`` computed in float32, weights starting at 0 (HF ``Qwen3_5MoeRMSNorm``).

    Takes the keyword arguments megatron's ``build_module`` passes a norm (``config``, ``hidden_size``,
    ``eps``); ``[..., hidden_size]`` in, same shape and dtype out.
    """

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-6, **_: Any) -> None:
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.zeros(hidden_size, dtype=config.params_dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalises ``x [..., H]`` over its last axis."""
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).to(x.dtype)


class PlainRMSNorm(nn.Module):
    """RMSNorm ``w * (x / rms(x))`` in float32, weights starting at 1: the CPU's Gated DeltaNet output norm.

    HF ``Qwen3_5MoeRMSNormGated``'s norm, before its gate (megatron applies the gate after ``out_norm``).

    megatron's ``WrappedTorchNorm`` asserts ``not sequence_parallel``, which tp > 1 turns on (the backend's
    MoE layers need it). Takes the keyword arguments megatron's ``build_module`` passes a norm;
    ``[..., hidden_size]`` in, same shape and dtype out.
    """

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-6, **_: Any) -> None:
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=config.params_dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalises ``x [..., H]`` over its last axis."""
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class ValueHead(nn.Module):
    """The critic's scalar head in place of ``GPTModel.output_layer`` on the last pipeline stage (T1 §4.5).

    Called as megatron calls its output layer (``hidden [s, b, H]``, ``weight=``, ``runtime_gather_output=``);
    returns ``(values [s, b, 1], None)``. Drawn by `t1_policy.value_head_weight` from ``seed`` and ``init``
    (``ppo.value_head_init``), as `t1_policy.Critic`.
    """

    def __init__(self, hidden_size: int, *, seed: int, dtype: torch.dtype, init: str = "normal") -> None:
        super().__init__()
        from t1_policy.critic import value_head_weight

        self.weight = nn.Parameter(value_head_weight(hidden_size, seed=seed, init=init).to(dtype))

    def forward(self, hidden: torch.Tensor, weight: Any = None, runtime_gather_output: Any = None) -> Any:
        """``hidden [s, b, H]`` -> ``(values [s, b, 1], None)``."""
        return F.linear(hidden, self.weight), None


class HiddenOut(nn.Module):
    """Keeps the actor's LM-head weight under ``output_layer.weight`` but returns the hidden states.

    Log-probs are then taken in chunks (`t1_trainer.logprobs.lm_head_logprobs`), never as ``[T, V]`` logits.
    """

    def __init__(self, weight: nn.Parameter) -> None:
        super().__init__()
        self.weight = weight

    def forward(self, hidden: torch.Tensor, weight: Any = None, runtime_gather_output: Any = None) -> Any:
        """``hidden [s, b, H]`` -> ``(hidden, None)``."""
        return hidden, None


def gdn_problem(model_spec: ModelSpec, *, cuda: bool) -> str | None:
    """Why the Gated DeltaNet layers of ``model_spec`` cannot be built here, or None (none, or buildable).

    On CUDA megatron's ``GatedDeltaNet`` needs flash-linear-attention (``fla``); on the CPU its torch kernels
    (`t1_trainer.megatron.gdn_cpu`) need nothing more.
    """
    n = model_spec.num_linear_attention_layers
    if n == 0:
        return None
    if cuda and importlib.util.find_spec("fla") is None:
        return (
            f"model.full_attention_interval {model_spec.full_attention_interval}: the {n} Gated DeltaNet "
            "layers are megatron-core's GatedDeltaNet, which needs flash-linear-attention (fla) on CUDA, "
            "absent here; install it, or set "
            "trainer.device: cpu, full_attention_interval: 1 (full attention only) or trainer.backend: torch"
        )
    return None


def transformer_config(
    model_spec: ModelSpec, *, params_dtype: torch.dtype, cpu: bool, routing_replay: bool, plan: Any = None
) -> Any:
    """The megatron-core ``TransformerConfig`` of ``model_spec``: MoE in every layer, no aux loss (T1 §4.3).

    Args:
        model_spec: the recipe's model section.
        params_dtype: float32 or bfloat16.
        cpu: build for the CPU (``use_cpu_initialization``, no fusions, ``allgather`` dispatcher).
        routing_replay: ``moe_enable_routing_replay`` (the actor: True; the critic never replays).
        plan: the recipe's plan (tp, pp, cp, ep, etp); None = all 1.
    """
    from megatron.core.transformer.transformer_config import TransformerConfig

    s = model_spec
    deg = {k: getattr(plan, k, 1) for k in ("tp", "pp", "cp", "ep", "etp")}
    gdn = s.num_linear_attention_layers > 0
    extra: dict[str, Any] = {}
    if gdn:
        extra = {
            "experimental_attention_variant": "gated_delta_net",
            "linear_attention_freq": s.full_attention_interval,
            "linear_conv_kernel_dim": s.linear_conv_kernel_dim,
            "linear_key_head_dim": s.linear_key_head_dim,
            "linear_value_head_dim": s.linear_value_head_dim,
            "linear_num_key_heads": s.linear_num_key_heads,
            "linear_num_value_heads": s.linear_num_value_heads,
        }
    return TransformerConfig(
        num_layers=s.num_layers,
        hidden_size=s.hidden_size,
        num_attention_heads=s.num_attention_heads,
        num_query_groups=s.num_key_value_heads,
        kv_channels=s.head_dim,
        ffn_hidden_size=s.moe_intermediate_size,
        num_moe_experts=s.num_experts,
        moe_router_topk=s.top_k,
        moe_ffn_hidden_size=s.moe_intermediate_size,
        moe_shared_expert_intermediate_size=s.shared_expert_intermediate_size or None,
        moe_shared_expert_gate=s.shared_expert_intermediate_size > 0,
        moe_router_score_function="softmax",
        moe_router_pre_softmax=False,  # top-k then softmax over the k = HF's softmax, top-k, renormalize
        moe_router_dtype="fp32",
        moe_aux_loss_coeff=0.0,  # T1 §4.3: no load-balancing loss
        moe_router_load_balancing_type="none",
        moe_enable_routing_replay=routing_replay,
        moe_router_fusion=False,  # the fused router bypasses replay upstream
        moe_token_dispatcher_type="allgather" if cpu else "alltoall",
        moe_grouped_gemm=False,
        normalization="RMSNorm",
        layernorm_epsilon=1e-6,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=False,
        qk_layernorm=True,
        attention_output_gate=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        tensor_model_parallel_size=deg["tp"],
        pipeline_model_parallel_size=deg["pp"],
        context_parallel_size=deg["cp"],
        expert_model_parallel_size=deg["ep"],
        expert_tensor_parallel_size=deg["etp"],
        sequence_parallel=deg["tp"] > 1,
        # T1's loss is already the batch's token mean: the pipeline schedule must not divide it again
        pipeline_dtype=params_dtype if deg["pp"] > 1 else None,
        calculate_per_token_loss=deg["pp"] > 1,
        use_cpu_initialization=cpu,
        perform_initialization=True,
        params_dtype=params_dtype,
        bf16=params_dtype == torch.bfloat16,
        gradient_accumulation_fusion=False,
        bias_activation_fusion=False,
        masked_softmax_fusion=False,
        bias_dropout_fusion=False,
        apply_rope_fusion=False,
        persist_layer_norm=False,
        **extra,
    )


def _layer_specs(model_spec: ModelSpec, config: Any) -> Any:
    """This stage's per-layer ``ModuleSpec`` s (local modules, unfused zero-centred norms) and the final norm.

    A block given a list of layer specs builds every one of them, so with pipeline stages the list is this
    stage's slice (megatron's own offset and layer count, as its ``get_gpt_decoder_block_spec`` slices).
    """
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_block import (
        TransformerBlockSubmodules,
        get_num_layers_to_build,
    )
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    base = get_gpt_layer_local_spec(
        num_experts=model_spec.num_experts, moe_grouped_gemm=False, qk_layernorm=True, normalization="RMSNorm"
    )
    base.submodules.input_layernorm = ZeroCenteredRMSNorm
    base.submodules.pre_mlp_layernorm = ZeroCenteredRMSNorm
    base.submodules.self_attention.submodules.q_layernorm = ZeroCenteredRMSNorm
    base.submodules.self_attention.submodules.k_layernorm = ZeroCenteredRMSNorm
    if config.context_parallel_size > 1:  # the CPU's all-gather attention (t1_trainer.megatron.cp)
        from t1_trainer.megatron.cp import CpDotProductAttention

        base.submodules.self_attention.submodules.core_attention = CpDotProductAttention
    specs = []
    for kind in model_spec.layer_types:
        spec = copy.deepcopy(base)
        if kind == "linear_attention":
            spec.submodules.self_attention = _gdn_spec(cpu=bool(config.use_cpu_initialization))
        specs.append(spec)
    if config.pipeline_model_parallel_size > 1:
        offset = get_transformer_layer_offset(config)
        specs = specs[offset : offset + get_num_layers_to_build(config)]
    return TransformerBlockSubmodules(layer_specs=specs, layer_norm=ZeroCenteredRMSNorm)


def _gdn_spec(*, cpu: bool) -> Any:
    """Megatron's ``GatedDeltaNet`` (CUDA, fla) or, on the CPU, `CpuGatedDeltaNet` (torch kernels)."""
    from megatron.core.ssm.gated_delta_net import GatedDeltaNet, GatedDeltaNetSubmodules
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    module, out_norm = GatedDeltaNet, WrappedTorchNorm
    if cpu:
        from t1_trainer.megatron.gdn_cpu import CpuGatedDeltaNet

        module, out_norm = CpuGatedDeltaNet, PlainRMSNorm
    return ModuleSpec(
        module=module,
        submodules=GatedDeltaNetSubmodules(
            in_proj=ColumnParallelLinear, out_norm=out_norm, out_proj=RowParallelLinear
        ),
    )


def build_gpt(
    model_spec: ModelSpec,
    *,
    seed: int,
    params_dtype: torch.dtype,
    cpu: bool,
    routing_replay: bool,
    value_head: bool = False,
    value_head_init: str = "normal",
    plan: Any = None,
) -> Any:
    """One megatron ``GPTModel`` of ``model_spec``: the actor, or with ``value_head`` the critic (T1 §4.5).

    The actor's ``output_layer`` becomes `HiddenOut` (its weight kept under the same name); the critic's is a
    `ValueHead` drawn from ``seed + 1`` as ``value_head_init`` says (``ppo.value_head_init``). Weights are
    drawn under ``torch.manual_seed(seed)`` (the global RNG is restored); the caller copies the HF policy's
    weights in (`t1_trainer.megatron.names.hf_to_megatron`). With ``plan.pp > 1`` the model is this rank's
    pipeline stage (megatron's ``pre_process`` / ``post_process``: the embedding on the first stage, the
    final norm and the output layer on the last, the layers megatron assigns the stage in between).

    Raises:
        ImportError: megatron-core (or, for Gated DeltaNet layers on CUDA, flash-linear-attention) is not
            installed.
    """
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt.gpt_model import GPTModel

    stage = {}  # this rank's pipeline stage: the embedding on the first, the head on the last
    if getattr(plan, "pp", 1) > 1:
        stage = {"pre_process": ps.is_pipeline_first_stage(), "post_process": ps.is_pipeline_last_stage()}
    config = transformer_config(
        model_spec, params_dtype=params_dtype, cpu=cpu, routing_replay=routing_replay, plan=plan
    )
    with torch.random.fork_rng(devices=[]), cpu_device_shim(cpu):
        torch.manual_seed(seed)
        model = GPTModel(
            config=config,
            transformer_layer_spec=_layer_specs(model_spec, config),
            vocab_size=model_spec.vocab_size,
            max_sequence_length=model_spec.max_position_embeddings,
            position_embedding_type="rope",
            rotary_percent=0.25,
            rotary_base=10000,
            share_embeddings_and_output_weights=model_spec.tie_word_embeddings,
            **stage,
        )
    _mark_gdn_sections(model)
    if getattr(model, "output_layer", None) is not None:
        if value_head:
            model.output_layer = ValueHead(
                model_spec.hidden_size, seed=seed + 1, dtype=params_dtype, init=value_head_init
            )
        else:
            model.output_layer = HiddenOut(model.output_layer.weight)
    return model


def _mark_gdn_sections(model: nn.Module) -> None:
    """Marks each Gated DeltaNet's fused weights with their full section sizes (``partition_sections``).

    ``in_proj`` rows are ``[q, k, v, z, beta, alpha]`` and ``conv1d`` channels ``[q, k, v]``; each tp rank
    holds its slice of every section (megatron's ``in_proj_split_sections`` are the local sizes), which
    `t1_trainer.megatron.sharding` cuts and gathers by this mark.
    """
    for module in model.modules():
        local = getattr(module, "in_proj_split_sections", None)
        if local is None:
            continue
        tp = module.tp_size
        module.in_proj.weight.partition_sections = tuple(n * tp for n in local)
        qkv = (module.qk_dim_local_tp, module.qk_dim_local_tp, module.v_dim_local_tp)
        module.conv1d.weight.partition_sections = tuple(n * tp for n in qkv)


@contextlib.contextmanager
def cpu_device_shim(cpu: bool) -> Iterator[None]:
    """On the CPU, answers megatron's ``torch.cuda.current_device()`` with the CPU device; else does nothing.

    megatron-core 0.19.2 moves the rotary ``inv_freq`` to ``torch.cuda.current_device()`` on the first forward
    (``RotaryEmbedding.get_emb``), which raises without a CUDA driver; with context parallelism its
    ``get_pos_emb_on_this_cp_rank`` builds its index with ``.cuda()``, answered by
    `t1_trainer.megatron.cp.rotary_on_this_rank`. Only for the body's duration.
    """
    if not cpu:
        yield
        return
    from megatron.core.models.common.embeddings import rotary_pos_embedding as rope

    from t1_trainer.megatron.cp import rotary_on_this_rank

    original, slicer = torch.cuda.current_device, rope.get_pos_emb_on_this_cp_rank
    torch.cuda.current_device = lambda: torch.device("cpu")  # type: ignore[assignment]
    rope.get_pos_emb_on_this_cp_rank = rotary_on_this_rank
    try:
        yield
    finally:
        torch.cuda.current_device = original  # type: ignore[assignment]
        rope.get_pos_emb_on_this_cp_rank = slicer
