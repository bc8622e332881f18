"""`t1 train` with ``sandbox.kind: daytona`` end to end, on the real SDK against the fake Daytona API.

The fake (``tests/t1_sandbox/daytona_fake.py``, started here on a loopback port) answers the SDK as the
Daytona API and toolbox do and runs each sandbox's commands and its agent PTY on this host under bubblewrap.
Sandboxes are created from a snapshot name (``sandbox.snapshot``), as a pool pre-built for Daytona is: the
fake builds no Dockerfile (a Dockerfile's ``COPY`` context goes to Daytona's object storage, which the fake
does not serve), so the tasks' fixture files are absent and the untrained policy's trials score what their
assertions say. What this run shows is T1's side: every trial gets a sandbox, a shell and a verifier run
through the SDK, the step trains, and every sandbox is deleted.
"""

import json
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t1.cli import app

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "t1_sandbox"))
from daytona_fake import FakeDaytona  # noqa: E402


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the fake Daytona runs commands with bwrap")
def test_one_step_on_daytona_sandboxes_against_the_fake_api_trains_and_deletes_every_sandbox(
    tmp_path, monkeypatch
):
    fake = FakeDaytona(tmp_path / "daytona", image_toolchain=True)
    fake.base.mkdir()
    fake.start()
    monkeypatch.setenv("DAYTONA_API_KEY", "test-key")
    monkeypatch.setenv("DAYTONA_API_URL", fake.url)
    monkeypatch.setenv("T1_RUN_ID", "e2e-daytona-run")
    recipe = tmp_path / "tiny-daytona.yaml"
    recipe.write_text(
        "schema: t1/v1\n"
        f"extends: {REPO / 'recipes' / 'tiny-cpu.yaml'}\n"
        "sandbox:\n  kind: daytona\n  snapshot: t1-mini\n  control_timeout_s: 60\n"
    )
    runs = tmp_path / "runs"
    try:
        result = CliRunner().invoke(
            app,
            [
                "train", str(recipe), "ppo.steps=1", "ppo.batch_size=2", "rollout.launched=2",
                "pool.limit=2", "rollout.max_turns=2", "rollout.max_new_tokens=32",
                "rollout.creation_rate_per_s=3", f"logging.run_root={runs}",
            ],
        )  # fmt: skip
    finally:
        fake.stop()
    assert result.exit_code == 0, result.output
    (run,) = runs.iterdir()
    (row,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert row["trials_launched"] == 2
    assert row["failures_by_stage"].get("sandbox_start", 0) == 0  # every create and shell came up
    assert row["trials_admitted"] >= 1
    creates = fake.calls("create")
    assert len(creates) == 2 and all(body["snapshot"] == "t1-mini" for body in creates)
    assert {body["labels"]["t1.run"] for body in creates} == {"e2e-daytona-run"}  # the run id, from build
    assert len(fake.calls("pty_connect")) == 2  # one persistent shell per trial
    assert fake.live() == [] and sorted(fake.deleted) == sorted(fake.sandboxes)
