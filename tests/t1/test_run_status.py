"""``status.json`` of a run whose driver died reads ``killed``, not ``running``; a killed run resumes."""

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from t1.run.resume import ResumeError, open_run
from t1.run.run_dir import RunDir
from t1.run.status import driver_alive, read_status

REPO = Path(__file__).resolve().parents[2]
WRITER = """
import sys, time
from pathlib import Path
from t1.run.run_dir import RunDir
RunDir(Path(sys.argv[1])).write_status("running", 3, None)
print("written", flush=True)
time.sleep(600)
"""


@pytest.fixture
def live_driver(tmp_path):
    """A real driver process that wrote ``running`` into ``tmp_path/run`` and waits; killed by the test."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(REPO / "recipes" / "tiny-cpu.yaml", run / "recipe.yaml")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(run)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "written"
    yield proc, run
    proc.kill()
    proc.wait(timeout=30)


def test_a_live_drivers_run_reads_running_and_is_not_resumed_by_a_second_driver(live_driver):
    proc, run = live_driver
    state = read_status(run)
    assert state["status"] == "running" and state["driver"]["pid"] == proc.pid
    assert driver_alive(state) is True
    with pytest.raises(ResumeError, match=f"still running \\(driver pid {proc.pid}"):
        open_run(run)


def test_after_kill_9_of_its_driver_the_run_reads_killed_and_resumes_past_the_liveness_check(live_driver):
    proc, run = live_driver
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert json.loads((run / "status.json").read_text())["status"] == "running"  # as the dead driver left it
    state = read_status(run)
    assert state["status"] == "killed" and state["steps_completed"] == 3
    assert f"pid {proc.pid}" in state["message"] and "--resume" in state["message"]
    with pytest.raises(ResumeError, match="no checkpoint"):  # the next check, not a live-driver refusal
        open_run(run)


def test_a_status_from_another_host_or_without_a_driver_is_read_as_written(tmp_path):
    RunDir(tmp_path).write_status("running", 1, None)
    payload = json.loads((tmp_path / "status.json").read_text())
    payload["driver"]["host"] = "another-host"
    (tmp_path / "status.json").write_text(json.dumps(payload))
    assert read_status(tmp_path)["status"] == "running" and driver_alive(payload) is None
    del payload["driver"]
    (tmp_path / "status.json").write_text(json.dumps(payload))
    assert read_status(tmp_path)["status"] == "running"


def test_a_finished_run_of_a_dead_driver_stays_finished(tmp_path):
    RunDir(tmp_path).write_status("finished", 2, None)
    payload = json.loads((tmp_path / "status.json").read_text())
    payload["driver"]["start"] = "1"  # no process of this pid started at tick 1: the driver is gone
    (tmp_path / "status.json").write_text(json.dumps(payload))
    assert read_status(tmp_path)["status"] == "finished"
