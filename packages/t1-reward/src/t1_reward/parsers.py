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
import re
import xml.etree.ElementTree as ET
from typing import Any

from t1_reward.outcomes import AssertionOutcome, AssertionStatus, VerifierReportError

# CTRF statuses (schema enum) -> our four. `pending` did not run, like `skipped`. Matched ignoring ASCII
# letter case; any other string is not a CTRF status and makes the report unparsable (never a silent failure).
_CTRF_STATUS = {
    "passed": AssertionStatus.PASSED,
    "failed": AssertionStatus.FAILED,
    "skipped": AssertionStatus.SKIPPED,
    "pending": AssertionStatus.SKIPPED,
    "other": AssertionStatus.OTHER,
}


def _reject_constant(name: str) -> float:
    raise VerifierReportError(f"non-finite number {name} in JSON")


def _quote(text: str, limit: int = 40) -> str:
    """The text as a repr, truncated to ``limit`` characters (verifier output may be huge)."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def _load_json(text: str, what: str) -> Any:
    # A UTF-8 byte-order mark (Windows editors, PowerShell) is not part of the JSON document.
    text = text.removeprefix("\ufeff")
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
    ``results``). A status is one of CTRF's five, ``passed``, ``failed``, ``skipped``, ``pending`` (read as
    skipped: it did not run) and ``other``, matched ignoring ASCII letter case (``PASSED`` is ``passed``).
    Any other status (``ok``, ``error``, ``passed `` with a space) is not CTRF: the whole report is refused,
    so that a verifier's format slip falls back to the binary outcome with its cause instead of being
    scored as a failed assertion, the agent's 0 (T1 §5.2, Fallback).
    Verifiers should pin pytest-json-ctrf >= 0.6: earlier versions (Harbor's template pins 0.3.5) report a
    parametrized test as one entry with retries, which collapses its assertions into one.
    A leading UTF-8 byte-order mark is ignored.

    Args:
        text: The content of ``ctrf.json``.

    Returns:
        One outcome per entry of ``results.tests``, in file order. A name that several entries share with
        different ``filePath`` values is qualified as ``filePath::name`` (distinct tests of a reporter whose
        names are bare titles); entries that repeat a name otherwise are returned as they are (the file's
        content), and `read_report` folds them with `fold_outcomes`.

    Raises:
        VerifierReportError: invalid JSON; ``results.tests`` missing or not a list; a test without a string
            ``name`` or ``status``; a status that is not one of CTRF's five (the message quotes it and the
            test's index and name); zero tests (a report that lists nothing carries no per-assertion
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
    files: list[str | None] = []
    for i, test in enumerate(tests):
        if not isinstance(test, dict):
            raise VerifierReportError(f"ctrf.json: results.tests[{i}] is not an object")
        name, raw = test.get("name"), test.get("status")
        if not isinstance(name, str) or not isinstance(raw, str):
            raise VerifierReportError(f"ctrf.json: results.tests[{i}] lacks a string 'name' and 'status'")
        message = test.get("message")
        message = message if isinstance(message, str) else None
        status = _CTRF_STATUS.get(raw.lower()) if raw.isascii() else None
        if status is None:
            raise VerifierReportError(
                f"ctrf.json: results.tests[{i}] ({_quote(name)}) has status {_quote(raw)}, not a CTRF status "
                f"({', '.join(_CTRF_STATUS)}, in any letter case)"
            )
        outcomes.append(AssertionOutcome(name=name, status=status, message=message))
        file_path = test.get("filePath")
        files.append(file_path if isinstance(file_path, str) and file_path else None)
    # One name in several files is several tests (a non-pytest reporter whose names are bare titles): qualify
    # those names with their file, so that only true repeats are folded later. pytest node ids are unique.
    paths_of: dict[str, set[str | None]] = {}
    for o, f in zip(outcomes, files, strict=True):
        paths_of.setdefault(o.name, set()).add(f)
    outcomes = [
        AssertionOutcome(f"{f}::{o.name}", o.status, o.message) if f and len(paths_of[o.name]) > 1 else o
        for o, f in zip(outcomes, files, strict=True)
    ]
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
        text: The XML document (root ``<testsuites>`` or ``<testsuite>``; see `xml_root_tag` to tell a JUnit
            report from other XML before parsing).

    Returns:
        One outcome per ``<testcase>`` in document order. Repeated names are returned as they are;
        `read_report` folds them with `fold_outcomes`.

    Raises:
        VerifierReportError: malformed XML, a root other than ``<testsuites>``/``<testsuite>``, a testcase
            without a name, or no testcase at all.
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


#: Root elements of a JUnit XML report; any other XML file (coverage.xml, ...) is not one.
JUNIT_ROOTS = ("testsuites", "testsuite")


def xml_root_tag(text: str) -> str | None:
    """The tag of an XML document's root element, read from its start tag only.

    Lets `read_report` ignore XML files that are not JUnit reports (``coverage.xml`` has root
    ``<coverage>``) while a truncated JUnit file (``<testsuites><testsuite>`` cut short) is still recognised
    as JUnit, and so reported unparsable rather than ignored.

    Args:
        text: The XML document, possibly truncated or malformed after the root's start tag.

    Returns:
        The root tag (``{namespace}tag`` when namespaced), or None when no root start tag can be read (empty
        or not XML).
    """
    parser = ET.XMLPullParser(events=("start",))
    try:
        parser.feed(text)
        for _event, element in parser.read_events():
            return element.tag
    except ET.ParseError:
        # The error may come after the root's start tag: events read before it are still valid.
        for _event, element in parser.read_events():
            return element.tag
    return None


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def parse_reward_json(text: str) -> float:
    """Parse Harbor's ``reward.json`` and return its ``"reward"`` value.

    Harbor requires a flat ``dict[str, float | int]``; consumers read the ``"reward"`` key.

    Args:
        text: The content of ``reward.json`` (a leading UTF-8 byte-order mark is ignored).

    Returns:
        The binary (terminal) outcome b, in [0, 1] (1 solved, 0 not; a fraction is kept as the verifier's
        partial credit).

    Raises:
        VerifierReportError: invalid JSON, not an object, any non-numeric (or boolean, or non-finite) value,
            no ``"reward"`` key, or a ``"reward"`` outside [0, 1] (the message quotes it): an outcome such as
            -1 or 2.5 is a verifier slip, never a reward.
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
    return _binary_in_range(float(data["reward"]), f"reward.json: 'reward' = {data['reward']!r}")


def _binary_in_range(value: float, what: str) -> float:
    """``value`` if it lies in [0, 1] (-0.0 read as 0.0).

    Raises:
        VerifierReportError: outside [0, 1]; the message opens with ``what``, which quotes the value.
    """
    if not 0.0 <= value <= 1.0:
        raise VerifierReportError(
            f"{what} is outside [0, 1]: a binary outcome is 1 (solved), 0 (not) or a fraction between"
        )
    return value + 0.0


# A plain decimal number (ASCII digits, optional sign, fraction and exponent) with optional ASCII whitespace
# around it. Stricter than float(), which also takes "1_0", "nan", "inf" and non-ASCII digits.
_WS = r"[ \t\r\n\f\v]*"
_REWARD_TXT = re.compile(_WS + r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)" + _WS)


def parse_reward_txt(text: str) -> float:
    """Parse Harbor's ``reward.txt``: one finite decimal number in [0, 1].

    Accepted: optional ASCII whitespace around an optional sign, ASCII digits with an optional decimal point
    and fraction, and an optional exponent (``1``, ``0.5``, ``+1``, ``.5``, ``1e-05`` as Python prints small
    floats), whose value lies in [0, 1]. Refused, unlike Python's ``float()``: digit separators (``1_0``),
    ``nan``/``inf``, non-ASCII digits, two numbers (``1 0``). A leading UTF-8 byte-order mark is ignored.

    Args:
        text: The content of ``reward.txt``.

    Returns:
        The binary (terminal) outcome b, in [0, 1].

    Raises:
        VerifierReportError: empty file, not a plain decimal number (the message quotes the text, truncated
            to 40 characters), not finite (e.g. ``1e999``), or outside [0, 1] (``-1``, ``2.5``; quoted).
    """
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise VerifierReportError("reward.txt: empty")
    match = _REWARD_TXT.fullmatch(text)
    if match is None:
        raise VerifierReportError(f"reward.txt: not a plain decimal number: {_quote(text.strip())}")
    value = float(match.group(1))
    if not math.isfinite(value):
        raise VerifierReportError(f"reward.txt: not finite: {_quote(match.group(1))}")
    return _binary_in_range(value, f"reward.txt: {_quote(match.group(1))}")
