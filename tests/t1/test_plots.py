"""`t1 plot`: one PNG per concern from a run directory, skipped figures noted, bad inputs named."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from t1.cli import app
from t1.plots import COMPARE_FIGURE, FIGURES, RunDirError, ema, load_metrics, plot_compare, plot_run, series

# Two rows of a real `t1 train recipes/tiny-cpu.yaml` run, as metrics.jsonl wrote them.
REAL_ROWS = [
    json.loads(line)
    for line in (Path(__file__).parent / "data" / "tiny_cpu_metrics.jsonl").read_text().splitlines()
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _rows(n_ppo: int = 4, n_warm: int = 2) -> list[dict]:
    """Rows shaped like the real ones: warm-up rows, then PPO rows with varied values and causes."""
    rows = []
    for w in range(n_warm):
        row = copy.deepcopy(REAL_ROWS[0])
        row.update(phase="critic_warmup", step=w)
        row["critic/explained_variance"] = -30.0 + 10 * w
        rows.append(row)
    for s in range(n_ppo):
        row = copy.deepcopy(REAL_ROWS[s % len(REAL_ROWS)])
        row.update(step=s, reward_mean=0.05 * s)
        row["fallbacks"] = {"no_report": s % 2}
        row["failures_by_stage"] = {"sandbox": 1} if s == 2 else {}
        if s % 2:  # the gap is measured every trainer.logprob_gap_every steps only
            row.pop("actor/logprob_gap_replay", None)
            row.pop("actor/logprob_gap_no_replay", None)
        rows.append(row)
    return rows


def _run_dir(tmp_path: Path, rows: list[dict], trials: bool = True) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if trials:
        for s in range(2):
            folder = run / "trajectories" / f"step-{s:04d}"
            folder.mkdir(parents=True)
            for i, status in enumerate(("finished", "finished", "cancelled")):
                record = {"status": status, "turns": 3 + i, "samples": [{"chunk": 0, "tokens": 600 + 10 * i}]}
                (folder / f"t{i}.json").write_text(json.dumps(record))
    return run


def test_ema_is_the_papers_recurrence_with_alpha_a_quarter():
    # e0 = x0; e1 = 0.25*1 + 0.75*0 = 0.25; e2 = 0.25*1 + 0.75*0.25 = 0.4375 (T1 Figs. 6-8, alpha = 0.25)
    assert ema([0.0, 1.0, 1.0]) == pytest.approx([0.0, 0.25, 0.4375])


def test_every_figure_is_a_valid_png_of_the_declared_size(tmp_path):
    run = _run_dir(tmp_path, _rows())
    report = plot_run(run, tmp_path / "out", dpi=50)
    assert [p.name for p in report.written] == [name for name, _ in FIGURES]
    for path in report.written:
        assert path.read_bytes()[:8] == PNG_MAGIC
        with Image.open(path) as img:
            img.verify()
    with Image.open(tmp_path / "out" / "reward.png") as img:
        assert img.size == (10 * 50, int(3.6 * 50))  # figsize (10, 3.6) inches at 50 dpi


def test_default_output_folder_is_plots_inside_the_run(tmp_path):
    run = _run_dir(tmp_path, _rows(), trials=False)
    report = plot_run(run)
    assert {p.parent for p in report.written} == {run / "plots"}


def test_logprob_gap_points_only_at_the_steps_that_measured_it(tmp_path):
    rows = [r for r in _rows() if r["phase"] == "ppo"]
    assert series(rows, "actor/logprob_gap_replay")[0] == [0, 2]
    assert series(rows, "retention_by_family", "debugging")[0] == [0, 2]  # step-1 rows lack the family


def test_a_missing_metric_skips_its_figure_with_a_note(tmp_path):
    rows = _rows()
    for row in rows:
        for key in [k for k in row if k.startswith("actor/logprob_gap_")] + ["retention_by_family"]:
            row.pop(key, None)
        row.pop("assertions_passed_mean")
    report = plot_run(_run_dir(tmp_path, rows), tmp_path / "out")
    written = {p.name for p in report.written}
    assert "logprob_gap.png" not in written and "retention.png" not in written
    assert {"reward.png", "critic_ev.png", "turns_tokens.png", "failures.png"} <= written
    assert not (tmp_path / "out" / "logprob_gap.png").exists()
    notes = " ".join(report.notes)
    assert (
        "actor/logprob_gap_" in notes and "retention_by_family" in notes and "assertions_passed_mean" in notes
    )


def test_plot_names_the_malformed_line(tmp_path):
    run = _run_dir(tmp_path, _rows(n_ppo=2, n_warm=0), trials=False)
    with (run / "metrics.jsonl").open("a") as fh:
        fh.write('{"phase": "ppo", "step": 2, "reward_mean": \n')
    with pytest.raises(RunDirError, match=r"metrics\.jsonl:3: not a JSON line"):
        load_metrics(run)
    (run / "metrics.jsonl").write_text('{"step": 0}\n[1, 2]\n')
    with pytest.raises(RunDirError, match=r"metrics\.jsonl:2: .*JSON object"):
        load_metrics(run)


@pytest.mark.parametrize("case", ["no_dir", "no_metrics", "empty"])
def test_plot_refuses_what_is_not_a_run_directory(tmp_path, case):
    run = tmp_path / "run"
    if case != "no_dir":
        run.mkdir()
    if case == "empty":
        (run / "metrics.jsonl").write_text("\n")
    want = {"no_dir": "not a directory", "no_metrics": "no metrics.jsonl", "empty": "empty"}[case]
    with pytest.raises(RunDirError, match=want):
        plot_run(run, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing written before the input is known good
    result = CliRunner().invoke(app, ["plot", str(run)])
    assert result.exit_code == 2 and want in result.output


def test_cli_writes_the_figures_and_prints_the_notes(tmp_path):
    rows = _rows()
    for row in rows:
        row.pop("retention_by_family")
    result = CliRunner().invoke(app, ["plot", str(_run_dir(tmp_path, rows)), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "o" / "reward.png").read_bytes()[:8] == PNG_MAGIC
    assert "note" in result.output and "retention_by_family" in result.output


def test_cli_fails_when_no_figure_can_be_drawn(tmp_path):
    run = _run_dir(tmp_path, [{"phase": "ppo", "step": 0}, {"phase": "ppo", "step": 1}], trials=False)
    result = CliRunner().invoke(app, ["plot", str(run)])
    assert result.exit_code == 1 and "no figure" in result.output


def _arm(tmp_path: Path, name: str, rewards: list[float]) -> Path:
    rows = []
    for s, r in enumerate(rewards):
        row = copy.deepcopy(REAL_ROWS[0])
        row.update(step=s, reward_mean=r, assertions_passed_mean=20 * r)
        rows.append(row)
    folder = tmp_path / name
    folder.mkdir()
    _run_dir(folder, rows, trials=False)
    return folder / "run"


def test_compare_draws_each_runs_own_reward_curve(tmp_path, monkeypatch):
    import t1.plots as plots

    drawn = []
    real = plots._smoothed
    monkeypatch.setattr(
        plots,
        "_smoothed",
        lambda ax, xs, ys, label, color=None: (drawn.append((label, ys)), real(ax, xs, ys, label, color)),
    )
    learn = _arm(tmp_path, "a", [0.10, 0.12, 0.15])
    control = _arm(tmp_path, "b", [0.10, 0.09, 0.10])
    report = plot_compare([("learn", learn), ("shuffled", control)], tmp_path / "out", dpi=50)
    assert report.written == [tmp_path / "out" / COMPARE_FIGURE]
    with Image.open(report.written[0]) as img:
        assert img.size == (10 * 50, int(3.6 * 50))
    assert drawn == [
        ("learn (EMA)", [0.10, 0.12, 0.15]),
        ("learn (EMA)", pytest.approx([2.0, 2.4, 3.0])),
        ("shuffled (EMA)", [0.10, 0.09, 0.10]),
        ("shuffled (EMA)", pytest.approx([2.0, 1.8, 2.0])),
    ]


def test_compare_notes_a_run_without_reward_and_refuses_bad_input(tmp_path):
    learn = _arm(tmp_path, "a", [0.1, 0.2])
    empty = _run_dir(tmp_path, [{"phase": "ppo", "step": 0}], trials=False)
    report = plot_compare([("learn", learn), ("broken", empty)], tmp_path / "out")
    assert report.written and "broken" in report.notes[0] and "reward_mean" in report.notes[0]
    with pytest.raises(ValueError, match="at least two runs"):
        plot_compare([("learn", learn)], tmp_path / "out")
    with pytest.raises(ValueError, match="distinct"):
        plot_compare([("x", learn), ("x", empty)], tmp_path / "out")
    with pytest.raises(RunDirError, match="not a directory"):
        plot_compare([("learn", learn), ("gone", tmp_path / "gone")], tmp_path / "out2")
    assert not (tmp_path / "out2").exists()


def test_cli_compares_runs_with_labels(tmp_path):
    a, b = _arm(tmp_path, "a", [0.1, 0.2]), _arm(tmp_path, "b", [0.1, 0.1])
    out = tmp_path / "o"
    ok = CliRunner().invoke(
        app, ["plot", str(a), str(b), "--out", str(out), "--label", "learn", "--label", "ctl"]
    )
    assert ok.exit_code == 0, ok.output
    assert (out / COMPARE_FIGURE).read_bytes()[:8] == PNG_MAGIC
    no_out = CliRunner().invoke(app, ["plot", str(a), str(b)])
    assert no_out.exit_code == 2 and "--out" in no_out.output
    one_label = CliRunner().invoke(app, ["plot", str(a), str(b), "--out", str(out), "--label", "learn"])
    assert one_label.exit_code == 2 and "one per run" in one_label.output
