"""Outcome checks for find-large-files against the held-out size manifest."""

import json
from pathlib import Path

OUT = Path("/app/large_files.txt")
SIZES = {
    "/app/data/" + p: n for p, n in json.loads(Path(__file__).with_name("sizes.json").read_text()).items()
}
LARGE = sorted((p for p, n in SIZES.items() if n > 1048576), key=lambda p: -SIZES[p])


def listed() -> list[str]:
    return [line for line in OUT.read_text().splitlines() if line.strip()]


def test_list_written():
    assert OUT.is_file()


def test_exactly_the_large_files():
    assert sorted(listed()) == sorted(LARGE)


def test_largest_first():
    assert listed() == LARGE


def test_data_untouched():
    assert {p: Path(p).stat().st_size for p in SIZES if Path(p).is_file()} == SIZES
