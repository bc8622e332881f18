"""Step warnings: a verifier timeout scored 0 is said on the console, never silent."""

from __future__ import annotations

from rich.console import Console

from t1.run.console import print_warnings


def _printed(row: dict) -> str:
    console = Console(record=True, width=200, force_terminal=False)
    print_warnings(console, row)
    return console.export_text()


def test_verifier_timeouts_scored_zero_are_warned_with_the_setting_to_change():
    text = _printed({"fallbacks": {"verifier_timeout": 5, "no_report": 1}, "trials_admitted": 16})
    assert "5 of 16 admitted trials scored 0 on a verifier timeout" in text
    assert "rollout.verifier_deadline_s" in text and "rollout.concurrency" in text


def test_no_timeout_no_warning():
    assert _printed({"fallbacks": {"no_report": 2}, "trials_admitted": 4}) == ""
    assert _printed({"fallbacks": {}, "trials_admitted": 4}) == ""
    assert _printed({}) == ""
