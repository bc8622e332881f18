"""The held-out benchmark's table and plot from its JSON lines (`bench_heldout.py`'s OUT/heldout.jsonl).

Run (from the repository root):

    uv run python tools/bench/heldout_report.py OUT/heldout.jsonl [--plot docs/img/learning/heldout.png]
        [--control shuffled]

Prints two Markdown tables per metric (resolved share, mean dense reward): per arm and seed, the held-out
figure at the first and the last evaluation with its 95% Student t interval over tasks and the OLS trend's
p; and per arm against ``--control``, the paired difference over seeds (the last evaluation; the change
from the first), over (seed, task) units at the last evaluation, and over steps per seed, each with its
test's p (`heldout_stats` documents the tests). Then one JSON line: the statistics, as
`heldout_stats.summarize` returns them.

With ``--plot``: held-out resolved share and reward against PPO steps, one line per (arm, seed), each arm's
mean over seeds drawn thick, written as a PNG.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from heldout_stats import summarize  # noqa: E402

METRIC_NAMES = {"resolved": "held-out resolved share", "reward": "held-out mean dense reward"}


def load_rows(path: Path) -> list[dict[str, Any]]:
    """The benchmark's rows; one per (arm, seed, evaluated step).

    Raises:
        SystemExit: the file is missing, holds no row, or a line is not JSON (named with its line number).
    """
    if not path.is_file():
        raise SystemExit(f"{path}: no such file (bench_heldout.py writes OUT/heldout.jsonl)")
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{n}: not a JSON line ({e.msg})") from None
    if not rows:
        raise SystemExit(f"{path}: no rows")
    return rows


def _f(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _p(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.2g}"


def _interval(m: dict[str, Any]) -> str:
    if m["lo"] is None:
        return f"{_f(m['mean'])} (n {m['n']})"
    return f"{_f(m['mean'])} [{_f(m['lo'])}, {_f(m['hi'])}]"


def _paired_cell(p: dict[str, Any]) -> str:
    d = p["diff"]
    return (
        f"{d['mean']:+.3f} (n {p['n']}, {p['above']} above, {p['ties']} ties); "
        f"t-test p {_p(p['t_test']['p'])}, Wilcoxon p {_p(p['wilcoxon']['p'])}"
    )


def run_table(stats: dict[str, Any]) -> str:
    """Markdown: per arm and seed, first and last evaluation with intervals, and the trend."""
    lines = [
        "| arm | seed | start (step) | end (step) | OLS slope per evaluation, p (t) |",
        "|---|---|---|---|---|",
    ]
    for arm in sorted(stats["per_run"]):
        for seed in sorted(stats["per_run"][arm], key=int):
            r = stats["per_run"][arm][seed]
            tr = r.get("trend")
            trend = "fewer than 3 evaluations" if tr is None else f"{tr['slope']:+.4f}, p {_p(tr['p'])}"
            lines.append(
                f"| {arm} | {seed} | {_interval(r['start'])} ({r['start']['step']}) | "
                f"{_interval(r['end'])} ({r['end']['step']}) | {trend} |"
            )
    return "\n".join(lines)


def pair_table(stats: dict[str, Any], control: str) -> str:
    """Markdown: every arm against ``control``, the paired differences and both tests' p."""
    lines = ["| arm - control | over | paired difference; tests (two-sided) |", "|---|---|---|"]
    for key, pair in sorted(stats["arms"].items()):
        a, b = key.split(" - ")
        if control not in (a, b):
            continue
        sign = 1 if b == control else -1
        label = f"{a} - {b}" if sign == 1 else f"{b} - {a} (read with the sign flipped)"
        seeds = pair.get("over_seeds")
        if seeds:
            lines.append(f"| {label} | seeds, last evaluation | {_paired_cell(seeds['end'])} |")
            lines.append(f"| {label} | seeds, change from the first | {_paired_cell(seeds['change'])} |")
        if pair.get("over_tasks"):
            lines.append(f"| {label} | (seed, task), last evaluation | {_paired_cell(pair['over_tasks'])} |")
        for seed, p in sorted(pair["over_steps"].items(), key=lambda kv: int(kv[0])):
            lines.append(f"| {label} | steps after the first, seed {seed} | {_paired_cell(p)} |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], out: Path) -> None:
    """Held-out resolved share and reward against steps: thin lines per (arm, seed), thick arm means."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = sorted({r["arm"] for r in rows})
    colors = dict(zip(arms, plt.get_cmap("tab10").colors, strict=False))
    markers = "osD^vP"
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, metric in zip(axes, ("resolved", "reward"), strict=True):
        for arm in arms:
            seeds = sorted({int(r["seed"]) for r in rows if r["arm"] == arm})
            by_step: dict[int, list[float]] = {}
            for i, seed in enumerate(seeds):
                pts = sorted(
                    (int(r["step"]), r[metric]) for r in rows if r["arm"] == arm and r["seed"] == seed
                )
                xs, ys = [p[0] for p in pts], [p[1] for p in pts]
                ax.plot(xs, ys, color=colors[arm], alpha=0.45, lw=1, marker=markers[i % len(markers)], ms=4)
                for x, y in pts:
                    by_step.setdefault(x, []).append(y)
            xs = sorted(by_step)
            ax.plot(
                xs,
                [sum(by_step[x]) / len(by_step[x]) for x in xs],
                color=colors[arm],
                lw=2.5,
                label=f"{arm} (mean of {len(seeds)} seeds)",
            )
        ax.set_ylim(0.0, 1.0 if metric == "resolved" else None)  # a share: its whole range
        ax.set_xlabel("PPO step")
        ax.set_ylabel(METRIC_NAMES[metric])
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Held-out generated tasks: thin lines one seed each (markers), thick lines the mean")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rows", type=Path, help="bench_heldout.py's OUT/heldout.jsonl")
    ap.add_argument("--plot", type=Path, default=None, help="write the plot here (PNG)")
    ap.add_argument("--control", default="shuffled", help="the arm the others are paired against")
    args = ap.parse_args(argv)
    rows = load_rows(args.rows)
    if args.control not in {r["arm"] for r in rows}:
        ap.error(f"--control {args.control!r}: no such arm in {args.rows}")
    stats = {m: summarize(rows, metric=m) for m in METRIC_NAMES}
    for m, s in stats.items():
        print(f"\n### {METRIC_NAMES[m]}\n\n{run_table(s)}\n\n{pair_table(s, args.control)}")
    if args.plot is not None:
        plot(rows, args.plot)
        print(f"\nplot: {args.plot}")
    print(json.dumps({"bench": "heldout_report", "rows": len(rows), "stats": stats}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
