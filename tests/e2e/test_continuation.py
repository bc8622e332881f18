"""The tiny CPU recipe with partial-rollout continuation on (T1 §10): continued trials are trained on, and
nothing leaks, whether the run ends or is stopped while trials are parked."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "sandbox_suite"))
sys.path.insert(0, str(Path(__file__).parent))
import leaks  # noqa: E402  (the sandbox suite's leftovers, looked up on the host)
import park_gate  # noqa: E402  (which trials park, decided rather than raced)

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "tiny-cpu.yaml"
LAUNCHED, ADMITTED = 5, 2
CONTINUED = [
    "rollout.continuation.enabled=true",
    f"rollout.launched={LAUNCHED}",
    f"ppo.batch_size={ADMITTED}",
    f"rollout.concurrency={LAUNCHED}",
    # Which trials park is decided by `park_gate` (the first batch's last three to start are held after one
    # turn until the batch is full; in the next batch one of them ends first), not by a race: every episode
    # is two turns. The deadlines are only a bound: a held trial's wait counts as agent time (four minutes
    # did run out on a loaded box), so no deadline may end an episode that the gate holds.
    "rollout.max_turns=2",
    "rollout.max_new_tokens=128",
    "rollout.agent_deadline_s=1800",
    "rollout.remote_deadline_s=2400",
    "logging.print_table=false",
]
GATED = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); import park_gate; "
    f"park_gate.install({LAUNCHED}, {ADMITTED}); "
)
"""Prefix of a ``python -c`` program: its trials park as `park_gate` decides (the gate's folder: argv[1])."""


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.e2e
def test_continued_trials_are_admitted_with_mixed_versions_and_trained_on_and_nothing_leaks(
    tmp_path, monkeypatch
):
    from t1.run import Run
    from t1_spec import load_recipe

    config = leaks.isolate("local", monkeypatch, tmp_path)  # this test's sandboxes only
    park_gate.install(LAUNCHED, ADMITTED, monkeypatch.setattr)
    runs = tmp_path / "runs"
    recipe = load_recipe(TINY, [*CONTINUED, "ppo.steps=3", f"logging.run_root={runs}"])
    training = Run(recipe, recipe.model_dump(mode="json", by_alias=True))
    summary = training.run()
    assert summary.steps == 3
    # the engine's decode thread is stopped before run() returns: left decoding the cancelled tail into
    # interpreter shutdown, it aborts the process ("terminate called without an active exception")
    assert not training.runtime.parts.engine._loop._thread.is_alive()
    run = summary.run_dir
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    ppo = [r for r in rows if r["phase"] == "ppo"]
    assert [r["step"] for r in ppo] == [0, 1, 2]
    # step 0 parks its tail; steps 1 and 2 continue it first, and admit some of it
    assert ppo[0]["trials_parked"] >= 1 and ppo[0]["trials_resumed"] == 0
    for prev, row in zip(ppo, ppo[1:], strict=False):
        assert row["trials_resumed"] == prev["trials_parked"]
        assert row["trials_launched"] == 5
        table = row["retention_by_family_outcome"].values()
        count = {k: sum(b[k] for b in table) for k in ("launched", "kept", "continued")}
        assert count == {"launched": 5, "kept": row["trials_admitted"], "continued": row["trials_parked"]}
    assert sum(r["trials_resumed_admitted"] for r in ppo) >= 1
    # a continued trial mixing two versions reached the trainer, which trained on it at staleness 1
    mixed_rows = [r for r in ppo if r["samples_versions_mixed"] >= 1]
    assert mixed_rows, [(r["trials_parked"], r["trials_resumed_admitted"]) for r in ppo]
    for r in mixed_rows:
        assert r["staleness"] == 1 and "1" in r["staleness_loss_token_share"]
        assert r["samples_aborted_routing"] == 0 and r["trainer/loss_tokens"] > 0
        assert len(r["sampled_tokens_by_policy_version"]) >= 2
    continued = [
        t
        for p in (run / "trajectories").glob("step-*/*.json")
        if (t := _json(p))["status"] == "finished" and len(t["steps"]) == 2
    ]
    mixed = [t for t in continued if len(set(t["turn_policy_versions"])) == 2]
    assert mixed and all(t["resumes"] == 1 for t in continued)
    for t in mixed:
        v = t["turn_policy_versions"]
        # the turns before the park carry the version of the step it was parked in (sync loop: version = step)
        assert v == sorted(v) and int(t["steps"][0].split("-")[1]) == v[0]
    # what was still parked at the end was cancelled and recorded, and no sandbox is left
    end = [r for r in rows if r["phase"] == "continuation_end"]
    if ppo[-1]["trials_parked"]:
        assert end and end[0]["trials_released"] == ppo[-1]["trials_parked"]
        for trial_id in end[0]["trial_ids"]:
            (p,) = (run / "trajectories").glob(f"step-0002/{trial_id}.json")
            assert "the run ended" in _json(p)["cause"]
    assert not leaks.settled(config), leaks.leftovers(config)
    assert _json(run / "status.json")["status"] == "finished"


@pytest.mark.e2e
def test_a_stop_while_trials_are_parked_reclaims_their_sandboxes_and_records_them(tmp_path, monkeypatch):
    config = leaks.isolate("local", monkeypatch, tmp_path)
    runs = tmp_path / "runs"
    args = ["train", str(TINY), *CONTINUED, f"logging.run_root={runs}"]
    python, flag, program, *rest = leaks.t1_argv(sys.executable, config, args)
    proc = subprocess.Popen(
        [python, flag, GATED + program, str(Path(__file__).parent), *rest],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 900  # a bound only: the gate decides that step 0 parks three
    parked: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None:
        parked = [p for p in runs.glob("*/trajectories/step-0000/*.json") if _json(p)["status"] == "parked"]
        if parked:
            break  # step 0's batch returned with parked trials: the step trains now
        time.sleep(0.2)
    assert parked, "no trial was parked at the end of step 0"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "Traceback" not in out
    (run,) = runs.iterdir()
    assert _json(run / "status.json")["status"] == "interrupted"
    # every trial that was parked ended cancelled, in the step it was last in, its cause saying why
    for p in parked:
        last = sorted(run.glob(f"trajectories/step-*/{p.name}"))[-1]
        record = _json(last)
        assert record["status"] in {"cancelled", "finished"}, record
        if record["status"] == "cancelled":
            assert "cancelled" in record["cause"]
    assert not leaks.settled(config, owners=(proc.pid,)), leaks.leftovers(config, owners=(proc.pid,))
