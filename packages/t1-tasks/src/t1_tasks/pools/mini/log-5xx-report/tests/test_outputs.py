"""Outcome checks for log-5xx-report against counts recomputed from a held-out copy of the log."""

import re
from collections import Counter
from pathlib import Path

OUT = Path("/app/report.txt")
LINE = re.compile(r'"[A-Z]+ (\S+) HTTP/[0-9.]+" (\d{3}) ')


def expected() -> list[tuple[int, str]]:
    counts: Counter[str] = Counter()
    for line in Path(__file__).with_name("access.log").read_text().splitlines():
        m = LINE.search(line)
        if m and 500 <= int(m.group(2)) <= 599:
            counts[m.group(1).split("?")[0]] += 1
    return sorted(((c, p) for p, c in counts.items()), key=lambda cp: (-cp[0], cp[1]))


def report() -> list[tuple[int, str]]:
    out = []
    for line in OUT.read_text().strip().splitlines():
        count, path = line.split()
        out.append((int(count), path))
    return out


def test_report_written():
    assert OUT.is_file() and OUT.read_text().strip(), "report.txt missing or empty"


def test_paths_with_server_errors():
    assert sorted(p for _, p in report()) == sorted(p for _, p in expected())


def test_counts_per_path():
    assert dict((p, c) for c, p in report()) == dict((p, c) for c, p in expected())


def test_order_count_desc_then_path():
    assert report() == expected()
