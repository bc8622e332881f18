"""The head-and-tail capture of test.sh's output, run by bash on this host (no sandbox needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from t1_rollout.verifier_capture import INNER_TIMEOUT_MARK, TIMEOUT_EXIT, capture_command, inner_deadline


def _run(script: Path, body: str, *, deadline_s: int = 60, cap: int = 8192) -> subprocess.CompletedProcess:
    script.write_text("#!/bin/bash\n" + body)
    line = capture_command(f"bash {script}", deadline_s, cap)
    return subprocess.run(["bash", "-c", line], capture_output=True, timeout=60)


def test_a_flood_before_the_closing_line_keeps_head_and_tail(tmp_path):
    body = (
        'echo "== test session starts =="; head -c 100000 /dev/zero | tr "\\0" x; echo\n'
        'echo "== 1 passed in 0.1s =="; exit 3\n'
    )
    done = _run(tmp_path / "t.sh", body)
    out = done.stdout.decode()
    assert done.returncode == 3 and len(out) < 8192
    assert out.startswith("== test session starts ==")
    assert out.rstrip().endswith("== 1 passed in 0.1s ==")
    assert "bytes omitted: over the" in out


def test_short_output_is_kept_whole_in_order(tmp_path):
    done = _run(tmp_path / "t.sh", "echo out; echo err >&2; echo out2\n")
    assert (done.returncode, done.stdout.decode()) == (0, "out\nerr\nout2\n")


def test_a_background_process_holding_the_output_does_not_hold_the_verifier(tmp_path):
    started = time.monotonic()
    pid_file = tmp_path / "bg.pid"
    done = _run(tmp_path / "t.sh", f"echo hi\nsleep 30 &\necho $! > {pid_file}\nexit 0\n")
    try:
        assert done.stdout.decode().startswith("hi") and time.monotonic() - started < 20
    finally:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)  # the background sleep this test started


def test_a_command_past_its_inner_deadline_keeps_its_output_and_says_so(tmp_path):
    done = _run(tmp_path / "t.sh", "echo slow\nsleep 30\n", deadline_s=1)
    out = done.stdout.decode()
    assert (
        done.returncode == TIMEOUT_EXIT
        and out.startswith("slow")
        and out.rstrip().endswith(INNER_TIMEOUT_MARK)
    )
    assert inner_deadline(900) == 870 and inner_deadline(10) == 9
