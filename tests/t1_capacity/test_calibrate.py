"""Calibration of alpha and b0 (Eq. 21) by least squares."""

import random
from dataclasses import replace

import pytest

from t1_capacity import (
    GIB,
    PAPER_CONSTANTS,
    PAPER_MODEL,
    CalibrationError,
    CapacityConstants,
    Measurement,
    Plan,
    fit,
    footprint,
    read_measurements,
)

TRUE = CapacityConstants(alpha=73_000.0, b0_gib=2.4)
PLANS = [Plan(tp=2, pp=4, cp=4, dp=2, ep=16, token_wall=w) for w in (16_384, 32_768, 65_536, 86_016)] + [
    Plan(tp=2, pp=4, cp=2, dp=4, ep=16, token_wall=w) for w in (16_384, 49_152)
]


def synthetic(noise_gib: float = 0.0, seed: int = 0) -> list[Measurement]:
    rng = random.Random(seed)
    rows = []
    for plan in PLANS:
        for network in ("actor", "critic"):
            peak = footprint(PAPER_MODEL, plan, TRUE, network).total_bytes / GIB
            rows.append(Measurement(plan, peak + rng.gauss(0, noise_gib), network))
    return rows


def test_recovers_known_constants_exactly():
    cal = fit(PAPER_MODEL, synthetic(), PAPER_CONSTANTS)
    assert cal.alpha == pytest.approx(73_000.0, rel=1e-9)
    assert cal.b0_gib == pytest.approx(2.4, abs=1e-9)
    assert max(abs(r) for r in cal.residuals_gib) < 1e-9


def test_recovers_known_constants_under_noise():
    cal = fit(PAPER_MODEL, synthetic(noise_gib=0.2, seed=3), PAPER_CONSTANTS)
    assert cal.alpha == pytest.approx(73_000.0, rel=0.03)
    assert cal.b0_gib == pytest.approx(2.4, abs=0.3)
    assert 0.05 < cal.rms_gib < 0.4


def test_override_is_a_recipe_dotlist_and_yaml():
    cal = fit(PAPER_MODEL, synthetic(), PAPER_CONSTANTS)
    assert cal.dotlist() == ["plan.alpha=73000.0", "plan.b0_gib=2.400"]
    assert cal.yaml() == "plan:\n  alpha: 73000.0\n  b0_gib: 2.400\n"


def test_one_activation_term_cannot_separate_alpha_from_b0():
    plan = PLANS[0]
    rows = [Measurement(plan, 50.0), Measurement(plan, 51.0)]
    with pytest.raises(CalibrationError, match="same activation term"):
        fit(PAPER_MODEL, rows, PAPER_CONSTANTS)
    with pytest.raises(CalibrationError, match="at least 2"):
        fit(PAPER_MODEL, rows[:1], PAPER_CONSTANTS)


def test_reads_csv_and_names_bad_lines(tmp_path):
    good = tmp_path / "m.csv"
    good.write_text(
        "tp,pp,cp,dp,ep,token_wall,peak_gib,network\n2,4,4,2,16,86016,70.1,actor\n2,4,2,4,16,16384,40,critic\n"
    )
    rows = read_measurements(good, Plan(), PAPER_MODEL)
    assert [r.network for r in rows] == ["actor", "critic"]
    assert rows[0].plan == replace(Plan(), tp=2, pp=4, cp=4, dp=2, ep=16, token_wall=86016)
    bad = tmp_path / "bad.csv"
    bad.write_text("tp,pp,cp,dp,ep,token_wall,peak_gib\n2,5,4,2,16,86016,70\n")
    with pytest.raises(CalibrationError, match=r"bad.csv:2: .*pp=5"):
        read_measurements(bad, Plan(), PAPER_MODEL)
    missing = tmp_path / "missing.csv"
    missing.write_text("tp,pp\n1,1\n")
    with pytest.raises(CalibrationError, match="missing column"):
        read_measurements(missing, Plan(), PAPER_MODEL)


@pytest.mark.parametrize(
    ("row", "words"),
    [
        ("2,4,4,2,16,86016,-70", "peak_gib must be a positive"),
        ("2,4,4,2,16,86016,0", "peak_gib must be a positive"),
        ("2,4,4,2,16,86016,nan", "peak_gib must be a positive"),
        ("2,4,4,2,16,0,70", "token_wall must be a positive"),
        ("2,4,4,2,16,-86016,70", "token_wall must be a positive"),
        ("0,4,4,2,16,86016,70", "plan.tp=0 must be >= 1"),
        ("2,4,-4,2,16,86016,70", "plan.cp=-4 must be >= 1"),
    ],
)
def test_non_positive_peaks_walls_and_plans_are_refused_naming_the_row(tmp_path, row, words):
    csv = tmp_path / "m.csv"
    csv.write_text(f"tp,pp,cp,dp,ep,token_wall,peak_gib\n2,4,4,2,16,32768,52.0\n{row}\n")
    with pytest.raises(CalibrationError, match=r"m\.csv:3: ") as info:
        read_measurements(csv, Plan(), PAPER_MODEL)
    assert words in str(info.value)


def test_peaks_that_shrink_as_activations_grow_are_inconsistent_with_eq21():
    # Two plans whose activation terms differ; the larger one measured *lower*: the slope alpha would be < 0.
    small, large = PLANS[0], PLANS[3]  # token walls 16,384 and 86,016 at cp 4
    rows = [Measurement(small, 80.0), Measurement(large, 60.0)]
    with pytest.raises(CalibrationError, match="inconsistent with Eq. 21") as info:
        fit(PAPER_MODEL, rows, PAPER_CONSTANTS)
    assert "alpha must be > 0" in str(info.value) and "row 2" in str(info.value)


def test_peaks_below_the_static_footprint_give_negative_b0_and_are_refused():
    # Exact Eq. 21 peaks with alpha = 73,000 B but 5 GiB less than weights + grads + optimizer: b0 = -5 GiB.
    rows = [
        Measurement(p, footprint(PAPER_MODEL, p, replace(TRUE, b0_gib=0.0)).total_bytes / GIB - 5.0)
        for p in PLANS
    ]
    with pytest.raises(CalibrationError, match="inconsistent with Eq. 21") as info:
        fit(PAPER_MODEL, rows, PAPER_CONSTANTS)
    assert "b0 = -5.000 GiB" in str(info.value) and "cannot be negative" in str(info.value)


GOOD_ROW = "2,4,4,2,16,32768,52.0"


@pytest.mark.parametrize(
    ("header_extra", "row", "column", "words"),
    [
        ("", "2,4,4,2,16", "token_wall", "fewer fields"),  # short row: was "float() argument ... NoneType"
        ("", "2,4,4,2,16,86016,abc", "peak_gib", "'abc' is not a number"),  # was "could not convert"
        ("", "2,x,4,2,16,86016,70", "pp", "'x' is not an integer"),
        ("", "2,4,4,2,16,86016,", "peak_gib", "empty"),
        (",stage", "2,4,4,2,16,86016,70,9", "stage", "stage 9 out of range for pp=4"),  # had no file/line
        (",stage", "2,4,4,2,16,86016,70,-1", "stage", "out of range"),
        ("", "2,4,4,2,16,86016,1e308", "peak_gib", "more than any device holds"),  # gave b0 = -inf
        ("", "2,4,4,2,16,86016,70,5", "", "beyond the header"),
    ],
)
def test_bad_cells_name_file_line_row_and_column(tmp_path, header_extra, row, column, words):
    csv = tmp_path / "m.csv"
    filler = "," if header_extra else ""
    csv.write_text(f"tp,pp,cp,dp,ep,token_wall,peak_gib{header_extra}\n{GOOD_ROW}{filler}\n{row}\n")
    with pytest.raises(CalibrationError) as info:
        read_measurements(csv, Plan(), PAPER_MODEL)
    msg = str(info.value)
    assert msg.startswith(f"{csv}:3: row 2")  # file, line 3 (header is line 1), second data row
    assert f"column {column}" in msg if column else True
    assert words in msg


def test_line_numbers_count_skipped_blank_lines(tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text(f"tp,pp,cp,dp,ep,token_wall,peak_gib\n{GOOD_ROW}\n\n2,4,4,2,16,86016,abc\n")
    with pytest.raises(CalibrationError, match=r"m\.csv:4: row 2: column peak_gib"):
        read_measurements(csv, Plan(), PAPER_MODEL)


def test_a_directory_is_refused_as_the_measurements_file(tmp_path):
    with pytest.raises(CalibrationError, match="is a directory"):
        read_measurements(tmp_path, Plan(), PAPER_MODEL)


def test_fit_names_the_row_with_an_out_of_range_stage_or_absurd_peak():
    """Measurements built in code go through the same checks as the CSV."""
    rows = [Measurement(PLANS[0], 50.0), Measurement(PLANS[3], 70.0, stage=9)]
    with pytest.raises(CalibrationError, match=r"row 2 .*stage 9 out of range for pp=4"):
        fit(PAPER_MODEL, rows, PAPER_CONSTANTS)
    rows = [Measurement(PLANS[0], 50.0), Measurement(PLANS[3], 1e308)]
    with pytest.raises(CalibrationError, match="row 2: peak_gib"):
        fit(PAPER_MODEL, rows, PAPER_CONSTANTS)
