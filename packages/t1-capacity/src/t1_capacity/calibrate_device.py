"""Calibrate a backend's activations on a GPU from the device check's JSON lines (``t1 plan calibrate``).

``tools/device/check.py`` writes one JSON line per (size, backend) with, per network, the activation peak it
measured on the device: the forward/backward peak above the allocation at the optimizer's step (activations,
the LM-head chunk's logits and autograd temporaries), the token wall of its micro-batches and the loss rows
per sample. Each line is one size, so a run of ``--sizes tiny,1b`` gives 2 sizes x 2 networks = 4 measured
peaks: too few for the per-kind coefficients (8 of them, `t1_capacity.activations.KINDS`), and the 2 sizes
change every kind's width at once. What they determine is **one scale** on a per-kind model measured
elsewhere (the backend's CPU calibration, ``coefficients/<backend>-cpu.json``): ``s`` minimising the squared
error of ``s * body + logits`` against the measured peaks, where ``body`` is the CPU coefficients' activation
prediction (layers, embedding, head) at the check's wall and ``logits`` the layout's LM-head chunk
(`t1_capacity.layouts`) at the rows the check's samples had (``min(loss rows per sample, chunk)``), which is
not fitted. b0 is the mean of the measured allocator residues. The fit is in-sample: with 4 points and one
parameter the table is the only test, and it is printed.
"""

from __future__ import annotations

import datetime
import json
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from t1_capacity.activations import BackendCoefficients, stored
from t1_capacity.footprint import ACTOR, CRITIC, GIB, footprint, padded_vocab
from t1_capacity.layouts import DTYPE_BYTES, backend_constants, machine_of
from t1_capacity.plan import Plan
from t1_capacity.shapes import ModelShape
from t1_spec import load_recipe

CHECK = "t1-device-check"
"""The ``check`` field of the device check's JSON lines."""

NETWORKS = (ACTOR, CRITIC)
BODY_TERMS = ("recurrent_activations", "attention_activations", "edge_activations")


@dataclass(frozen=True)
class DevicePoint:
    """One (size, backend) line of the device check.

    Attributes:
        size: the check's size (``tiny``, ``1b``).
        model: the model shape trained (the recipe with the line's ``model_overrides``).
        wall: the token wall priced (``capacity_constants.token_wall``: the longest micro-batch trained).
        loss_rows: loss positions per sample (``loss_tokens / samples``).
        dtype: the trainer's weight dtype.
        device: the device string (``cuda:0 NVIDIA H200``).
        measured: ``{network: activation peak, bytes}``.
        residue: the measured allocator residue, bytes (None where not measured).
        runs: how many identical lines of this size were read (repeats of one run).
        versions: the line's ``versions`` (torch, transformers, CUDA), as ``name version`` pairs.
    """

    size: str
    model: ModelShape
    wall: int
    loss_rows: int
    dtype: str
    device: str
    measured: dict[str, float]
    residue: float | None
    runs: int = 1
    versions: str = ""


def is_device_check(path: str | Path) -> bool:
    """Whether ``path`` holds at least one JSON line of the device check."""
    for line in Path(path).read_text().splitlines():
        if line.lstrip().startswith("{"):
            try:
                if json.loads(line).get("check") == CHECK:
                    return True
            except (json.JSONDecodeError, AttributeError):
                return False
    return False


def read_device_check(path: str | Path, recipe: str | Path, backend: str) -> list[DevicePoint]:
    """The ``backend`` lines of the device check in ``path`` (dry runs skipped), one point per size.

    Repeated lines of one size (a rerun) must agree on the measured bytes and count as one point with
    ``runs`` > 1.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line that is not JSON or misses a field, naming the file and line; repeats that
            disagree; no line of ``backend``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"measurements not found: {path}")
    points: dict[str, DevicePoint] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.lstrip().startswith("{"):
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not a JSON line ({exc.msg})") from exc
        if data.get("check") != CHECK or data.get("dry_run") or data.get("backend") != backend:
            continue
        try:
            mem = data["memory"]
            point = DevicePoint(
                size=str(data["size"]),
                model=ModelShape.from_spec(load_recipe(recipe, list(data["model_overrides"])).model),
                wall=int(data["capacity_constants"]["token_wall"]),
                loss_rows=int(data["loss_tokens"]) // int(data["samples"]),
                dtype=str(data["trainer_dtype"]),
                device=str(data["device"]),
                measured={n: float(mem[n]["activations"]["measured_gib"]) * GIB for n in NETWORKS},
                residue=_gib(mem.get("allocator_residue", {}).get("measured_gib")),
                versions=", ".join(f"{k} {v}" for k, v in data.get("versions", {}).items()),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{path}:{number}: missing or bad field {exc}") from exc
        seen = points.get(point.size)
        if seen is None:
            points[point.size] = point
        elif seen.measured != point.measured:
            raise ValueError(f"{path}:{number}: size {point.size} measured twice with different activations")
        else:
            points[point.size] = replace(seen, runs=seen.runs + 1)
    if not points:
        raise ValueError(f'{path}: no device check line of backend {backend!r} ("check": "{CHECK}")')
    return list(points.values())


def _gib(value: float | None) -> float | None:
    return None if value is None else float(value) * GIB


def split(point: DevicePoint, backend: str) -> dict[str, tuple[float, float]]:
    """``{network: (body, logits)}`` bytes: the CPU coefficients' activations and the layout's logit chunk.

    Raises:
        ValueError: no CPU calibration stored for ``backend``.
    """
    cpu = stored(backend, "cpu")
    if cpu is None:
        raise ValueError(f"no coefficients/{backend}-cpu.json: the device fit scales the CPU calibration")
    c = backend_constants(backend, point.dtype, device="cpu", alpha=0.0, b0_gib=0.0)
    width = DTYPE_BYTES[point.dtype] / DTYPE_BYTES[cpu.dtype]
    c = replace(c, activations=cpu.activations.scaled(width))
    plan = Plan(token_wall=point.wall, memory_budget_gib=1e6)
    rows = min(point.loss_rows, c.logit_rows or point.wall)
    out = {}
    for net in NETWORKS:
        f = footprint(point.model, plan, c, net)
        logits = rows * padded_vocab(point.model.vocab_size, 1) * c.logit_bytes if net == ACTOR else 0.0
        out[net] = (sum(f.term(t).bytes for t in BODY_TERMS), logits)
    return out


def fit_scale(points: list[DevicePoint], backend: str) -> float:
    """The least-squares ``s`` of ``s * body + logits`` against the measured peaks (through the origin).

    Raises:
        ValueError: no points, or a zero body everywhere.
    """
    sxx = sxy = 0.0
    for p in points:
        for net, (body, logits) in split(p, backend).items():
            sxx += body * body
            sxy += body * (p.measured[net] - logits)
    if sxx <= 0:
        raise ValueError("the CPU coefficients price no activations for these points: nothing to scale")
    return max(0.0, sxy / sxx)


def table(points: list[DevicePoint], backend: str, scale: float) -> list[tuple[str, str, float, float]]:
    """``(size, network, predicted, measured)`` bytes of the scaled model at each point."""
    rows = []
    for p in points:
        for net, (body, logits) in split(p, backend).items():
            rows.append((p.size, net, scale * body + logits, p.measured[net]))
    return rows


def calibrate_from_device(
    path: str | Path, recipe: str | Path, backend: str, command: str, machine: str
) -> tuple[BackendCoefficients, str]:
    """Fit the scale and b0 of ``backend`` on the GPU from the device check's lines; stored form and report.

    The stored activation model is the CPU calibration's per-kind coefficients times the scale (in the CPU
    calibration's dtype), b0 the mean measured residue (0 where none was measured).

    Raises:
        ValueError: see `read_device_check`, `split`; the points trained on no CUDA device.
    """
    points = read_device_check(path, recipe, backend)
    devices = sorted({p.device for p in points})
    if any(machine_of(d.split()[0]) != "cuda" for d in devices):
        raise ValueError(f"{path}: the device check ran on {devices}; a CUDA calibration needs CUDA lines")
    cpu = stored(backend, "cpu")
    scale = fit_scale(points, backend)
    residues = [p.residue for p in points if p.residue is not None]
    b0 = statistics.fmean(residues) / GIB if residues else 0.0
    rows = table(points, backend, scale)
    n = len(rows)
    fitted = BackendCoefficients(
        backend=backend,
        dtype=cpu.dtype,  # type: ignore[union-attr]
        activations=cpu.activations.scaled(scale),  # type: ignore[union-attr]
        b0_gib=b0,
        provenance=(
            ("command", command),
            ("date", datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")),
            ("machine", machine),
            (
                "data",
                f"{Path(path).name}: {', '.join(f'{p.size} x{p.runs}' for p in points)} on {devices[0]}",
            ),
            ("fit", f"one scale {scale:.4f} on {backend}-cpu.json's per-kind coefficients from {n} peaks"),
            ("b0", f"mean of {len(residues)} measured allocator residues"),
            ("measured_device", devices[0]),
            ("measured_versions", points[0].versions),
        ),
    )
    lines = [
        f"{backend} on {devices[0]}: {len(points)} sizes x 2 networks = {n} measured activation peaks; "
        f"fitted 1 coefficient: scale {scale:.4f} on the CPU per-kind coefficients (not identifiable per "
        "kind from these points); the LM-head chunk at the samples' loss rows is the layout's, not fitted",
        f"b0 = {b0:.3f} GiB (mean of {len(residues)} measured residues)",
        f"{'size':<8}{'network':<9}{'predicted':>11}{'measured':>11}{'ratio':>8}",
    ]
    for size, net, pred, meas in rows:
        lines.append(f"{size:<8}{net:<9}{pred / GIB:>11.4f}{meas / GIB:>11.4f}{pred / meas:>8.3f}")
    return fitted, "\n".join(lines)
