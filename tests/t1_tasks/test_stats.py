"""Pool statistics: percentiles as numpy computes them, the suggested S, histograms, the pool report."""

import datetime
import math
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from t1_tasks import ValidationRecord, load_pool, percentile, pool_report, suggested_scale
from t1_tasks.stats import plot_histogram, summarize, text_histogram
from t1_tasks.validation import CheckRecord, TaskRecord


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=500), min_size=1, max_size=60),
    st.floats(min_value=0, max_value=100),
)
def test_percentile_is_numpys_linear_default_on_random_counts(values, q):
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12, abs=1e-9)


def test_percentile_of_unsorted_floats_matches_numpy():
    rng = np.random.default_rng(7)
    for _ in range(50):
        xs = rng.normal(size=int(rng.integers(1, 40))).tolist()
        for q in (0, 10, 50, 90, 99.5, 100):
            assert percentile(xs, q) == pytest.approx(np.percentile(xs, q))


@pytest.mark.parametrize("bad", [-1, 100.5])
def test_percentile_refuses_q_outside_0_100_and_an_empty_sample(bad):
    with pytest.raises(ValueError, match="q must lie in"):
        percentile([1, 2], bad)
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)


def test_suggested_scale_is_ceil_of_p90_and_20_for_a_t1_15k_like_p90():
    # T1 §5.2: S = 20 sits near p90; a p90 of 19.2 rounds up to 20 and an integral p90 stays put.
    assert suggested_scale(19.2) == 20
    assert suggested_scale(20.0) == 20
    assert suggested_scale(0.0) == 1  # reward.scale is an integer >= 1
    with pytest.raises(ValueError):
        suggested_scale(math.nan)


def test_summary_of_a_t1_15k_shaped_sample_has_the_papers_median():
    # Median 4, max 35 as in T1 §5.2; p90 by numpy, independently.
    counts = [4] * 50 + [2, 3] * 10 + list(range(5, 36))
    s = summarize(counts)
    assert (s.median, s.max) == (4.0, 35.0)
    assert s.p90 == pytest.approx(np.percentile(counts, 90))
    assert summarize([]) is None


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(min_value=0, max_value=200)), max_size=80))
def test_text_histogram_counts_sum_to_the_number_of_tasks(counts):
    lines = text_histogram(counts)
    assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == len(counts)
    assert len(lines) <= 21  # 20 bins and the "?" line


def test_text_histogram_bins_one_per_integer_for_a_small_range():
    lines = text_histogram([3, 4, 4, 6, None])
    assert [line.split(" | ")[0].strip() for line in lines] == ["3", "4", "5", "6", "?"]
    assert lines[1].endswith("#" * 40 + " 2")  # the tallest bar fills the width


def _png_chunks(data: bytes) -> list[bytes]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, kinds = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, kind
        kinds.append(kind)
        pos += 12 + length
    return kinds


def test_plot_histogram_writes_a_valid_small_png(tmp_path):
    path = plot_histogram(
        [4, 4, 5, 7], tmp_path / "sub" / "h.png", title="t", p90=6.4, scale=7, recipe_scale=20
    )
    data = path.read_bytes()
    kinds = _png_chunks(data)
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (640, 360)
    assert len(data) < 100_000


def _check(total, source="ctrf", solve=None, verifier=1.0):
    return CheckRecord(
        passed=total, total=total, report_source=source, solve_s=solve, verifier_s=verifier, duration_s=2.0
    )


def test_pool_report_without_a_record_uses_the_static_counts():
    mini = load_pool("builtin:mini")
    r = pool_report(mini, recipe_scale=20)
    counts = [t.n_assertions for t in mini]
    assert r.summary.p90 == pytest.approx(np.percentile(counts, 90))
    assert r.suggested_scale == math.ceil(np.percentile(counts, 90))
    assert r.observed_summary is None and r.per_assertion_report_fraction is None and r.runtimes == {}
    assert sum(r.categories.values()) == len(mini) and r.recipe_scale == 20


def test_pool_report_prefers_observed_counts_and_reads_runtimes_and_report_share():
    mini = load_pool("builtin:mini", limit=3)
    a, b, c = mini.tasks
    rows = (
        TaskRecord(id=a.id, verdict="ok", oracle=_check(30, solve=0.5, verifier=2.0), nop=_check(0)),
        TaskRecord(
            id=b.id, verdict="ok", oracle=_check(1, "reward.txt", solve=1.5, verifier=4.0), nop=_check(0)
        ),
        TaskRecord(id="not-in-pool", verdict="ok", oracle=_check(99), nop=_check(0)),
    )
    record = ValidationRecord(
        pool="x", created=datetime.datetime.now(datetime.UTC), t1_version="0", duration_s=1, tasks=rows
    )
    r = pool_report(mini, record)
    # a: observed 30; b: fell back to reward.txt, so its static count stays; c: not recorded, static.
    assert r.counts == {a.id: 30, b.id: b.n_assertions, c.id: c.n_assertions}
    expected = [30, b.n_assertions, c.n_assertions]
    assert (r.summary.median, r.summary.p90) == pytest.approx(
        (np.percentile(expected, 50), np.percentile(expected, 90))
    )
    assert r.record_tasks == 2 and r.per_assertion_report_fraction == 0.5
    assert r.runtimes["oracle_solve_s"].median == 1.0 and r.runtimes["verifier_s"].max == 4.0
    assert r.observed_summary.n == 1
    data = r.as_json()
    assert {"median", "p90", "max", "suggested_scale", "n_tasks", "categories", "difficulties"} <= data.keys()
    assert data["suggested_scale"] == math.ceil(np.percentile(expected, 90))
