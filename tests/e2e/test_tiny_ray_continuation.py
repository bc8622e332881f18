"""`recipes/tiny-ray-continuation.yaml`: partial-rollout continuation and evaluation on the Ray runtime.

The straggler tail of a full batch is parked on its sandbox host (T1 §10), held across the training and the
publication, and continued first in the next step, whose row counts it as resumed; after every step the
suite is evaluated on the replicas' weights just published (T1 §6), one evaluation row per step. The
trials still parked when the run ends are cancelled on their host and recorded, and no Ray process is left.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTINUATION = REPO / "recipes" / "tiny-ray-continuation.yaml"

pytestmark = [pytest.mark.e2e, pytest.mark.ray]


def test_ray_run_parks_and_continues_its_tail_and_evaluates_every_step(
    tmp_path, monkeypatch, tiny_ray, no_ray_left, rows_of
):
    monkeypatch.chdir(REPO)  # the recipe names its evaluation suite by a path from the repository's root
    run, summary = tiny_ray(tmp_path, ["logging.print_table=false"], CONTINUATION)
    assert summary.steps == 3
    assert json.loads((summary.run_dir / "status.json").read_text())["status"] == "finished"
    rows = rows_of(summary.run_dir)
    ppo = [r for r in rows if r["phase"] == "ppo"]
    assert [r["step"] for r in ppo] == [0, 1, 2]
    assert [r["weight_version_after"] for r in ppo] == [1, 2, 3]

    # continuation rows: what each step parked is what the next one resumed, on the hosts
    assert all("trials_parked" in r and "trials_resumed" in r for r in ppo)
    assert ppo[0]["trials_resumed"] == 0
    for prev, row in zip(ppo, ppo[1:], strict=False):
        assert row["trials_resumed"] == prev["trials_parked"]
        assert row["trials_launched"] == 3
    assert sum(r["trials_parked"] for r in ppo[:2]) >= 1, [r["trials_parked"] for r in ppo]
    # a continued sample may lag one version beyond the step's staleness, never more (async: 1 + 1)
    assert all(r["staleness"] <= 2 for r in ppo)
    histogram = {k for r in ppo for k in r if k.startswith("rollout/staleness_")}
    assert histogram == {f"rollout/staleness_{j}" for j in range(3)}

    # a parked trial's record is written in the step it parked in, and its whole one where it ended
    records = {}
    for p in sorted((summary.run_dir / "trajectories").glob("step-*/*.json")):
        records.setdefault(p.stem, []).append(json.loads(p.read_text()))
    parked = [rs for rs in records.values() if rs[0]["status"] == "parked"]
    assert parked
    for rs in parked:
        assert rs[-1]["status"] in ("finished", "failed", "cancelled"), rs[-1]
        assert len(rs[-1]["steps"]) == 2 and rs[-1]["resumes"] == 1
    end = [r for r in rows if r["phase"] == "continuation_end"]
    if ppo[-1]["trials_parked"]:
        (released,) = end
        assert released["trials_released"] == ppo[-1]["trials_parked"]

    # evaluation rows: one per step, on the weights that step published
    evals = [r for r in rows if r["phase"] == "evaluation"]
    assert [(r["step"], r["weight_version"]) for r in evals] == [(0, 1), (1, 2), (2, 3)]
    for r in evals:
        assert r["suite"] == "recipes/suites/tiny-eval" and r["tasks"] == 1
        assert r["trials"] + r["failed"] == 1
    assert (summary.run_dir / "evaluation" / "step-0002").is_dir()
    no_ray_left(run)
