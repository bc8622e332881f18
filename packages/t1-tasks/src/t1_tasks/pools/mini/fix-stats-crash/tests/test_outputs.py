"""Outcome checks for fix-stats-crash: the script is run on held-out inputs."""

import statistics
import subprocess
import tempfile
from pathlib import Path


def run(text: str) -> subprocess.CompletedProcess:
    path = Path(tempfile.mkdtemp()) / "data.txt"
    path.write_text(text)
    return subprocess.run(["python3", "/app/stats.py", str(path)], capture_output=True, text=True, timeout=20)


def expected(values: list[float]) -> str:
    return f"count={len(values)} mean={statistics.fmean(values):.3f} median={statistics.median(values):.3f}"


def test_comments_and_blank_lines_do_not_crash():
    proc = run("# header\n1\n\n2\n# note\n3\n")
    assert proc.returncode == 0, proc.stderr


def test_odd_count_summary():
    assert run("# header\n5\n\n1\n3\n").stdout.strip() == expected([5, 1, 3])


def test_even_count_median_is_mean_of_middle_pair():
    assert run("4\n1\n# c\n3\n2\n\n").stdout.strip() == expected([4, 1, 3, 2])


def test_plain_file_unchanged_behaviour():
    assert run("2.5\n7.25\n1\n").stdout.strip() == expected([2.5, 7.25, 1])
