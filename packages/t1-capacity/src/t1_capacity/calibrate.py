"""Fit alpha and b0 of Eq. 21 to measured peaks by least squares (T1 §7.1: "we calibrated a closed-form ...").

Eq. 21 is linear in its two unknown constants: peak = fixed(plan) + alpha * a(plan) + b0, where ``fixed`` is
the
footprint with alpha = b0 = 0 and ``a`` the activation term per unit alpha. Two or more measurements with
different ``a`` determine both by ordinary least squares.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from pathlib import Path

from t1_capacity.footprint import ACTOR, CRITIC, GIB, CapacityConstants, footprint
from t1_capacity.plan import Plan, validate_plan
from t1_capacity.shapes import ModelShape

REQUIRED_COLUMNS = ("tp", "pp", "cp", "dp", "ep", "token_wall", "peak_gib")


class CalibrationError(ValueError):
    """Measurements that cannot be read or cannot determine alpha and b0."""


@dataclass(frozen=True)
class Measurement:
    """One measured per-device peak.

    Attributes:
        plan: the plan and token wall it ran with.
        peak_gib: measured peak allocated memory on the binding device, GiB.
        network: ``"actor"`` or ``"critic"``.
        stage: the pipeline stage measured, or None for the model's binding stage.
    """

    plan: Plan
    peak_gib: float
    network: str = ACTOR
    stage: int | None = None


@dataclass(frozen=True)
class Calibration:
    """Fitted constants and how well they explain the data.

    Attributes:
        alpha: bytes per token per layer.
        b0_gib: allocator residue, GiB.
        residuals_gib: measured minus predicted per row, GiB, ``[rows]``.
    """

    alpha: float
    b0_gib: float
    residuals_gib: tuple[float, ...]

    @property
    def rms_gib(self) -> float:
        """Root-mean-square residual, GiB."""
        return math.sqrt(sum(r * r for r in self.residuals_gib) / len(self.residuals_gib))

    def dotlist(self) -> list[str]:
        """The recipe override, e.g. ``["plan.alpha=61440.0", "plan.b0_gib=3.0"]``."""
        return [f"plan.alpha={self.alpha:.1f}", f"plan.b0_gib={self.b0_gib:.3f}"]

    def yaml(self) -> str:
        """The same override as a YAML snippet to merge into a recipe."""
        return f"plan:\n  alpha: {self.alpha:.1f}\n  b0_gib: {self.b0_gib:.3f}\n"


def _split(model: ModelShape, m: Measurement, c: CapacityConstants) -> tuple[float, float]:
    """(fixed GiB, activation GiB per unit alpha) of one measurement."""
    zero = replace(c, alpha=0.0, b0_gib=0.0)
    unit = replace(c, alpha=1.0, b0_gib=0.0)
    stage = m.stage
    if stage is None:
        stage = footprint(model, m.plan, c, m.network).stage
    fixed = footprint(model, m.plan, zero, m.network, stage).total_bytes
    per_alpha = footprint(model, m.plan, unit, m.network, stage).total_bytes - fixed
    return fixed / GIB, per_alpha / GIB


def fit(model: ModelShape, rows: list[Measurement], start: CapacityConstants) -> Calibration:
    """Least-squares alpha and b0 (T1 §7.1, Eq. 21).

    Args:
        model: the model shape.
        rows: at least two measurements whose activation terms differ (different token walls or cp).
        start: the other constants (bytes per value), and the alpha/b0 used to pick each row's binding stage
            when ``stage`` is not given (refined once with the fitted values).

    Returns:
        The fitted constants and per-row residuals (measured - predicted, GiB).

    Raises:
        CalibrationError: fewer than two rows; all rows have the same activation term (alpha and b0 are
            then not separable); or the least-squares fit gives alpha <= 0 or b0 < 0, which Eq. 21 cannot
            produce (peaks do not grow with the activation term, or fall below the static footprint), so
            the measurements are inconsistent with the model.
    """
    if len(rows) < 2:
        raise CalibrationError(f"need at least 2 measurements to fit alpha and b0, got {len(rows)}")
    c = start
    for _ in range(2):  # second pass re-picks binding stages with the fitted constants
        xs, ys = [], []
        for m in rows:
            fixed, per_alpha = _split(model, m, c)
            xs.append(per_alpha)
            ys.append(m.peak_gib - fixed)
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        if sxx <= 1e-18 * max(1.0, mx * mx):
            raise CalibrationError(
                "all measurements have the same activation term; vary the token wall or cp to separate alpha "
                "from b0"
            )
        alpha = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
        b0 = my - alpha * mx
        if alpha <= 0 or b0 < 0:
            raise CalibrationError(_inconsistent(alpha, b0, xs, ys))
        c = replace(c, alpha=alpha, b0_gib=b0)
    residuals = tuple(y - (alpha * x + b0) for x, y in zip(xs, ys, strict=True))
    return Calibration(alpha, b0, residuals)


def _inconsistent(alpha: float, b0: float, xs: list[float], ys: list[float]) -> str:
    """Why a fit with alpha <= 0 or b0 < 0 is refused, naming the rows (1-based, CSV data order)."""
    if alpha <= 0:
        lo = min(range(len(xs)), key=lambda i: xs[i])
        hi = max(range(len(xs)), key=lambda i: xs[i])
        why = (
            f"the fit gives alpha = {alpha:.1f} B/token/layer, but Eq. 21's activation term grows with the "
            f"token wall / cp, so alpha must be > 0: row {hi + 1} has the largest activation term yet "
            f"{ys[hi]:.2f} GiB above the static footprint, row {lo + 1} the smallest with {ys[lo]:.2f} GiB"
        )
    else:
        worst = min(range(len(ys)), key=lambda i: ys[i])
        why = (
            f"the fit gives b0 = {b0:.3f} GiB, but the allocator residue cannot be negative: the peaks sit "
            f"below the footprint Eq. 21 predicts from weights, gradients and optimizer state alone (row "
            f"{worst + 1} is {ys[worst]:.2f} GiB over it before activations)"
        )
    return (
        f"measurements inconsistent with Eq. 21: {why}. Check that each row's plan, token wall, network "
        "and stage match the run that produced its peak, and that the peak is the allocated peak in GiB"
    )


def read_measurements(path: str | Path, base: Plan, model: ModelShape) -> list[Measurement]:
    """Read a measurements CSV.

    Columns: ``tp, pp, cp, dp, ep, token_wall, peak_gib`` (required), ``etp``, ``network`` (actor|critic),
    ``stage`` (optional). Other plan fields come from ``base``.

    Raises:
        FileNotFoundError: no such file.
        CalibrationError: a missing column, a bad value (a non-positive or non-finite peak, a non-positive
            token wall or parallel degree) or an invalid plan, naming the file and line.
    """
    path = Path(path)
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [k for k in REQUIRED_COLUMNS if k not in (reader.fieldnames or [])]
        if missing:
            raise CalibrationError(f"{path}: missing column(s) {', '.join(missing)}; need {REQUIRED_COLUMNS}")
        out = []
        for line, row in enumerate(reader, start=2):
            try:
                plan = replace(
                    base,
                    tp=int(row["tp"]),
                    pp=int(row["pp"]),
                    cp=int(row["cp"]),
                    dp=int(row["dp"]),
                    ep=int(row["ep"]),
                    etp=int(row.get("etp") or base.etp),
                    token_wall=int(row["token_wall"]),
                )
                network = (row.get("network") or ACTOR).strip()
                if network not in (ACTOR, CRITIC):
                    raise ValueError(f"network must be actor or critic, got {network!r}")
                stage = int(row["stage"]) if row.get("stage") else None
                peak = float(row["peak_gib"])
                if not math.isfinite(peak) or peak <= 0:
                    raise ValueError(f"peak_gib must be a positive number of GiB, got {row['peak_gib']!r}")
                if plan.token_wall <= 0:
                    raise ValueError(f"token_wall must be a positive token count, got {plan.token_wall}")
                validate_plan(plan, model)
                out.append(Measurement(plan, peak, network, stage))
            except (ValueError, TypeError) as exc:
                raise CalibrationError(f"{path}:{line}: {exc}") from exc
    return out
