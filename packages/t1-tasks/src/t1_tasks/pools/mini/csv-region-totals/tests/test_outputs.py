"""Outcome checks for csv-region-totals: the expected totals are recomputed from a held-out copy of the data."""

import csv
from decimal import Decimal
from pathlib import Path

OUT = Path("/app/region_totals.csv")


def expected() -> dict[str, Decimal]:
    totals: dict[str, Decimal] = {}
    with open(Path(__file__).with_name("sales.csv")) as fh:
        for row in csv.DictReader(fh):
            totals[row["region"]] = totals.get(row["region"], Decimal(0)) + int(row["units"]) * Decimal(
                row["unit_price"]
            )
    return totals


def rows() -> list[list[str]]:
    return [line.split(",") for line in OUT.read_text().strip().splitlines()]


def test_output_has_header():
    assert OUT.is_file(), "region_totals.csv was not written"
    assert rows()[0] == ["region", "revenue"]


def test_every_region_once():
    names = [r[0] for r in rows()[1:]]
    assert sorted(names) == sorted(expected())


def test_revenues_are_exact_with_two_decimals():
    want = expected()
    for region, revenue in rows()[1:]:
        assert revenue == f"{want[region]:.2f}", region


def test_sorted_by_revenue_descending():
    values = [Decimal(r[1]) for r in rows()[1:]]
    assert len(values) == len(expected())
    assert values == sorted(values, reverse=True)
