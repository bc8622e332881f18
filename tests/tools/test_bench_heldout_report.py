"""The held-out benchmark's report (tools/bench/heldout_report.py): its tables, plot and input errors."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _report():
    spec = importlib.util.spec_from_file_location(
        "heldout_report", ROOT / "tools" / "bench" / "heldout_report.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


hr = _report()


def _rows():
    rows = []
    for seed in (0, 1, 2):
        for step in (0, 4, 8):
            lift = 0.25 * step / 4
            for arm, up in (("ppo-critic", lift), ("shuffled", 0.0)):
                per_task = {"a": min(1.0, 0.25 + up), "b": 0.0 + up / 2}
                vals = list(per_task.values())
                rows.append(
                    {
                        "arm": arm,
                        "seed": seed,
                        "step": step,
                        "resolved": sum(vals) / 2,
                        "reward": sum(vals) / 4,
                        "per_task": {t: {"resolved": v, "reward": v / 2} for t, v in per_task.items()},
                    }
                )
    return rows


def test_tables_name_every_run_and_pair_against_the_control(tmp_path, capsys):
    path = tmp_path / "heldout.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    png = tmp_path / "img" / "heldout.png"
    assert hr.main([str(path), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.count("| ppo-critic | ") == 6 and out.count("| shuffled | ") == 6  # 3 seeds x 2 metrics
    assert "| ppo-critic - shuffled | seeds, last evaluation | +0.375 (n 3, 3 above, 0 ties)" in out
    assert "| ppo-critic - shuffled | (seed, task), last evaluation |" in out
    last = json.loads(out.strip().splitlines()[-1])
    assert last["rows"] == 18 and set(last["stats"]) == {"resolved", "reward"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no such file"):
        hr.main([str(tmp_path / "missing.jsonl")])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_rows()[0]) + "\n{oops\n")
    with pytest.raises(SystemExit, match=r"bad.jsonl:2: not a JSON line"):
        hr.main([str(bad)])
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(_rows()[0]) + "\n")
    with pytest.raises(SystemExit):  # argparse's error: no 'shuffled' arm in the file
        hr.main([str(good), "--control", "shuffled"])
