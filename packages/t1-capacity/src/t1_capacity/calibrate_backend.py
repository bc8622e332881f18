"""Fit a backend's activation coefficients and b0 from measured runs (``t1 plan calibrate`` on JSON lines).

The measurements are the JSON line of ``tools/bench/bench_memory.py`` (``{"bench": "memory", "backend",
"dtype", "device", "rows": [...]}``): per case the model overrides, the token wall, and per network the
measured weights, gradients, optimizer state, logits and the activation bytes by layer kind, plus the
process's peak RSS. Each measured kind's coefficients (bytes per value, `t1_capacity.activations`; the
attention layer's bytes share two, per token and per token squared) are the non-negative least-squares fit
through the origin of the measured bytes against ``count * wall * width`` (``* wall`` again for the scores)
over every case and network; b0 is the mean of the peak RSS less the co-resident actor + critic footprint
without b0 (never below 0). The byte layout priced is the line's backend, dtype and device
(`t1_capacity.layouts.backend_constants`).

Fitting and evaluating on the same cases is in-sample: ``holdout`` leaves cases out of the fit to report them
as a test.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from itertools import combinations
from pathlib import Path
from typing import Any

from t1_capacity.activations import (
    COEFFICIENTS_OF,
    KINDS,
    QUADRATIC_KINDS,
    ActivationModel,
    BackendCoefficients,
    widths,
)
from t1_capacity.footprint import ACTOR, CRITIC, GIB, CapacityConstants, footprint
from t1_capacity.layouts import backend_constants
from t1_capacity.shapes import FULL_ATTENTION, ModelShape
from t1_spec import load_recipe

TERMS = ("weights", "grads", "optimizer", "activations", "logits")
"""Measured terms per network, bytes."""

NETWORKS = (ACTOR, CRITIC)


@dataclass(frozen=True)
class Case:
    """One measured (shape, wall) case of the memory benchmark.

    Attributes:
        label: ``shape@wall``.
        overrides: the recipe's dotlist for the shape.
        model: the model shape.
        wall: tokens of the sample.
        measured: ``{network: {term: bytes}}`` and ``{network: {"by_kind": {kind: bytes}}}``.
        rss_peak: the process's peak resident set, bytes.
        backend: the trainer backend measured (``torch``, ``megatron``).
        dtype: its weight dtype.
        device: ``cpu`` or ``cuda``.
    """

    label: str
    overrides: tuple[str, ...]
    model: ModelShape
    wall: int
    measured: dict[str, dict[str, Any]]
    rss_peak: float
    backend: str = "torch"
    dtype: str = "float32"
    device: str = "cpu"


def read_bench(path: str | Path, recipe: str | Path) -> list[Case]:
    """The cases of the benchmark's JSON line(s) in ``path``, each with its model shape from ``recipe``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: no line with ``"bench": "memory"``, a line opening with ``{`` that is not JSON, or a row
            missing a field, naming the file, line and field.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"measurements not found: {path}")
    cases: list[Case] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.lstrip().startswith("{"):
            continue  # the benchmark's table above its JSON line
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not a JSON line ({exc.msg})") from exc
        if not isinstance(data, dict) or data.get("bench") != "memory":
            continue
        layout = (str(data.get("backend", "torch")), str(data.get("dtype", "float32")))
        device = str(data.get("device", "cpu"))  # lines before the megatron benchmark: torch on the CPU
        for i, row in enumerate(data.get("rows", []), start=1):
            try:
                overrides = tuple(row["overrides"])  # the shape; the wall is the plan's, set below
                measured = {
                    net: {
                        **{t: float(row[net][t]) for t in TERMS},
                        "by_kind": row[net]["activations_by_kind"],
                    }
                    for net in NETWORKS
                }
                cases.append(
                    Case(
                        f"{row['shape']}@{row['wall']}",
                        overrides,
                        ModelShape.from_spec(load_recipe(recipe, list(overrides)).model),
                        int(row["wall"]),
                        measured,
                        float(row["rss_peak"]),
                        *layout,
                        device,
                    )
                )
            except (KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: row {i}: missing or bad field {exc}") from exc
    if not cases:
        raise ValueError(f'{path}: no benchmark rows (a JSON line with "bench": "memory")')
    layouts = sorted({(c.backend, c.dtype, c.device) for c in cases})
    if len(layouts) > 1:
        raise ValueError(f"{path}: rows of several backends / dtypes / devices {layouts}; fit one at a time")
    return cases


def case_constants(
    case: Case, alpha: float = 0.0, b0_gib: float = 0.0, stored: bool = False
) -> CapacityConstants:
    """The byte layout of the case's backend, dtype and device; with ``stored``, its stored calibration."""
    return backend_constants(
        case.backend,
        case.dtype,
        device=case.device,
        alpha=alpha,
        b0_gib=b0_gib,
        calibrated_activations=stored,
        calibrated_b0=stored,
    )


def bench_meta(path: str | Path) -> dict[str, str]:
    """The benchmark's ``command``, ``machine`` and ``torch`` version from its JSON line(s), where given."""
    meta: dict[str, str] = {}
    for line in Path(path).read_text().splitlines():
        if line.lstrip().startswith("{"):
            data = json.loads(line)
            if isinstance(data, dict) and data.get("bench") == "memory":
                meta.update({k: str(data[k]) for k in ("command", "machine", "torch") if k in data})
    return meta


def kind_counts(model: ModelShape) -> dict[str, int]:
    """How many times each kind runs per token in the whole model (one stage, pp = 1)."""
    n_attn = sum(t == FULL_ATTENTION for t in model.layer_types)
    layers = model.num_layers
    return {
        "attention": n_attn,
        "attention_scores": n_attn,
        "gdn": layers - n_attn,
        "moe": layers,
        "shared_expert": layers,
        "layer": layers,
        "embedding": 1,
        "head": 1,
    }


def feature(case: Case, kind: str) -> float:
    """Values the coefficient ``kind`` multiplies in the case: ``count * wall * width``.

    A quadratic kind (`QUADRATIC_KINDS`) is multiplied by the wall once more.
    """
    x = kind_counts(case.model)[kind] * case.wall * widths(case.model)[kind]
    return x * case.wall if kind in QUADRATIC_KINDS else x


def _nnls(xs: list[list[float]], ys: list[float]) -> list[float]:
    """Non-negative least squares through the origin for a few columns: the best of every column subset."""
    k = len(xs[0])
    best: tuple[float, list[float]] = (sum(y * y for y in ys), [0.0] * k)
    for size in range(1, k + 1):
        for cols in combinations(range(k), size):
            coef = _lstsq([[row[c] for c in cols] for row in xs], ys)
            if coef is None or min(coef) < 0:
                continue
            full = [0.0] * k
            for c, v in zip(cols, coef, strict=True):
                full[c] = v
            sse = sum(
                (y - sum(a * b for a, b in zip(row, full, strict=True))) ** 2
                for row, y in zip(xs, ys, strict=True)
            )
            if sse < best[0]:
                best = (sse, full)
    return best[1]


def _lstsq(xs: list[list[float]], ys: list[float]) -> list[float] | None:
    """Least squares through the origin by the normal equations (Gauss-Jordan); None when singular."""
    k = len(xs[0])
    a = [
        [sum(r[i] * r[j] for r in xs) for j in range(k)]
        + [sum(r[i] * y for r, y in zip(xs, ys, strict=True))]
        for i in range(k)
    ]
    for i in range(k):
        pivot = max(range(i, k), key=lambda r: abs(a[r][i]))
        if a[pivot][i] == 0:
            return None
        a[i], a[pivot] = a[pivot], a[i]
        for r in range(k):
            if r != i:
                f = a[r][i] / a[i][i]
                a[r] = [x - f * y for x, y in zip(a[r], a[i], strict=True)]
    return [a[i][k] / a[i][i] for i in range(k)]


def fit_activations(cases: list[Case]) -> ActivationModel:
    """Per measured kind, the non-negative least-squares bytes per value of its coefficients, through 0.

    The coefficients of a measured kind are `t1_capacity.activations.COEFFICIENTS_OF`; every case and network
    is one equation.

    A coefficient that no case exercises (its feature 0 everywhere) gets 0.

    Raises:
        ValueError: no cases.
    """
    if not cases:
        raise ValueError("need at least one measured case to fit the activation coefficients")
    out = dict.fromkeys(KINDS, 0.0)
    for kind, coefs in COEFFICIENTS_OF.items():
        used = [k for k in coefs if any(feature(c, k) > 0 for c in cases)]
        if not used:
            continue
        xs, ys = [], []
        for case in cases:
            for net in NETWORKS:
                xs.append([feature(case, k) for k in used])
                ys.append(float(case.measured[net]["by_kind"][kind]))
        out.update(zip(used, _nnls(xs, ys), strict=True))
    return ActivationModel.from_dict(out)


def predicted_terms(case: Case, c: CapacityConstants) -> dict[str, dict[str, float]]:
    """``{network: {term: bytes}}`` of the capacity model for the case (pp = 1), plus ``b0``."""
    from t1_capacity.plan import Plan

    plan = Plan(token_wall=case.wall, memory_budget_gib=1e6)
    out: dict[str, dict[str, float]] = {}
    for net in NETWORKS:
        b = {t.name: t.bytes for t in footprint(case.model, plan, c, net).terms}
        out[net] = {
            "weights": b["expert_weights"] + b["dense_weights"],
            "grads": b["expert_grads"] + b["dense_grads"],
            "optimizer": b["expert_optimizer"] + b["dense_optimizer"],
            "activations": sum(v for k, v in b.items() if k.endswith("activations")),
            "logits": b["logit_buffer"],
            "b0": b["allocator_residue"],
        }
    return out


def fit_b0(cases: list[Case], c: CapacityConstants) -> float:
    """Mean of (peak RSS - co-resident actor + critic without b0), GiB, at least 0."""
    gaps = []
    for case in cases:
        pred = predicted_terms(case, replace(c, b0_gib=0.0))
        gaps.append(case.rss_peak - sum(pred[n][t] for n in NETWORKS for t in TERMS))
    return max(0.0, sum(gaps) / len(gaps) / GIB)


@dataclass(frozen=True)
class TableRow:
    """Predicted vs measured of one term: ``case``, ``network``, ``term``, bytes both, share of the total."""

    case: str
    network: str
    term: str
    predicted: float
    measured: float
    share: float

    @property
    def ratio(self) -> float:
        """Predicted / measured (nan when nothing was measured)."""
        return self.predicted / self.measured if self.measured else math.nan

    @property
    def within(self) -> bool:
        """Within +-15%, or below 1% of the network's measured total (not held to the bound)."""
        return self.share < 0.01 or abs(self.ratio - 1.0) <= 0.15


def table(cases: list[Case], c: CapacityConstants) -> list[TableRow]:
    """Per case, network and term, the capacity model against the measurement; then the RSS peak row."""
    rows = []
    for case in cases:
        pred = predicted_terms(case, c)
        for net in NETWORKS:
            total = sum(case.measured[net][t] for t in TERMS)
            for t in TERMS:
                m = case.measured[net][t]
                rows.append(TableRow(case.label, net, t, pred[net][t], m, m / total if total else 0.0))
        co = sum(pred[n][t] for n in NETWORKS for t in TERMS) + pred[ACTOR]["b0"]
        rows.append(TableRow(case.label, "process", "rss_peak", co, case.rss_peak, 1.0))
    return rows


def format_table(rows: list[TableRow]) -> str:
    """The table as text, GiB, with the ratio and a mark on terms outside +-15%."""
    lines = [f"{'case':<12}{'network':<9}{'term':<13}{'predicted':>11}{'measured':>11}{'ratio':>8}"]
    for r in rows:
        mark = "" if r.within else "  outside +-15%"
        lines.append(
            f"{r.case:<12}{r.network:<9}{r.term:<13}{r.predicted / GIB:>11.4f}{r.measured / GIB:>11.4f}"
            f"{r.ratio:>8.3f}{mark}"
        )
    return "\n".join(lines)


def calibrate_from_bench(
    path: str | Path, recipe: str | Path, holdout: list[str], command: str, machine: str
) -> tuple[BackendCoefficients, str]:
    """Fit the recipe's backend's coefficients from the benchmark's output; the stored form and a report.

    Args:
        path: the benchmark's JSON line(s).
        recipe: the recipe the cases' model overrides apply to; the backend, dtype and device are the
            measurements' (their JSON line's).
        holdout: case labels (``shape@wall``) left out of the fit and reported as a test.
        command: the command line, recorded in the provenance.
        machine: the machine, recorded in the provenance.

    Returns:
        The fitted coefficients (fit on every case but the held-out ones) and the report: coefficients, the
        in-sample table, then the held-out table.

    Raises:
        ValueError: see `read_bench`; a held-out label that is no case; nothing left to fit.
    """
    import datetime

    cases = read_bench(path, recipe)
    labels = [c.label for c in cases]
    unknown = [h for h in holdout if h not in labels]
    if unknown:
        raise ValueError(f"--holdout {', '.join(unknown)}: no such case; cases are {', '.join(labels)}")
    train = [c for c in cases if c.label not in holdout]
    test = [c for c in cases if c.label in holdout]
    if not train:
        raise ValueError("--holdout leaves no case to fit")
    base = case_constants(cases[0])
    model = fit_activations(train)
    c = replace(base, activations=model)
    b0 = fit_b0(train, c)
    c = replace(c, b0_gib=b0)
    fitted = BackendCoefficients(
        backend=cases[0].backend,
        dtype=cases[0].dtype,
        activations=model,
        b0_gib=b0,
        provenance=(
            ("command", command),
            ("date", datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")),
            ("machine", machine),
            ("data", f"{Path(path).name}: {len(cases)} cases ({', '.join(labels)})"),
            ("held_out", ", ".join(holdout) or "none"),
            *((f"measured_{k}", v) for k, v in bench_meta(path).items()),
        ),
    )
    coef = "  ".join(f"{k} {v:.2f}" for k, v in model.as_dict().items())
    inside = table(train, c)
    parts = [
        f"activation bytes per value: {coef}",
        f"b0 = {b0:.3f} GiB",
        f"in-sample ({len(train)} cases), terms outside +-15%: {_misses(inside)}",
        format_table(inside),
    ]
    if test:
        held = table(test, c)
        parts += [f"held out ({', '.join(holdout)}), terms outside +-15%: {_misses(held)}"]
        parts.append(format_table(held))
    return fitted, "\n".join(parts)


def _misses(rows: list[TableRow]) -> int:
    """Terms above 1% of their network's total outside +-15% (the process RSS row is not a term)."""
    return sum(not r.within for r in rows if r.network != "process")
