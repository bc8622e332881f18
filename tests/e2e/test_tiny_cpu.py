"""`t1 train recipes/tiny-cpu.yaml` end to end, shortened to one PPO step (issue 2's main job)."""

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t1.cli import app

sys.path.insert(0, str(Path(__file__).parents[1] / "sandbox_suite"))
import leaks  # noqa: E402  (the sandbox suite's leftovers, looked up on the host)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_tiny_cpu_one_step_writes_the_run_directory(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "train",
            str(REPO / "recipes/tiny-cpu.yaml"),
            "ppo.steps=1",
            "trainer.checkpoint_every=1",
            f"logging.run_root={tmp_path}",
        ],
    )
    assert result.exit_code == 0, result.output
    (run,) = tmp_path.iterdir()
    assert (run / "recipe.yaml").is_file()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1
    row = rows[0]
    # the oversampling scheduler launched 5 trials for a batch of 4 (T1 §7.4 at small scale)
    assert row["trials_launched"] == 5
    assert (
        row["trials_admitted"]
        + row["trials_failed"]
        + row["trials_cancelled"]
        + (row["trials_finished"] - row["trials_admitted"])
        == 5
    )
    assert row["trials_admitted"] >= 1
    # TITO: the loss region is exactly what the sampler emitted (T1 §4.1)
    assert row["tito_drift_loss_region"] == 0.0
    # every sample was drawn by the policy of this step, and publishing advanced the engine's version
    assert set(row["policy_versions"]) == {0}
    assert row["weight_version_after"] == 1
    # replaying the recorded routing on identical weights leaves (almost) no train-inference gap (T1 §4.2)
    assert row["actor/logprob_gap_replay"] < 1e-3
    assert row["samples_aborted_routing"] == 0
    for key in (
        "reward_mean",
        "assertions_passed_mean",
        "fallbacks",
        "parse_failure_rate",
        "turns_mean",
        "tokens_mean",
        "critic/explained_variance",
        "chunks_split",
    ):
        assert key in row
    trajectories = list((run / "trajectories" / "step-0000").glob("*.json"))
    assert len(trajectories) == 5
    admitted = [json.loads(p.read_text()) for p in trajectories]
    assert all(t["status"] in {"finished", "failed", "cancelled"} for t in admitted)
    assert any((run / "verifier").iterdir())
    # the smoke recipe keeps no final weights (trainer.save_final_weights: false): the records stay small
    assert not (run / "weights").exists()
    records = sum(f.stat().st_size for f in run.rglob("*") if f.is_file() and "checkpoints" not in f.parts)
    assert records < 20 * 2**20, f"{records} bytes of records for one step"
    # trainer.checkpoint_every=1: the step's weights are kept as a checkpoint all the same
    checkpoint = run / "checkpoints" / "step-0001" / "weights"
    for name in ("actor.safetensors", "critic.safetensors"):
        assert (checkpoint / name).stat().st_size > 0
    assert json.loads((run / "status.json").read_text())["status"] == "finished"


@pytest.mark.e2e
def test_invalid_recipe_fails_before_any_work(tmp_path):
    result = CliRunner().invoke(
        app, ["train", str(REPO / "recipes/tiny-cpu.yaml"), "ppo.clip_eps=-1", f"logging.run_root={tmp_path}"]
    )
    assert result.exit_code == 2
    assert "ppo.clip_eps" in result.output
    assert not any(tmp_path.iterdir())  # no run directory was created


def _broken_pool(tmp_path: Path) -> Path:
    """A one-task pool whose environment build fails: an infrastructure failure, not the agent's."""
    pool = tmp_path / "pool"
    src = REPO / "packages/t1-tasks/src/t1_tasks/pools/mini/fix-permissions"
    shutil.copytree(src, pool / "fix-permissions")
    (pool / "fix-permissions/environment/Dockerfile").write_text("FROM debian:bookworm-slim\nRUN exit 3\n")
    return pool


@pytest.mark.e2e
def test_a_step_where_no_trial_finishes_fails_the_run_without_scoring_zero(tmp_path):
    runs = tmp_path / "runs"
    args = [
        "train",
        str(REPO / "recipes/tiny-cpu.yaml"),
        f"pool.source={_broken_pool(tmp_path)}",
        "ppo.batch_size=1",
        "rollout.admitted=1",
        "rollout.launched=1",
        f"logging.run_root={runs}",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "no trial finished" in result.output
    (run,) = runs.iterdir()
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "failed" and status["steps_completed"] == 0
    assert not (run / "weights" / "actor.safetensors").exists()
    (traj,) = (run / "trajectories" / "step-0000").glob("*.json")
    record = json.loads(traj.read_text())
    assert record["status"] == "failed" and record["cause"].startswith("sandbox_start")
    assert record["reward"] is None  # an infrastructure failure is never the agent's 0


@pytest.mark.e2e
def test_a_pool_this_machine_lacks_exits_1_and_leaves_no_run_directory(tmp_path):
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        app,
        [
            "train",
            str(REPO / "recipes/tiny-cpu.yaml"),
            f"pool.source={tmp_path / 'nope'}",
            f"logging.run_root={runs}",
        ],
    )
    assert result.exit_code == 1  # a valid recipe, not runnable here: its pool is not on this machine
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("sig", "sigint_ignored"),
    [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGTERM, True)],
    ids=[
        "ctrl-c",
        "sigterm",
        "sigterm-background-job",
    ],  # a script's background job starts with SIGINT ignored
)
def test_ctrl_c_reclaims_sandboxes_and_marks_the_run_interrupted(tmp_path, monkeypatch, sig, sigint_ignored):
    # the run's sandboxes take uids and slots of this test's own (the leak suite's isolation), so that what
    # is left is counted among this run's processes, directories and cgroups only, never another run's
    config = leaks.isolate("local", monkeypatch, tmp_path)
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        leaks.t1_argv(
            sys.executable, config, ["train", str(REPO / "recipes/tiny-cpu.yaml"), f"logging.run_root={runs}"]
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((runs).glob("*/trajectories/step-0000/*.json")):
        time.sleep(0.2)  # wait until trials are running (the first one has ended)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "Traceback" not in out
    (run,) = runs.iterdir()
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "interrupted"
    assert status["message"].endswith("SIGTERM" if sig == signal.SIGTERM else "Ctrl-C (SIGINT)")
    # every sandbox this run started is gone: no process of its uids (bubblewrap and what ran under it), no
    # sandbox directory, no cgroup (allowing a moment for init to reap the killed launchers); the run took
    # its uids from this test's range (it made the slot directory), so the check looks where they were
    assert Path(config["slot_dir"]).is_dir()
    assert not leaks.settled(config, owners=(proc.pid,)), leaks.leftovers(config, owners=(proc.pid,))


@pytest.mark.e2e
def test_unbuilt_settings_are_all_refused_before_any_work(tmp_path):
    from t1.run import preflight
    from t1_spec import load_recipe

    assert preflight(load_recipe(REPO / "recipes/tiny-cpu.yaml")).problems == ()
    production = preflight(load_recipe(REPO / "recipes/t1-122b.yaml")).problems
    # each production backend is built; what this CPU machine lacks for it is named by its own field
    for part in ("engine.kind 'sglang'", "sandbox.api_key_env", "trainer.device 'cuda'", "plan.tp 2"):
        assert any(line.startswith(part) for line in production), (part, production)
    assert not any("no backend for it is built" in line for line in production), production
    assert not any(line.startswith("tito.repair") for line in production)  # all three repairs are built
    result = CliRunner().invoke(
        app,
        [
            "train",
            str(REPO / "recipes/tiny-cpu.yaml"),
            "pool.category_mix={software-engineering: 1.0}",
            f"logging.run_root={tmp_path}",
        ],
    )
    # refused on every machine, so by the spec: invalid input (exit 2), as `--spec-only` says too
    assert result.exit_code == 2 and "pool.category_mix" in result.output
    assert not any(tmp_path.iterdir())


@pytest.mark.e2e
def test_launching_more_trials_than_the_pool_has_tasks_is_refused(tmp_path):
    runs = tmp_path / "runs"
    result = CliRunner().invoke(
        app,
        [
            "train",
            str(REPO / "recipes/tiny-cpu.yaml"),
            f"pool.source={_broken_pool(tmp_path)}",
            f"logging.run_root={runs}",
        ],
    )
    assert result.exit_code == 1  # the recipe is valid; the pool here is too small for one step
    assert "rollout.launched=5 exceeds the 1 tasks" in result.output
    assert not runs.exists() or not any(runs.iterdir())
