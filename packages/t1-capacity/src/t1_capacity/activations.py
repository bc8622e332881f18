"""A per-backend activation model: bytes held for the backward, per layer kind, with measured coefficients.

Eq. 21 prices activations as ``alpha * T * L`` with one alpha per token per layer, the paper's coefficient
for its Megatron stack (T1 §7.1). Another backend saves different tensors, and the MoE shape (top-k, expert
FFN width) moves the figure, so for such a backend the activation peak is a sum over layer kinds:

    per token, per layer      c_kind * width_kind(model)      kind = attention | gdn (on their layers),
                                                              moe | shared_expert | layer (on every layer)
    per token, per attention layer, per token of the sequence
                              c_attention_scores * heads      an unfused attention's [heads, T, T] scores
    per token, once           c_embedding * h (first stage), c_head * h (last stage)

where ``width_kind`` is the count of values per token the kind's forward produces and autograd keeps
(`widths`), and ``c_kind`` the bytes per such value, fitted by least squares from measured runs
(``t1 plan calibrate`` on ``tools/bench/bench_memory.py``'s output) and stored with its provenance in
``coefficients/<backend>-<machine>.json``. The byte layout of weights, gradients, optimizer state and logits
stays in `t1_capacity.footprint.backend_constants`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from t1_capacity.shapes import ModelShape

KINDS = ("attention", "attention_scores", "gdn", "moe", "shared_expert", "layer", "embedding", "head")
"""Layer kinds with an activation coefficient each, in storage order."""

MEASURED_KINDS = ("attention", "gdn", "moe", "shared_expert", "layer", "embedding", "head")
"""Kinds a benchmark measures apart (by module): the attention layer's bytes are one measurement that its two
coefficients, ``attention`` (per token) and ``attention_scores`` (per token squared), share."""

COEFFICIENTS_OF = {k: (k,) for k in MEASURED_KINDS} | {"attention": ("attention", "attention_scores")}
"""The coefficients each measured kind is fitted to."""

QUADRATIC_KINDS = ("attention_scores",)
"""Kinds whose bytes per token grow with the sequence's length (one score per query and key)."""

LAYER_KINDS = ("attention", "gdn")
"""Mixer kinds: one per layer, by ``ModelShape.layer_types``."""

EVERY_LAYER_KINDS = ("moe", "shared_expert", "layer")
"""Kinds present in every decoder layer."""

GDN_CHUNK = 64
"""Chunk length of the Gated DeltaNet's chunked scan (the torch fallback and fla's kernels): per value head
and token the scan keeps a row of the chunk's decay / attention matrices."""

COEFFICIENTS_DIR = Path(__file__).resolve().parent / "coefficients"


def widths(model: ModelShape) -> dict[str, float]:
    """Values per token of each kind (``KINDS``), the features the coefficients multiply.

    attention: input h, the gated query (2 nh d), key and value (2 nkv d), the attention output (nh d).
    gdn: input h, query and key (2 nk dk), value and output gate (2 nv dv), one chunk row per value head
    (nv * `GDN_CHUNK`). moe: input h, router logits E, and per selected expert its input and the gate, up
    and activation of its FFN (top_k (h + 3 I)); 0 for a dense model. shared_expert: h + 3 I_s + 1 (its
    sigmoid gate); 0 without one. layer, embedding, head: h. attention_scores: the attention heads nh,
    values per token *per token of the sequence* (an unfused attention, megatron-core's local
    ``DotProductAttention``, keeps its ``[nh, T, T]`` scores and softmax; a flash attention keeps none).
    """
    h = model.hidden_size
    moe = 0.0
    if model.num_experts:
        moe = h + model.num_experts + model.top_k * (h + 3 * model.moe_intermediate_size)
    shared = 0.0
    if model.shared_expert_intermediate_size:
        shared = h + 3 * model.shared_expert_intermediate_size + 1
    return {
        "attention": float(
            h
            + 3 * model.num_attention_heads * model.head_dim
            + 2 * model.num_key_value_heads * model.head_dim
        ),
        "attention_scores": float(model.num_attention_heads),
        "gdn": float(
            h
            + 2 * model.linear_num_key_heads * model.linear_key_head_dim
            + 2 * model.linear_num_value_heads * model.linear_value_head_dim
            + model.linear_num_value_heads * GDN_CHUNK
        ),
        "moe": float(moe),
        "shared_expert": float(shared),
        "layer": float(h),
        "embedding": float(h),
        "head": float(h),
    }


@dataclass(frozen=True)
class ActivationModel:
    """Bytes per value of each layer kind (`KINDS`), for one backend and dtype.

    Attributes:
        coefficients: ``(kind, bytes per value)`` pairs, one per kind of `KINDS`, in that order.

    Raises:
        ValueError: a kind missing, unknown or repeated, or a coefficient that is not a finite number >= 0.
    """

    coefficients: tuple[tuple[str, float], ...]

    def __post_init__(self) -> None:
        names = tuple(k for k, _ in self.coefficients)
        if names != KINDS:
            raise ValueError(
                f"ActivationModel: coefficients must name {', '.join(KINDS)} in order, got {names}"
            )
        for kind, value in self.coefficients:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(
                    f"ActivationModel: coefficient {kind} must be a finite number, got {value!r}"
                )
            if value < 0:
                raise ValueError(
                    f"ActivationModel: coefficient {kind} must be >= 0 bytes per value, got {value}"
                )

    @classmethod
    def from_dict(cls, values: dict[str, float]) -> ActivationModel:
        """From ``{kind: bytes per value}``; ValueError naming a missing or unknown kind."""
        unknown = sorted(set(values) - set(KINDS))
        missing = [k for k in KINDS if k not in values]
        if unknown or missing:
            raise ValueError(
                f"ActivationModel: unknown kind(s) {unknown}, missing {missing}; kinds are {KINDS}"
            )
        return cls(tuple((k, float(values[k])) for k in KINDS))

    def as_dict(self) -> dict[str, float]:
        """``{kind: bytes per value}``."""
        return dict(self.coefficients)

    def scaled(self, factor: float) -> ActivationModel:
        """Every coefficient times ``factor`` (a dtype of another width)."""
        return ActivationModel(tuple((k, v * factor) for k, v in self.coefficients))

    def layer_bytes_per_token(self, model: ModelShape, mixer: str, tokens: int) -> float:
        """Bytes per token of one decoder layer whose mixer is ``mixer`` (``attention`` or ``gdn``).

        ``tokens`` is the sequence's length: the attention scores per token grow with it.
        """
        if mixer not in LAYER_KINDS:
            raise ValueError(f"mixer must be one of {LAYER_KINDS}, got {mixer!r}")
        if not isinstance(model, ModelShape):
            raise TypeError(f"an activation model per layer kind prices a ModelShape, got {model!r}")
        c, w = self.as_dict(), widths(model)
        scores = c["attention_scores"] * w["attention_scores"] * tokens if mixer == "attention" else 0.0
        return c[mixer] * w[mixer] + scores + sum(c[k] * w[k] for k in EVERY_LAYER_KINDS)

    def edge_bytes_per_token(self, model: ModelShape, first: bool, last: bool) -> float:
        """Bytes per token of the embedding (on the first stage) and the head and loss (on the last)."""
        c, w = self.as_dict(), widths(model)
        return first * c["embedding"] * w["embedding"] + last * c["head"] * w["head"]


@dataclass(frozen=True)
class BackendCoefficients:
    """A stored calibration: the activation model, b0 and where they came from.

    Attributes:
        backend: ``trainer.backend`` it was measured on.
        dtype: the weight dtype of the measured runs.
        activations: bytes per value per kind.
        b0_gib: allocator residue, GiB (on the CPU: the process's resident memory besides the priced tensors).
        provenance: command, date, machine and data of the fit.
    """

    backend: str
    dtype: str
    activations: ActivationModel
    b0_gib: float
    provenance: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> str:
        """The stored form (``coefficients/*.json``)."""
        data = {
            "backend": self.backend,
            "dtype": self.dtype,
            "activation_bytes_per_value": self.activations.as_dict(),
            "b0_gib": self.b0_gib,
            "provenance": dict(self.provenance),
        }
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = "<json>") -> BackendCoefficients:
        """Parse the stored form; ValueError naming ``source`` and the field."""
        try:
            data = json.loads(text)
            b0 = float(data["b0_gib"])
            if not math.isfinite(b0) or b0 < 0:
                raise ValueError(f"b0_gib must be a finite number >= 0, got {data['b0_gib']!r}")
            return cls(
                backend=str(data["backend"]),
                dtype=str(data["dtype"]),
                activations=ActivationModel.from_dict(data["activation_bytes_per_value"]),
                b0_gib=b0,
                provenance=tuple((str(k), str(v)) for k, v in data.get("provenance", {}).items()),
            )
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
            what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(f"{source}: not a coefficients file: {what}") from exc


def stored(backend: str, machine: str = "cpu") -> BackendCoefficients | None:
    """The coefficients stored for ``backend`` on ``machine`` (``coefficients/<backend>-<machine>.json``).

    Returns:
        None where none are stored.

    Raises:
        ValueError: a stored file that does not parse, naming it.
    """
    path = COEFFICIENTS_DIR / f"{backend}-{machine}.json"
    if not path.is_file():
        return None
    return BackendCoefficients.from_json(path.read_text(), str(path))
