"""Fit alpha and b0 of Eq. 21 to measured peaks by least squares (T1 §7.1: "we calibrated a closed-form ...").

Eq. 21 is linear in its two unknown constants: peak = fixed(plan) + alpha * a(plan) + b0, where ``fixed`` is
the footprint with alpha = b0 = 0 and ``a`` the activation term per unit alpha. Two or more measurements with
different ``a`` determine both by ordinary least squares.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from pathlib import Path

from t1_capacity.footprint import ACTOR, CRITIC, GIB, CapacityConstants, footprint
from t1_capacity.plan import Plan, plan_problems
from t1_capacity.shapes import ModelShape

REQUIRED_COLUMNS = ("tp", "pp", "cp", "dp", "ep", "token_wall", "peak_gib")

MAX_PEAK_GIB = 10_000.0
"""Largest per-device peak accepted, GiB (10 TiB: far above any accelerator's memory; a larger value is a
unit or typing error, and 1e308 would overflow the least-squares sums)."""


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
        CalibrationError: a row whose peak is not a finite number in (0, ``MAX_PEAK_GIB``] GiB or whose stage
            is out of range, naming the row (1-based); fewer than two rows; all rows have the same activation
            term (alpha and b0 are then not separable); a fit that overflows; or the least-squares fit gives
            alpha <= 0 or b0 < 0, which Eq. 21 cannot produce (peaks do not grow with the activation term, or
            fall below the static footprint), so the measurements are inconsistent with the model.
    """
    if len(rows) < 2:
        raise CalibrationError(f"need at least 2 measurements to fit alpha and b0, got {len(rows)}")
    c = start
    for _ in range(2):  # second pass re-picks binding stages with the fitted constants
        xs, ys = [], []
        for i, m in enumerate(rows, start=1):
            if not math.isfinite(m.peak_gib) or not 0 < m.peak_gib <= MAX_PEAK_GIB:
                raise CalibrationError(
                    f"row {i}: peak_gib {m.peak_gib!r} must be a finite number of GiB in "
                    f"(0, {MAX_PEAK_GIB:g}]"
                )
            try:
                fixed, per_alpha = _split(model, m, c)
            except ValueError as exc:
                raise CalibrationError(f"row {i} ({m.plan.label()}, {m.network}): {exc}") from exc
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
        if not (math.isfinite(alpha) and math.isfinite(b0)):
            raise CalibrationError(
                f"the fit overflowed (alpha = {alpha}, b0 = {b0} GiB): check the peaks' units"
            )
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


def _cell(row: dict, column: str) -> str:
    """The stripped text of ``column``; ValueError naming the column when the row is short or it is empty."""
    text = row.get(column)
    if text is None:
        raise ValueError(f"column {column}: missing (the row has fewer fields than the header)")
    text = text.strip()
    if not text:
        raise ValueError(f"column {column}: empty")
    return text


def _int_cell(row: dict, column: str, default: int | None = None) -> int:
    """An integer cell; ``default`` when the column is optional and empty/absent."""
    if default is not None and not (row.get(column) or "").strip():
        return default
    text = _cell(row, column)
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"column {column}: {text!r} is not an integer") from None


def read_measurements(path: str | Path, base: Plan, model: ModelShape) -> list[Measurement]:
    """Read a measurements CSV.

    Columns: ``tp, pp, cp, dp, ep, token_wall, peak_gib`` (required), ``etp``, ``network`` (actor|critic),
    ``stage`` (optional, 0-based, below pp). Other plan fields come from ``base``.

    Returns:
        One measurement per data row, in file order.

    Raises:
        FileNotFoundError: no such file.
        CalibrationError: the path is a directory or cannot be read as text; a missing column; a row with
            too few or too many fields; a cell that is empty or not a number; a bad value (a peak that is
            not a finite number in (0, ``MAX_PEAK_GIB``] GiB, a non-positive token wall or parallel degree,
            a stage outside [0, pp)); or an invalid plan. Every row error names the file, the line, the
            data row (1-based) and the column.
    """
    path = Path(path)
    if path.is_dir():
        raise CalibrationError(f"{path}: is a directory; give the measurements CSV file")
    if not path.exists():
        raise FileNotFoundError(f"measurements not found: {path}")
    try:
        with path.open(newline="") as fh:
            return _read_rows(path, csv.DictReader(fh), base, model)
    except UnicodeDecodeError as exc:
        raise CalibrationError(f"{path}: not a text CSV file ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise CalibrationError(f"{path}: cannot read the measurements: {exc.strerror or exc}") from exc


def _read_rows(path: Path, reader: csv.DictReader, base: Plan, model: ModelShape) -> list[Measurement]:
    """Parse the rows of an open measurements CSV (see ``read_measurements``)."""
    missing = [k for k in REQUIRED_COLUMNS if k not in (reader.fieldnames or [])]
    if missing:
        raise CalibrationError(f"{path}: missing column(s) {', '.join(missing)}; need {REQUIRED_COLUMNS}")
    out = []
    for number, row in enumerate(reader, start=1):
        where = f"{path}:{reader.line_num}: row {number}"
        try:
            if row.get(None):  # csv.DictReader files surplus fields under the key None
                raise ValueError(
                    f"{len(row[None])} field(s) beyond the header's {len(reader.fieldnames or [])} "
                    f"columns: {row[None]!r}"
                )
            plan = replace(
                base,
                tp=_int_cell(row, "tp"),
                pp=_int_cell(row, "pp"),
                cp=_int_cell(row, "cp"),
                dp=_int_cell(row, "dp"),
                ep=_int_cell(row, "ep"),
                etp=_int_cell(row, "etp", default=base.etp),
                token_wall=_int_cell(row, "token_wall"),
            )
            network = (row.get("network") or "").strip() or ACTOR
            if network not in (ACTOR, CRITIC):
                raise ValueError(f"column network: must be actor or critic, got {network!r}")
            text = _cell(row, "peak_gib")
            try:
                peak = float(text)
            except ValueError:
                raise ValueError(f"column peak_gib: {text!r} is not a number") from None
            if not math.isfinite(peak) or peak <= 0:
                raise ValueError(f"column peak_gib: peak_gib must be a positive number of GiB, got {text!r}")
            if peak > MAX_PEAK_GIB:
                raise ValueError(
                    f"column peak_gib: {text!r} GiB is more than any device holds (limit {MAX_PEAK_GIB:g} "
                    "GiB); give the measured per-device peak in GiB"
                )
            if plan.token_wall <= 0:
                raise ValueError(
                    f"column token_wall: token_wall must be a positive token count, got {plan.token_wall}"
                )
            problems = plan_problems(plan, model)
            if problems:
                raise ValueError("invalid plan: " + "; ".join(problems))
            stage = None
            if (row.get("stage") or "").strip():
                stage = _int_cell(row, "stage")
                if not 0 <= stage < plan.pp:
                    raise ValueError(
                        f"column stage: stage {stage} out of range for pp={plan.pp}; stages are "
                        f"0..{plan.pp - 1} (leave it empty for the binding stage)"
                    )
            out.append(Measurement(plan, peak, network, stage))
        except (ValueError, TypeError) as exc:
            raise CalibrationError(f"{where}: {exc}") from exc
    return out
