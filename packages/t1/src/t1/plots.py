"""Figures of a run directory, one PNG per concern, drawn from ``metrics.jsonl`` and ``trajectories/``.

The figures follow the paper's: faint per-step values under a bold exponential moving average with
``alpha = 0.25`` (T1 Figs. 6-8), a dashed rule at EV = 0 (Fig. 7), the log-prob gap as points with and without
routing replay (Fig. 6, Eq. 15), turns and tokens per trajectory (Fig. 13). Each figure is drawn from the keys
the rows carry; a figure whose metrics no row has is skipped with a note naming them, never a crash.

===================  =====================================================================================
``reward.png``       mean dense reward of the admitted trials (``reward_mean``, Fig. 8) and the passed
                     assertions per trajectory beside the total (``assertions_passed_mean``, T1 §5)
``critic_ev.png``    every explained-variance key of the critic (``critic/explained_variance``,
                     ``critic/ev_*`` per token and per trajectory, pre/post), warm-up steps left of 0 (Fig. 7)
``logprob_gap.png``  ``actor/logprob_gap_*`` (replay, no replay) where measured, every
                     ``trainer.logprob_gap_every`` steps, and their means (Fig. 6)
``turns_tokens.png`` turns and tokens per trajectory: the step means and every finished trial (Fig. 13)
``retention.png``    fraction of launched trials admitted, per task family (``retention_by_family``, §10)
``failures.png``     stacked bars per step: reward fallbacks by cause, trial failures by stage, and the
                     launched trials' outcomes (admitted, finished late, failed, cancelled)
===================  =====================================================================================

matplotlib is imported inside the drawing function with the Agg backend, so importing this module costs
nothing and no display is needed. PPO rows are plotted against their step; critic warm-up rows appear only in
the EV figure; evaluation rows are not plotted. `plot_compare` draws the reward curves of several runs (an arm
and its control, ablations) on shared axes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EMA_ALPHA = 0.25
"""Smoothing of the bold lines, ``ema_t = alpha * x_t + (1 - alpha) * ema_{t-1}`` (T1 Figs. 6-8)."""


class RunDirError(ValueError):
    """A run directory that cannot be plotted: no ``metrics.jsonl``, an empty one, or a malformed line."""


@dataclass
class PlotReport:
    """What `plot_run` did.

    Attributes:
        written: the PNG files written, in figure order.
        notes: one line per figure skipped or per panel left empty, saying which metric was missing.
    """

    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RunData:
    """The rows and trial records of one run, split by phase.

    Attributes:
        ppo: PPO metrics rows in file order.
        warmup: critic warm-up rows in file order.
        trials: PPO step -> that step's trial records (``trajectories/step-NNNN/*.json``).
    """

    ppo: list[dict[str, Any]]
    warmup: list[dict[str, Any]]
    trials: dict[int, list[dict[str, Any]]]


def load_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Read ``metrics.jsonl`` of a run directory, one JSON object per non-blank line.

    Raises:
        RunDirError: ``run_dir`` is not a directory, has no ``metrics.jsonl``, the file holds no row, or a
            line is not a JSON object (the message names the file and the 1-based line number).
    """
    if not run_dir.is_dir():
        raise RunDirError(
            f"{run_dir}: not a directory (give a run directory such as runs/<name>-<time>-<hash>)"
        )
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise RunDirError(f"{path}: no metrics.jsonl in this directory; is it a run directory of t1 train?")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RunDirError(f"{path}:{number}: not a JSON line ({exc.msg} at column {exc.colno})") from None
        if not isinstance(row, dict):
            raise RunDirError(
                f"{path}:{number}: a metrics line must be a JSON object, got {type(row).__name__}"
            )
        rows.append(row)
    if not rows:
        raise RunDirError(f"{path}: empty, no step was logged (did the run stop before its first step?)")
    return rows


def load_run(run_dir: Path) -> tuple[RunData, list[str]]:
    """The run's rows by phase and its PPO trial records; unreadable trial files are skipped with a note.

    Raises:
        RunDirError: as `load_metrics`.
    """
    rows = load_metrics(run_dir)
    notes: list[str] = []
    trials: dict[int, list[dict[str, Any]]] = {}
    for folder in sorted((run_dir / "trajectories").glob("step-*")):
        try:
            step = int(folder.name.removeprefix("step-"))
        except ValueError:
            continue
        for path in sorted(folder.glob("*.json")):
            try:
                trials.setdefault(step, []).append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, json.JSONDecodeError) as exc:
                notes.append(f"skipped trial record {path}: {exc}")
    ppo = [r for r in rows if r.get("phase", "ppo") == "ppo" and isinstance(r.get("step"), int)]
    warmup = [r for r in rows if r.get("phase") == "critic_warmup" and isinstance(r.get("step"), int)]
    return RunData(ppo=ppo, warmup=warmup, trials=trials), notes


def ema(values: Iterable[float], alpha: float = EMA_ALPHA) -> list[float]:
    """Exponential moving average from the first value: ``e_0 = x_0``, ``e_t = a x_t + (1-a) e_{t-1}``."""
    out: list[float] = []
    for x in values:
        out.append(x if not out else alpha * x + (1 - alpha) * out[-1])
    return out


def series(rows: list[dict[str, Any]], key: str, sub: str | None = None) -> tuple[list[int], list[float]]:
    """``(steps, values)`` of ``row[key]`` (or ``row[key][sub]``) over the rows that carry a finite number."""
    xs, ys = [], []
    for row in rows:
        value = row.get(key)
        if sub is not None:
            value = value.get(sub) if isinstance(value, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            xs.append(row["step"])
            ys.append(float(value))
    return xs, ys


def _keys(rows: list[dict[str, Any]], keep: Callable[[str], bool]) -> list[str]:
    """Top-level keys of any row that ``keep`` accepts, in first-seen order."""
    return list(dict.fromkeys(k for row in rows for k in row if keep(k)))


def _nested_keys(rows: list[dict[str, Any]], key: str) -> list[str]:
    """Keys of the dict ``key`` over all rows, sorted (families, causes, stages)."""
    return sorted({k for row in rows if isinstance(row.get(key), dict) for k in row[key]})


def _smoothed(ax: Any, xs: list[int], ys: list[float], label: str, color: str | None = None) -> None:
    """The paper's style: per-step values faint, their EMA bold (T1 Figs. 6-8)."""
    (line,) = ax.plot(xs, ys, marker="o", markersize=3, alpha=0.35, linewidth=1, color=color)
    ax.plot(xs, ema(ys), linewidth=2.2, color=line.get_color(), label=label)


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, wrap=True, fontsize=9)


def _reward(plt: Any, run: RunData, notes: list[str]) -> Any:
    xs, ys = series(run.ppo, "reward_mean")
    if not xs:
        notes.append("skipped reward.png: no PPO row has a number for reward_mean")
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    _smoothed(left, xs, ys, f"EMA (alpha={EMA_ALPHA})")
    left.set(title="Mean dense reward (admitted trials)", xlabel="PPO step", ylabel="reward")
    left.legend(fontsize=8)
    px, py = series(run.ppo, "assertions_passed_mean")
    tx, ty = series(run.ppo, "assertions_total_mean")
    if px:
        _smoothed(right, px, py, "passed (EMA)")
        if tx:
            right.plot(tx, ty, linestyle="--", color="gray", label="total in the task")
        right.legend(fontsize=8)
    else:
        notes.append("reward.png: no row has assertions_passed_mean; its panel is empty")
        _empty(right, "no assertions_passed_mean in the rows")
    right.set(title="Assertions per trajectory", xlabel="PPO step", ylabel="assertions")
    return fig


EV_NOT_DUPLICATED = {"critic/explained_variance": "critic/ev_token_pre"}
"""A legacy key dropped from the EV figure where the key it equals by definition is present
(`t1_trainer.step`: ``critic/explained_variance`` is the pre-update per-token EV)."""


def _is_ev(key: str) -> bool:
    """An explained-variance key of the critic; ``critic/ev_post_time_s`` (seconds) is none."""
    ev = "explained_variance" in key or key.startswith("critic/ev_")
    return key.startswith("critic/") and ev and not key.endswith("_s")


def _critic_ev(plt: Any, run: RunData, notes: list[str]) -> Any:
    rows = run.warmup + run.ppo
    keys = [k for k in _keys(rows, _is_ev) if EV_NOT_DUPLICATED.get(k) not in _keys(rows, _is_ev)]
    if not keys:
        notes.append("skipped critic_ev.png: no critic/explained_variance or critic/ev_* key in any row")
        return None
    n_warm = len(run.warmup)
    fig, ax = plt.subplots(figsize=(8, 3.8))
    lowest = 0.0
    for key in keys:
        wx, wy = series(run.warmup, key)
        px, py = series(run.ppo, key)
        xs = [x - n_warm for x in wx] + px  # warm-up steps sit left of 0, where PPO starts
        ys = wy + py
        if xs:
            _smoothed(ax, xs, ys, key.removeprefix("critic/"))
            lowest = min(lowest, *ys)
        else:
            notes.append(
                f"critic_ev.png: {key} is never a number (EV is undefined when returns are constant)"
            )
    ax.axhline(0.0, linestyle="--", color="black", linewidth=0.8)
    if n_warm:
        ax.axvline(-0.5, color="gray", linewidth=0.8)
        ax.text(-0.4, 1.0, " PPO", transform=ax.get_xaxis_transform(), va="top", fontsize=8, color="gray")
    if lowest < -1.0:  # a cold critic starts far below 0 (the paper's -33.6); keep [-1, 1] readable
        ax.set_yscale("symlog", linthresh=1.0)
    ax.set(title="Critic explained variance (Eq. 19)", xlabel="step (critic warm-up < 0 <= PPO)", ylabel="EV")
    ax.legend(fontsize=8)
    return fig


def _logprob_gap(plt: Any, run: RunData, notes: list[str]) -> Any:
    keys = _keys(run.ppo, lambda k: k.startswith("actor/logprob_gap_"))
    measured = {k: series(run.ppo, k) for k in keys}
    measured = {k: v for k, v in measured.items() if v[0]}
    if not measured:
        notes.append(
            "skipped logprob_gap.png: no actor/logprob_gap_* value in any PPO row (measured every "
            "trainer.logprob_gap_every steps)"
        )
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [2, 1]})
    for key, (xs, ys) in measured.items():
        left.plot(xs, ys, marker="o", linestyle="none", label=key.removeprefix("actor/logprob_gap_"))
    if all(y > 0 for _, ys in measured.values() for y in ys):
        left.set_yscale("log")
    left.set(title="Train-inference |d log p| (Eq. 15)", xlabel="PPO step", ylabel="mean |d log p|")
    left.legend(fontsize=8)
    names = [k.removeprefix("actor/logprob_gap_") for k in measured]
    means = [sum(ys) / len(ys) for _, ys in measured.values()]
    right.bar(names, means, color=[f"C{i}" for i in range(len(names))])
    right.set(title="Mean over the measured steps", ylabel="mean |d log p|")
    return fig


def _trial_tokens(trial: dict[str, Any]) -> int | None:
    samples = trial.get("samples")
    if not samples:
        return None
    return sum(int(s.get("tokens", 0)) for s in samples)


def _turns_tokens(plt: Any, run: RunData, notes: list[str]) -> Any:
    turns, tokens = series(run.ppo, "turns_mean"), series(run.ppo, "tokens_mean")
    finished = {s: [t for t in ts if t.get("status") == "finished"] for s, ts in run.trials.items()}
    if not turns[0] and not tokens[0] and not any(finished.values()):
        notes.append("skipped turns_tokens.png: no turns_mean, tokens_mean or finished trial record")
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (xs, ys), per_trial, what in (
        (axes[0], turns, lambda t: t.get("turns"), "turns"),
        (axes[1], tokens, _trial_tokens, "tokens"),
    ):
        points = [(s, per_trial(t)) for s, ts in finished.items() for t in ts if per_trial(t) is not None]
        if points:
            ax.scatter(
                *zip(*points, strict=True), s=10, alpha=0.35, color="gray", label="each finished trial"
            )
        if xs:
            _smoothed(ax, xs, ys, f"{what}_mean per step (EMA)")
        if not xs and not points:
            notes.append(f"turns_tokens.png: no {what}_mean and no trial record; its panel is empty")
            _empty(ax, f"no {what} in the rows or trial records")
        else:
            ax.legend(fontsize=8)
        ax.set(title=f"{what.capitalize()} per trajectory", xlabel="PPO step", ylabel=what)
    return fig


def _retention(plt: Any, run: RunData, notes: list[str]) -> Any:
    families = _nested_keys(run.ppo, "retention_by_family")
    if not families:
        notes.append("skipped retention.png: no retention_by_family in any PPO row")
        return None
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for family in families:
        xs, ys = series(run.ppo, "retention_by_family", family)
        ax.plot(xs, ys, marker="o", markersize=4, label=family)
    ax.set_ylim(-0.05, 1.05)
    ax.set(title="Retention by family (admitted / launched, T1 §10)", xlabel="PPO step", ylabel="fraction")
    ax.legend(fontsize=7, ncol=2)
    return fig


def _stacked(ax: Any, rows: list[dict[str, Any]], key: str, what: str) -> bool:
    """Stacked bars of the dict ``key`` per step; False (and a note in the axes) when it is always empty."""
    causes = list(dict.fromkeys(c for r in rows if isinstance(r.get(key), dict) for c in r[key]))
    if key != "outcomes":  # causes sorted; the outcomes keep their order
        causes.sort()
    steps = [r["step"] for r in rows]
    bottom = [0.0] * len(rows)
    for i, cause in enumerate(causes):
        heights = [float((r.get(key) or {}).get(cause, 0) or 0) for r in rows]
        ax.bar(steps, heights, bottom=bottom, label=cause, color=f"C{i % 10}")
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    if not causes:
        _empty(ax, f"no {what} in {len(rows)} step{'s' * (len(rows) != 1)}")
    else:
        ax.legend(fontsize=7)
    return bool(causes)


def _failures(plt: Any, run: RunData, notes: list[str]) -> Any:
    has = {k: any(k in r for r in run.ppo) for k in ("fallbacks", "failures_by_stage", "trials_launched")}
    if not any(has.values()):
        notes.append("skipped failures.png: no fallbacks, failures_by_stage or trial counts in any PPO row")
        return None
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, key, what in (
        (axes[0], "fallbacks", "reward fallback"),
        (axes[1], "failures_by_stage", "failure"),
    ):
        if has[key]:
            _stacked(ax, run.ppo, key, what)
        else:
            notes.append(f"failures.png: no row has {key}; its panel is empty")
            _empty(ax, f"no {key} in the rows")
    axes[0].set(title="Reward fallbacks by cause (admitted)", xlabel="PPO step", ylabel="trials")
    axes[1].set(title="Failed trials by stage", xlabel="PPO step", ylabel="trials")
    outcome_rows = [
        {
            "step": r["step"],
            "outcomes": {
                "admitted": r.get("trials_admitted", 0),
                "finished late": r.get("trials_finished", 0) - r.get("trials_admitted", 0),
                "failed": r.get("trials_failed", 0),
                "cancelled": r.get("trials_cancelled", 0),
            },
        }
        for r in run.ppo
        if "trials_launched" in r
    ]
    if outcome_rows:
        _stacked(axes[2], outcome_rows, "outcomes", "trial")
    else:
        notes.append("failures.png: no row has trial counts; its panel is empty")
        _empty(axes[2], "no trials_launched in the rows")
    axes[2].set(title="Launched trials by outcome", xlabel="PPO step", ylabel="trials")
    return fig


FIGURES: tuple[tuple[str, Callable[[Any, RunData, list[str]], Any]], ...] = (
    ("reward.png", _reward),
    ("critic_ev.png", _critic_ev),
    ("logprob_gap.png", _logprob_gap),
    ("turns_tokens.png", _turns_tokens),
    ("retention.png", _retention),
    ("failures.png", _failures),
)
"""Every figure `plot_run` draws: file name and drawing function (the table of the module docstring)."""


COMPARE_FIGURE = "compare_reward.png"
"""The file `plot_compare` writes: the reward curves of several runs on shared axes."""


def plot_compare(runs: list[tuple[str, Path]], out_dir: Path, *, dpi: int = 80) -> PlotReport:
    """Draw the reward curves of several runs on shared axes, one colour per run (``compare_reward.png``).

    Left: the mean dense reward of the admitted trials per PPO step (``reward_mean``, T1 Fig. 8); right: the
    assertions passed per trajectory (``assertions_passed_mean``, T1 §5). Each run is drawn in the paper's
    style, faint per-step values under their bold EMA (``alpha = 0.25``), so an arm and its control (a
    shuffled-reward run, an ablation) read side by side.

    Args:
        runs: ``(label, run_dir)`` pairs, at least two, labels distinct; each a run directory of
            ``t1 train``.
        out_dir: where the PNG goes (created if missing).
        dpi: resolution of the PNG.

    Returns:
        The `PlotReport`: the file written (none when no run has a PPO row with ``reward_mean``) and a note
        per run that has no reward to draw.

    Raises:
        ValueError: fewer than two runs, or a label given twice.
        RunDirError: a run directory as `load_metrics` refuses it (named), before anything is written.
    """
    if len(runs) < 2:
        raise ValueError(f"plot_compare needs at least two runs, got {len(runs)}")
    labels = [label for label, _ in runs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"plot_compare: labels must be distinct, got {labels}")
    loaded = [(label, load_run(path)[0]) for label, path in runs]
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator

    report = PlotReport()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    try:
        drawn = 0
        for (label, run), (_, path) in zip(loaded, runs, strict=True):
            xs, ys = series(run.ppo, "reward_mean")
            if not xs:
                report.notes.append(f"{label} ({path}): no PPO row has a number for reward_mean")
                continue
            color = f"C{drawn}"
            _smoothed(left, xs, ys, f"{label} (EMA)", color=color)
            px, py = series(run.ppo, "assertions_passed_mean")
            if px:
                _smoothed(right, px, py, f"{label} (EMA)", color=color)
            drawn += 1
        if not drawn:
            return report
        left.set(title="Mean dense reward (admitted trials)", xlabel="PPO step", ylabel="reward")
        right.set(title="Assertions passed per trajectory", xlabel="PPO step", ylabel="assertions")
        for ax in (left, right):
            ax.grid(alpha=0.3)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if ax.lines:
                ax.legend(fontsize=8)
        fig.tight_layout()
        out_dir.mkdir(parents=True, exist_ok=True)
        fig.savefig(out_dir / COMPARE_FIGURE, dpi=dpi)
        report.written.append(out_dir / COMPARE_FIGURE)
    finally:
        plt.close(fig)
    return report


def plot_run(run_dir: Path, out_dir: Path | None = None, *, dpi: int = 80) -> PlotReport:
    """Draw every figure of `FIGURES` that the run's rows allow, one PNG each.

    Args:
        run_dir: a run directory of ``t1 train`` (``metrics.jsonl``, ``trajectories/``).
        out_dir: where the PNGs go (created if missing); default ``run_dir / "plots"``.
        dpi: resolution of the PNGs (80 gives 640-1040 px wide figures).

    Returns:
        The `PlotReport`: files written and notes on what was skipped.

    Raises:
        RunDirError: as `load_metrics`, before anything is written.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator

    run, notes = load_run(run_dir)
    report = PlotReport(notes=notes)
    if not run.ppo:
        report.notes.append(f"{run_dir / 'metrics.jsonl'}: no PPO row (only warm-up or evaluation rows)")
    out = out_dir if out_dir is not None else run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    for name, draw in FIGURES:
        fig = draw(plt, run, report.notes)
        if fig is None:
            continue
        try:
            for ax in fig.axes:
                ax.grid(alpha=0.3)
                if "step" in ax.get_xlabel():  # steps are whole numbers
                    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            fig.tight_layout()
            fig.savefig(out / name, dpi=dpi)
        finally:
            plt.close(fig)
        report.written.append(out / name)
    return report
