"""Strict parsers of verifier output files: CTRF JSON, JUnit XML, reward.json, reward.txt.

Each parser takes the file's text and either returns the parsed value or raises `VerifierReportError` naming
what is wrong. `read_report` (in `t1_reward.report`) does the I/O and turns errors into tagged fallbacks.
Formats: CTRF per `ctrf-io/ctrf` schema (``results.tests[].name/status``) as pytest-json-ctrf writes it; JUnit
XML as pytest ``--junitxml`` writes it; reward files as Harbor's verifier reads them (flat numeric
``reward.json``, single float ``reward.txt``).
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from typing import Any

from t1_reward.outcomes import AssertionOutcome, AssertionStatus, VerifierReportError

# CTRF statuses (schema enum) -> our four. `pending` did not run, like `skipped`.
_CTRF_STATUS = {
    "passed": AssertionStatus.PASSED,
    "failed": AssertionStatus.FAILED,
    "skipped": AssertionStatus.SKIPPED,
    "pending": AssertionStatus.SKIPPED,
    "other": AssertionStatus.OTHER,
}


def _reject_constant(name: str) -> float:
    raise VerifierReportError(f"non-finite number {name} in JSON")


def _load_json(text: str, what: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except VerifierReportError as e:
        raise VerifierReportError(f"{what}: {e}") from None
    except json.JSONDecodeError as e:
        raise VerifierReportError(
            f"{what}: invalid JSON ({e.msg} at line {e.lineno} column {e.colno})"
        ) from None


def parse_ctrf(text: str) -> tuple[AssertionOutcome, ...]:
    """Parse a CTRF report into per-assertion outcomes.

    Accepts the current schema (``reportFormat``/``specVersion`` present) and the older plugin output (only
    ``results``). An unknown status string becomes `AssertionStatus.OTHER` with the raw status kept in
    `message`.
    Verifiers should pin pytest-json-ctrf >= 0.6: earlier versions (Harbor's template pins 0.3.5) report a
    parametrized test as one entry with retries, which collapses its assertions into one.

    Args:
        text: The content of ``ctrf.json``.

    Returns:
        One outcome per entry of ``results.tests``, in file order.

    Raises:
        VerifierReportError: invalid JSON; ``results.tests`` missing or not a list; a test without a string
            ``name`` or ``status``; zero tests (a report that lists nothing carries no per-assertion
            information); or ``results.summary.tests`` disagreeing with the number of entries (a partial
            report).
    """
    data = _load_json(text, "ctrf.json")
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise VerifierReportError("ctrf.json: top level must be an object with a 'results' object")
    results = data["results"]
    tests = results.get("tests")
    if not isinstance(tests, list):
        raise VerifierReportError("ctrf.json: 'results.tests' is missing or not a list")
    outcomes: list[AssertionOutcome] = []
    for i, test in enumerate(tests):
        if not isinstance(test, dict):
            raise VerifierReportError(f"ctrf.json: results.tests[{i}] is not an object")
        name, raw = test.get("name"), test.get("status")
        if not isinstance(name, str) or not isinstance(raw, str):
            raise VerifierReportError(f"ctrf.json: results.tests[{i}] lacks a string 'name' and 'status'")
        message = test.get("message")
        message = message if isinstance(message, str) else None
        status = _CTRF_STATUS.get(raw)
        if status is None:
            status, message = (
                AssertionStatus.OTHER,
                f"unknown CTRF status {raw!r}" + (f": {message}" if message else ""),
            )
        outcomes.append(AssertionOutcome(name=name, status=status, message=message))
    if not outcomes:
        raise VerifierReportError("ctrf.json: 'results.tests' is empty (no assertion was reported)")
    summary = results.get("summary")
    if (
        isinstance(summary, dict)
        and isinstance(summary.get("tests"), int)
        and summary["tests"] != len(outcomes)
    ):
        raise VerifierReportError(
            f"ctrf.json: summary.tests = {summary['tests']} but {len(outcomes)} tests are listed"
            " (partial report)"
        )
    return tuple(outcomes)


def parse_junit(text: str) -> tuple[AssertionOutcome, ...]:
    """Parse a JUnit XML report into per-assertion outcomes.

    A ``<testcase>`` with a ``<failure>`` or ``<error>`` child is `FAILED`, with ``<skipped>`` is `SKIPPED`,
    otherwise `PASSED`. Names are ``classname::name`` (just ``name`` when there is no classname).

    Args:
        text: The XML document (root ``<testsuites>`` or ``<testsuite>``).

    Returns:
        One outcome per ``<testcase>`` in document order.

    Raises:
        VerifierReportError: malformed XML, a testcase without a name, or no testcase at all.
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise VerifierReportError(f"JUnit XML: malformed ({e})") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise VerifierReportError(
            f"JUnit XML: root element is <{root.tag}>, expected <testsuites> or <testsuite>"
        )
    outcomes: list[AssertionOutcome] = []
    for case in root.iter("testcase"):
        name = case.get("name")
        if not name:
            raise VerifierReportError("JUnit XML: a <testcase> has no name")
        classname = case.get("classname")
        full = f"{classname}::{name}" if classname else name
        status, message = AssertionStatus.PASSED, None
        for child in case:
            if child.tag in ("failure", "error"):
                status, message = AssertionStatus.FAILED, child.get("message")
                break
            if child.tag == "skipped":
                status, message = AssertionStatus.SKIPPED, child.get("message")
        outcomes.append(AssertionOutcome(name=full, status=status, message=message))
    if not outcomes:
        raise VerifierReportError("JUnit XML: no <testcase> elements (no assertion was reported)")
    return tuple(outcomes)


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def parse_reward_json(text: str) -> float:
    """Parse Harbor's ``reward.json`` and return its ``"reward"`` value.

    Harbor requires a flat ``dict[str, float | int]``; consumers read the ``"reward"`` key.

    Args:
        text: The content of ``reward.json``.

    Returns:
        The binary (terminal) outcome b.

    Raises:
        VerifierReportError: invalid JSON, not an object, any non-numeric (or boolean, or non-finite) value,
            or no ``"reward"`` key.
    """
    data = _load_json(text, "reward.json")
    if not isinstance(data, dict):
        raise VerifierReportError('reward.json: must be a flat JSON object such as {"reward": 1.0}')
    bad = [k for k, v in data.items() if not _finite_number(v)]
    if bad:
        raise VerifierReportError(
            f"reward.json: non-numeric values for keys {bad} (Harbor requires numbers only)"
        )
    if "reward" not in data:
        raise VerifierReportError(f"reward.json: no 'reward' key (keys: {sorted(data)})")
    return float(data["reward"])


def parse_reward_txt(text: str) -> float:
    """Parse Harbor's ``reward.txt``: one finite float.

    Raises:
        VerifierReportError: empty file, not a number, or not finite.
    """
    stripped = text.strip()
    if not stripped:
        raise VerifierReportError("reward.txt: empty")
    try:
        value = float(stripped)
    except ValueError:
        raise VerifierReportError(f"reward.txt: not a number: {stripped[:40]!r}") from None
    if not math.isfinite(value):
        raise VerifierReportError(f"reward.txt: not finite: {stripped[:40]!r}")
    return value
