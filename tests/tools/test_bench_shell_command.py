"""The shell-command benchmark (tools/bench/bench_shell_command.py) runs A and B in pairs and ends with its
figures as one JSON line; no assertion on time."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0, reason="the local sandbox needs bubblewrap and root"
)


def test_the_benchmark_pairs_every_round_and_ends_with_one_json_line():
    cmd = [sys.executable, str(ROOT / "tools" / "bench" / "bench_shell_command.py"), "--rounds", "5"]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT, timeout=300)
    row = json.loads(res.stdout.strip().splitlines()[-1])
    assert (row["bench"], row["command"], row["rounds"]) == ("shell_command", "true", 5)
    for name in ("pty_bash_s", "t1_local_shell_s", "t1_over_pty_bash"):
        s = row[name]
        assert 0 < s["min"] <= s["median"] <= s["max"]
